"""runner/executors.py and slots.py: submitit's long-lived slots (its local executor) and a local Ray instance
give the records the local pool gives; a job that kills its slot is put back, then fails alone; a driver killed
mid-run and resumed reruns nothing recorded; --device reaches the records and PROVENANCE.md; bad engine options
are one line, exit 2."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from symformer import cli
from symformer.experiments import base as ebase
from symformer.results import ExperimentResult
from symformer.runner.executors import Engine, using_engine
from symformer.runner.jobs import Job, JobError, recorded_plan, run_jobs

PLAN = {"experiment": "tiny", "protocol": "1", "quick": True, "seed": 0, "options": {}, "full": False}


def _tiny(seed: int, n: int) -> dict:
    """A small float64 computation whose result is bit-exact wherever it runs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    return {"trace": float((a @ a.T).trace()), "seed": seed}


def _rejects(n: int) -> int:
    raise ValueError(f"n: got {n}, expected an even number")


def _jobs():
    return [Job(f"s{i}", _tiny, {"seed": i, "n": 8}) for i in range(2)]


def _records(runs):
    """Every record without its provenance (which says where and when it ran: that differs by engine)."""
    return {
        p.name: {k: v for k, v in json.loads(p.read_text()).items() if k != "provenance"}
        for p in sorted(runs.glob("*.json"))
    }


def _through(engine, runs, jobs=None, n_workers=2):
    with recorded_plan(runs, PLAN, False), using_engine(engine, close=False):
        return run_jobs(jobs or _jobs(), runs, n_workers=n_workers)


@pytest.fixture(scope="module")
def local_records(tmp_path_factory):
    """The local engine's records (--jobs 1: in this process; test_jobs shows the pool's workers agree)."""
    runs = tmp_path_factory.mktemp("local") / "runs"
    got = _through(Engine(), runs, n_workers=1)
    return got, _records(runs)


@pytest.fixture(scope="module")
def by_value():
    """Engines pickle a job's function with cloudpickle: this test module is not importable by their workers, so
    its functions travel by value."""
    cloudpickle = pytest.importorskip("cloudpickle")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def ray_engine(by_value):
    pytest.importorskip("ray")
    from symformer.runner.executors import RayEngine

    engine = RayEngine(n_workers=2)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def submitit_engine(by_value, tmp_path_factory):
    """One engine for the module's tests: its slots stay up between them, as between an experiment's run_jobs
    calls. Slots of a killed driver stop 20 s after its last heartbeat (default 300 s)."""
    pytest.importorskip("submitit")
    from symformer.runner.executors import SubmititEngine

    folder = tmp_path_factory.mktemp("submitit")
    engine = SubmititEngine(folder, cluster="local")
    yield engine
    engine.close()
    assert not list(folder.glob("queue-*"))  # its work folder is removed; the slots exit at their next look


def _dies(code: int) -> int:
    """A job that ends its worker process outright (a segfault, the OOM killer, a time limit)."""
    os._exit(code)


def _rejecting_job_is_named(engine, runs):
    """A job that rejects its input: the other is recorded, and JobError's cause keeps the job's own type."""
    with pytest.raises(JobError, match="job 'bad'") as err:
        _through(engine, runs, [_jobs()[0], Job("bad", _rejects, {"n": 3})])
    assert isinstance(err.value.__cause__, ValueError) and "n: got 3" in str(err.value.__cause__)
    assert sorted(p.name for p in runs.glob("*.json") if p.name != "PLAN.json") == ["s0.json"]


def test_ray_records_what_the_local_pool_records(ray_engine, tmp_path, local_records):
    runs = tmp_path / "runs"
    got = _through(ray_engine, runs)
    assert (got, _records(runs)) == local_records
    prov = json.loads((runs / "s0.json").read_text())["provenance"]
    assert prov["engine"] == "ray" and prov["device"] == "cpu" and prov["host"] and prov["driver_host"]
    _rejecting_job_is_named(ray_engine, tmp_path / "bad")


def test_submitit_records_what_the_local_pool_records(submitit_engine, tmp_path, local_records):
    """Two long-lived slots run the jobs from the work folder; the driver's records equal the local engine's."""
    runs = tmp_path / "runs"
    got = _through(submitit_engine, runs)
    assert (got, _records(runs)) == local_records
    prov = json.loads((runs / "s0.json").read_text())["provenance"]
    assert prov["engine"] == "submitit" and prov["device"] == "cpu" and prov["host"] and prov["driver_host"]
    slots = set(submitit_engine.slots)
    assert len(slots) == 2 and not list(submitit_engine.queue.root.glob("todo/*"))
    _rejecting_job_is_named(submitit_engine, tmp_path / "bad")
    assert set(submitit_engine.slots) == slots  # a job that raises costs no slot: the same two ran both batches


def test_submitit_slot_that_ends_under_a_job(submitit_engine, tmp_path, monkeypatch, local_records):
    """A job that kills its worker is put back once (the other slot takes it, as it would resume a job whose slot
    hit its time limit), then fails alone, named; the jobs beside it are recorded."""
    monkeypatch.setattr(submitit_engine, "MAX_LOSSES", 2)
    runs = tmp_path / "runs"
    with pytest.raises(JobError, match="job 'dies' failed .*2 submitit workers ended while running it") as err:
        _through(submitit_engine, runs, [*_jobs(), Job("dies", _dies, {"code": 3})])
    assert "1 of 3 jobs failed" in str(err.value)
    assert sorted(p.name for p in runs.glob("s*.json")) == ["s0.json", "s1.json"]
    assert not submitit_engine.slots  # both ended under it; the next batch submits new ones


DRIVER = """
import sys, time
from pathlib import Path
from symformer.runner.executors import Engine, SubmititEngine, using_engine
from symformer.runner.jobs import Job, run_jobs


def nap(i: int, secs: float) -> int:
    import os

    if os.environ.get("NAP_PIDS"):  # the test looks for the worker after the driver is killed
        (Path(os.environ["NAP_PIDS"]) / str(os.getpid())).touch()
    time.sleep(secs)
    return i


if __name__ == "__main__":
    from tinydriver import nap  # by its module's name, as the resumed run in the test names it
    runs = Path(sys.argv[1])
    jobs = [Job(f"n{i}", nap, {"i": i, "secs": 0.2 if i < 2 else 10.0}) for i in range(5)]
    engine = Engine() if sys.argv[2] == "local" else SubmititEngine(runs.parent / "submitit", cluster="local")
    with using_engine(engine):
        run_jobs(jobs, runs, n_workers=3)
"""


def pid_after_nap(secs: float) -> int:
    time.sleep(secs)
    return os.getpid()


def exit_abruptly(code: int) -> None:
    os._exit(code)  # a worker that dies mid-job (a segfault, the OOM killer)


def test_the_local_engine_keeps_its_pool_across_run_jobs_calls():
    """An experiment calls run_jobs several times (teleport: 4), and each call used to spawn its workers and import
    torch in them again. Under the local engine (`reproduce` runs under it) they are spawned once; its close ends
    them."""
    engine = Engine()
    with using_engine(engine):
        first = run_jobs([Job(f"a{i}", pid_after_nap, {"secs": 0.5}) for i in range(4)], None, n_workers=2)
        kept = engine.kept
        workers = kept.workers()
        second = run_jobs([Job(f"b{i}", pid_after_nap, {"secs": 0.5}) for i in range(4)], None, n_workers=2)
        # the second call's jobs ran in the first call's workers (a worker may have taken no job while it started)
        pids = {p.pid for p in workers}
        assert engine.kept is kept and len(pids) <= 2 and set(first.values()) | set(second.values()) <= pids
    assert engine.kept is None and not [p for p in workers if p.is_alive()]


def test_a_broken_kept_pool_is_replaced():
    """A worker that dies breaks its pool for every later job: the engine drops it and the next call starts anew."""
    engine = Engine()
    with using_engine(engine):
        with pytest.raises(JobError, match="BrokenProcessPool"):
            run_jobs([Job("x", exit_abruptly, {"code": 3}), Job("y", pid_after_nap, {"secs": 1.0})], None, n_workers=2)
        assert engine.kept is None
        got = run_jobs([Job(f"c{i}", pid_after_nap, {"secs": 0.1}) for i in range(2)], None, n_workers=2)
        assert len(got) == 2 and engine.kept is not None


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent has not reaped it yet has exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("engine", ["local", "submitit"])
def test_killed_driver_resumes_without_rerunning_recorded_jobs(engine, tmp_path, monkeypatch):
    """The driver is SIGKILLed with jobs in flight; --resume reuses the two records and reruns the rest (it does
    not wait for submitit's orphaned slots: what they finish is never recorded)."""
    if engine != "local":
        pytest.importorskip("submitit")
    (tmp_path / "tinydriver.py").write_text(textwrap.dedent(DRIVER))
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env["SYMFORMER_SLOT_STALE_S"] = "20"  # orphaned slots stop soon after the test even without the STOP
    pids = tmp_path / "pids"
    pids.mkdir()
    env["NAP_PIDS"] = str(pids)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "tinydriver.py"), str(runs), engine], env=env)
    deadline = time.time() + 120
    want_workers = 3 if engine == "local" else 0  # every worker has started a job (spawning one takes a while)
    while (
        (len(list(runs.glob("n*.json"))) < 2 or len(list(pids.iterdir())) < want_workers)
        and time.time() < deadline
        and proc.poll() is None
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # the driver dies outright, with three jobs in flight (sleeping 10 s)
    proc.wait()
    recorded = {p.name: p.read_text() for p in runs.glob("n*.json")}
    assert sorted(recorded) == ["n0.json", "n1.json"]
    if engine == "local":  # its pool's workers exit with it, mid-job (before, they lived on, idle, for good)
        workers = {int(p.name) for p in pids.iterdir()}
        assert len(workers) == 3
        deadline = time.time() + 8  # well before the 10 s naps would end
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)]
    if engine == "submitit":  # a restarted driver's engine STOPs the old queue: its slots take no further job
        from symformer.runner.executors import SubmititEngine

        (old,) = (runs.parent / "submitit").glob("queue-*")
        restarted = SubmititEngine(runs.parent / "submitit", cluster="local")
        restarted._open()
        restarted._take_over(tmp_path / "other" / "runs")  # another experiment's folder: not the old driver's
        assert not (old / "STOP").exists()
        restarted._take_over(runs)
        assert (old / "STOP").exists() and not (restarted.queue.root / "STOP").exists()
        restarted.close()
    monkeypatch.syspath_prepend(str(tmp_path))
    import tinydriver

    stats = {}
    jobs = [Job(f"n{i}", tinydriver.nap, {"i": i, "secs": 0.0}) for i in range(5)]
    jobs[:2] = [Job(f"n{i}", tinydriver.nap, {"i": i, "secs": 0.2}) for i in range(2)]
    assert run_jobs(jobs, runs, resume=True, stats=stats) == {f"n{i}": i for i in range(5)}
    assert stats == {"reused": 2, "ran": 3}
    assert {p: (runs / p).read_text() for p in recorded} == recorded  # the records are the ones it had written


@pytest.fixture
def fake(monkeypatch):
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)

    def tiny(ctx):
        run_jobs(_jobs(), ctx.out_dir / "runs", ctx.jobs, ctx.resume)
        return ExperimentResult()

    reg.register("tiny")(ebase.ExperimentSpec("tiny", tiny, "a few tiny jobs"))
    return reg


def test_reproduce_through_submitit(fake, by_value, capsys, tmp_path, monkeypatch, local_records):
    pytest.importorskip("submitit")
    monkeypatch.setenv("SYMFORMER_SUBMITIT_CLUSTER", "local")
    assert cli.main(["reproduce", "tiny", "--executor", "submitit", "--jobs", "2", "--out", str(tmp_path)]) == 0
    assert "[engine] submitit (local) started" in capsys.readouterr().err
    runs = tmp_path / "tiny" / "runs"
    got = {k: v["result"] for k, v in _records(runs).items() if k != "PLAN.json"}
    assert got == {k: v["result"] for k, v in local_records[1].items() if k != "PLAN.json"}
    assert json.loads((runs / "s0.json").read_text())["provenance"]["engine"] == "submitit"
    saved = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert saved["config"]["runs_provenance"]["engine"] == {"submitit": 2}
    assert "- runs/ records by device: cpu (2); engine: submitit (2)" in (tmp_path / "tiny" / "report.md").read_text()
    prov = (tmp_path / "tiny" / "PROVENANCE.md").read_text()
    assert "- last command: `symformer reproduce tiny --executor submitit" in prov
    assert "- engine: submitit (2)\n- device: cpu (2)\n- worker host: " in prov and "mix devices" not in prov


def test_report_says_when_records_mix_devices(tmp_path):
    from symformer.runner.jobs import records_where, where_note, write_provenance

    run_jobs(_jobs(), tmp_path)
    rec = json.loads((tmp_path / "s1.json").read_text())
    rec["provenance"]["device"] = "cuda"
    (tmp_path / "s1.json").write_text(json.dumps(rec))
    note = where_note(records_where(tmp_path))
    assert note.startswith("records mix devices: runs/ records by device: cpu (1), cuda (1); engine: local (2)")
    assert "- the records mix devices" in write_provenance(tmp_path, records_where(tmp_path)).read_text()
    (tmp_path / "s1.json").unlink()
    assert not where_note(records_where(tmp_path)).startswith("records mix")
    assert "mix devices" not in write_provenance(tmp_path, records_where(tmp_path)).read_text()
    (tmp_path / "PROVENANCE.md").write_text("# written by hand\n")  # a recorded run's own is never replaced
    assert write_provenance(tmp_path, records_where(tmp_path)) is None
    assert (tmp_path / "PROVENANCE.md").read_text() == "# written by hand\n"


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--executor", "dask"], "--executor: got 'dask', expected one of local, submitit, ray"),
        (["--executor", "ray", "--ray-address", "127.0.0.1:1"], "--ray-address: got '127.0.0.1:1'"),
        (["--executor", "submitit", "--gpus-per-job", "1"], "--gpus-per-job: got 1 with --device cpu"),
        (["--slurm-partition", "gpu"], "--slurm-partition: got 'gpu' with --executor local"),
        (["--device", "tpu"], "--device: got 'tpu', expected 'cpu' or 'cuda' (or 'cuda:N', 'mps')"),
    ],
)
def test_bad_engine_options_one_line_exit_2(argv, says, fake, capsys, tmp_path):
    if "ray" in argv:
        pytest.importorskip("ray")
    assert cli.main(["reproduce", "tiny", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and not (tmp_path / "tiny").exists()


@pytest.mark.parametrize("engine, extra", [("ray", "ray"), ("submitit", "slurm")])
def test_missing_extra_names_it(engine, extra, fake, capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == engine else real(name, *a))
    assert cli.main(["reproduce", "tiny", "--executor", engine, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pip install 'symformer[{extra}]'" in err


def test_cuda_without_a_gpu_is_refused(fake, capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(["reproduce", "tiny", "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device: got 'cuda', expected 'cpu' here: torch finds no CUDA device" in err


def test_cuda_on_a_cluster_is_for_its_nodes(monkeypatch, tmp_path):
    """A Slurm driver (a login node) need not have a GPU: --device cuda is checked by each job on its node, and
    each slot gets one GPU unless --gpus-per-job says otherwise; on this machine's engines it is checked here."""
    import importlib.util

    import torch

    from symformer.runner import executors

    made, real = {}, importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: True if name == "submitit" else real(name, *a))
    monkeypatch.setattr(executors, "SubmititEngine", lambda *a: made.setdefault("args", a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("SYMFORMER_SUBMITIT_CLUSTER", "slurm")
    executors.make_engine("submitit", tmp_path, 2, "cuda", "gpu", 60)
    assert made["args"] == (tmp_path, "cuda", "gpu", 60, 1, 1, "slurm")
    monkeypatch.setenv("SYMFORMER_SUBMITIT_CLUSTER", "local")
    with pytest.raises(ValueError, match="--device: got 'cuda', expected 'cpu' here: torch finds no CUDA device"):
        executors.make_engine("submitit", tmp_path, 2, "cuda")


def _on(device: str, seed: int) -> dict:
    """A float64 product on `device` (what an experiment's job does with ctx.device)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, 64, generator=g, dtype=torch.float64).to(device)
    return {"trace": float((a @ a.T).trace()), "device": (a @ a.T).device.type}


@pytest.mark.cuda
@pytest.mark.parametrize("executor", ["local", "submitit"])
def test_reproduce_on_the_gpu(executor, by_value, monkeypatch, capsys, tmp_path):
    """--device cuda reaches the experiment (ctx.device) and the records: each names cuda and its GPU, and the
    results equal the CPU's to float64 rounding."""
    if executor == "submitit":
        pytest.importorskip("submitit")
        monkeypatch.setenv("SYMFORMER_SUBMITIT_CLUSTER", "local")
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)

    def ongpu(ctx):
        jobs = [Job(f"g{i}", _on, {"device": ctx.device, "seed": i}) for i in range(2)]
        got = run_jobs(jobs, ctx.out_dir / "runs", ctx.jobs, ctx.resume)
        return ExperimentResult(metrics={k: v["trace"] for k, v in got.items()})

    reg.register("ongpu")(ebase.ExperimentSpec("ongpu", ongpu, "two float64 products on ctx.device"))
    jobs = "2" if executor == "submitit" else "1"  # the local pool's spawned workers cannot import this module
    argv = ["reproduce", "ongpu", "--device", "cuda", "--executor", executor, "--jobs", jobs, "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    for i in range(2):
        rec = json.loads((tmp_path / "ongpu" / "runs" / f"g{i}.json").read_text())
        assert rec["result"]["device"] == "cuda" and rec["provenance"]["device"] == "cuda" and rec["provenance"]["gpu"]
        assert rec["result"]["trace"] == pytest.approx(_on("cpu", i)["trace"], rel=1e-12)
    saved = json.loads((tmp_path / "ongpu" / "results.json").read_text())
    assert saved["environment"]["device"] == "cuda"
    assert "- device: cuda (2)\n" in (tmp_path / "ongpu" / "PROVENANCE.md").read_text()


def test_slot_time_limit_hands_the_job_back(tmp_path):
    """submitit stops a slot at its time limit by raising UncompletedJobError in the running job: the slot ends
    holding the claim (no outcome is written), so the driver puts the job back; a slot that Slurm requeued after a
    preemption first runs what it still holds."""
    pytest.importorskip("submitit")
    from submitit.core.utils import UncompletedJobError

    from symformer.runner import slots
    from symformer.runner.jobs import _remote_call

    queue = slots.Queue(tmp_path / "queue")
    (tmp_path / "queue" / "claimed" / "slot001").mkdir()
    claimed = tmp_path / "queue" / "claimed" / "slot001" / "0001-000000-s0"
    slots.atomic_pickle(claimed, (_jobs()[0], None))

    def timed_out(job, work, engine, device):
        return "error", UncompletedJobError("Job not requeued because: timed-out and not checkpointable.")

    with pytest.raises(UncompletedJobError):
        slots._run_claimed(claimed, queue.root, "slot001", timed_out, "submitit", "cpu")
    assert claimed.exists() and not os.listdir(queue.root / "done")
    queue.stop(remove=False)  # the requeued slot runs its claim, then sees STOP
    assert slots.slot_worker(str(queue.root), "slot001", _remote_call, "submitit", "cpu") == 1
    ((name, payload),) = queue.outcomes([claimed.name])
    assert payload["got"][0] == "ok" and payload["got"][1][0] == _tiny(0, 8) and not claimed.exists()
