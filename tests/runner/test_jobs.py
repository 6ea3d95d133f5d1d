"""runner/jobs.py: records are atomic JSON, reused only with resume and a matching signature."""

import json
import time
from pathlib import Path

import pytest

from symformer.experiments.teleport import speedup_pct
from symformer.runner import records
from symformer.runner.jobs import SPENT_FILE, Job, run_jobs


def _jobs():
    return [
        Job("a", speedup_pct, {"base": [0.1, 0.5], "tele": [0.5, 0.6]}),
        Job("b", speedup_pct, {"base": [0.1, 0.2, 0.5], "tele": [0.1, 0.5, 0.6]}),
    ]


def test_serial_results_and_records(tmp_path):
    got = run_jobs(_jobs(), tmp_path)
    assert got == {"a": 50.0, "b": pytest.approx(100 / 3)}
    rec = json.loads((tmp_path / "a.json").read_text())
    assert rec["result"] == 50.0 and rec["signature"]["fn"].endswith("speedup_pct")
    assert not list(tmp_path.glob("*.tmp"))
    prov = rec["provenance"]  # a run spanning sessions says, per record, which commit and machine made it
    assert (
        set(prov)
        == {"git_sha", "host", "machine", "seconds", "cpu_seconds", "finished_at", "engine", "device", "driver_host"}
        and prov["seconds"] >= 0
        and prov["cpu_seconds"] >= 0
    )
    assert prov["engine"] == "local" and prov["device"] == "cpu"


def test_provenance_never_decides_reuse(tmp_path):
    run_jobs(_jobs(), tmp_path)
    rec = json.loads((tmp_path / "a.json").read_text())
    rec["result"], rec["provenance"]["git_sha"] = -1.0, "0" * 40  # recorded at another commit
    (tmp_path / "a.json").write_text(json.dumps(rec))
    assert run_jobs(_jobs(), tmp_path, resume=True)["a"] == -1.0


def test_resume_reuses_only_matching_records(tmp_path):
    run_jobs(_jobs(), tmp_path)
    rec = json.loads((tmp_path / "a.json").read_text())
    rec["result"] = -1.0  # a marker: a reused record returns it, a fresh run does not
    (tmp_path / "a.json").write_text(json.dumps(rec))
    stats = {}
    assert run_jobs(_jobs(), tmp_path, resume=True, stats=stats)["a"] == -1.0
    assert stats == {"reused": 2, "ran": 0}
    assert run_jobs(_jobs(), tmp_path, resume=False)["a"] == 50.0  # without --resume: always fresh
    (tmp_path / "a.json").write_text(json.dumps(rec))
    changed = [Job("a", speedup_pct, {"base": [0.1, 0.5], "tele": [0.1, 0.5]})]
    assert run_jobs(changed, tmp_path, resume=True)["a"] == 0.0  # other arguments: rerun
    (tmp_path / "b.json").write_text("{truncated")
    assert run_jobs(_jobs(), tmp_path, resume=True)["b"] == pytest.approx(100 / 3)  # unreadable: rerun


def test_resume_with_workers_when_every_record_is_reused(tmp_path):
    first = run_jobs(_jobs(), tmp_path, n_workers=2)
    stats = {}
    assert run_jobs(_jobs(), tmp_path, n_workers=2, resume=True, stats=stats) == first
    assert stats == {"reused": 2, "ran": 0}


def test_worker_processes_give_the_same_results(tmp_path):
    assert run_jobs(_jobs(), tmp_path, n_workers=2) == run_jobs(_jobs(), None)


@pytest.mark.parametrize(
    "jobs, name", [([Job("a/b", speedup_pct)], "jobs"), ([Job("a", speedup_pct), Job("a", speedup_pct)], "jobs")]
)
def test_bad_jobs(jobs, name):
    with pytest.raises(ValueError, match=name):
        run_jobs(jobs)


def test_bad_worker_count():
    with pytest.raises(ValueError, match="n_workers"):
        run_jobs(_jobs(), n_workers=0)


def test_serial_jobs_run_on_the_workers_single_thread():
    """--jobs 1 runs each job on one intra-op thread, as a worker does, so a record never depends on --jobs;
    the caller's thread setting comes back afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        jobs = [Job("t1", torch.get_num_threads, {}), Job("t2", torch.get_num_threads, {})]
        assert run_jobs(jobs, None, n_workers=1) == {"t1": 1, "t2": 1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def resumable_count(target: int, work_dir: str | None = None) -> dict:
    """A job that counts to `target`, one step per call, keeping its count in work_dir (a checkpoint)."""
    from pathlib import Path

    done = 0
    if work_dir is not None:
        path = Path(work_dir) / "count"
        path.parent.mkdir(parents=True, exist_ok=True)
        done = int(path.read_text()) if path.exists() else 0
        done += 1
        path.write_text(str(done))
        if done < target:
            raise RuntimeError(f"killed at {done}")
    return {"count": done, "had_work_dir": work_dir is not None}


def test_checkpointing_jobs_get_a_work_dir_that_resume_keeps(tmp_path):
    job = [Job("c", resumable_count, {"target": 3}, checkpoints=True)]
    work = tmp_path / ".partial" / "c"
    for _ in range(2):  # killed twice; each call leaves its checkpoint behind
        with pytest.raises(RuntimeError, match="killed"):
            run_jobs(job, tmp_path, resume=True)
    assert (work / "count").read_text() == "2"
    assert run_jobs(job, tmp_path, resume=True)["c"] == {"count": 3, "had_work_dir": True}
    assert not work.exists()  # recorded, so its checkpoints are gone
    rec = json.loads((tmp_path / "c.json").read_text())
    assert "work_dir" not in rec["signature"]["kwargs"]


def test_resume_keeps_checkpoints_only_for_the_same_job(tmp_path):
    """--resume with other arguments under the same key (another config) does not read the first job's checkpoints;
    a folder from before the signature file existed is adopted."""
    work = tmp_path / ".partial" / "c"
    with pytest.raises(RuntimeError, match="killed at 1"):
        run_jobs([Job("c", resumable_count, {"target": 3}, checkpoints=True)], tmp_path, resume=True)
    assert (work / "count").read_text() == "1"
    with pytest.raises(RuntimeError, match="killed at 1"):  # other arguments: afresh (a stale count would say 2)
        run_jobs([Job("c", resumable_count, {"target": 4}, checkpoints=True)], tmp_path, resume=True)
    lines: list[str] = []
    with pytest.raises(RuntimeError, match="killed at 2"):  # the same job again: its checkpoint is read
        run_jobs([Job("c", resumable_count, {"target": 4}, checkpoints=True)], tmp_path, resume=True, log=lines.append)
    assert "(1 resume from checkpoints)" in lines[0]
    (work / "signature.json").unlink()  # an older folder, without the file: kept
    with pytest.raises(RuntimeError, match="killed at 3"):
        run_jobs([Job("c", resumable_count, {"target": 5}, checkpoints=True)], tmp_path, resume=True)


def test_without_resume_a_checkpointing_job_starts_afresh(tmp_path):
    job = [Job("c", resumable_count, {"target": 1}, checkpoints=True)]
    work = tmp_path / ".partial" / "c"
    work.mkdir(parents=True)
    (work / "count").write_text("5")  # a stale checkpoint of an earlier run
    assert run_jobs(job, tmp_path)["c"]["count"] == 1
    assert run_jobs(job, None)["c"] == {"count": 0, "had_work_dir": False}  # no records: no checkpoints either


def nap_then_count(target: int, nap: float, work_dir: str | None = None) -> int:
    """resumable_count after a nap: each call spends at least `nap` seconds of wall time."""
    time.sleep(nap)
    return resumable_count(target, work_dir)["count"]


def test_a_resumed_job_records_what_every_call_spent(tmp_path):
    """A job resumed from its checkpoints is recorded by its last call; its record also sums every call's
    seconds (facts_full_core_hours counts them), and says this call's CPU seconds."""
    job = [Job("c", nap_then_count, {"target": 3, "nap": 0.2}, checkpoints=True)]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="killed"):
            run_jobs(job, tmp_path, resume=True)
    assert json.loads((tmp_path / ".partial" / "c" / SPENT_FILE).read_text())["parts"] == 2
    assert run_jobs(job, tmp_path, resume=True)["c"] == 3
    prov = json.loads((tmp_path / "c.json").read_text())["provenance"]
    assert prov["parts"] == 3
    assert prov["seconds"] >= 0.2 and prov["seconds_all_parts"] >= prov["seconds"] + 0.4  # two earlier naps
    assert 0 <= prov["cpu_seconds"] <= prov["cpu_seconds_all_parts"] < prov["seconds_all_parts"]  # naps cost no CPU
    plain = [Job("p", nap_then_count, {"target": 0, "nap": 0.0})]  # no work_dir: this call only
    run_jobs(plain, tmp_path)
    assert "parts" not in json.loads((tmp_path / "p.json").read_text())["provenance"]


def read_ledger_mid_run(nap: float, work_dir: str) -> dict:
    time.sleep(nap)
    return json.loads((Path(work_dir) / SPENT_FILE).read_text())


def test_the_cost_ledger_is_written_while_the_job_runs(tmp_path, monkeypatch):
    """A SIGKILLed call cannot write at its end: the ledger is rewritten every SPENT_PERIOD seconds meanwhile."""
    monkeypatch.setattr(records, "SPENT_PERIOD", 0.05)
    t0 = time.perf_counter()
    got = run_jobs([Job("r", read_ledger_mid_run, {"nap": 1.0}, checkpoints=True)], tmp_path)["r"]
    # written during the nap (a ledger written only at the end would not exist yet), and never ahead of the clock
    assert got["parts"] == 1 and 0.1 <= got["seconds_all_parts"] <= time.perf_counter() - t0


def sometimes_fails(x: int) -> int:
    if x == 2:
        raise ValueError("x must not be 2")
    return 10 * x


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_job_does_not_lose_the_others(tmp_path, workers):
    from symformer.runner.jobs import JobError

    jobs = [Job(f"j{x}", sometimes_fails, {"x": x}) for x in (1, 2, 3)]
    with pytest.raises(JobError, match=r"job 'j2' failed \(ValueError: x must not be 2\); 1 of 3") as info:
        run_jobs(jobs, tmp_path, n_workers=workers)
    assert isinstance(info.value.__cause__, ValueError)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["j1.json", "j3.json"]
    stats = {}
    with pytest.raises(JobError):
        run_jobs(jobs, tmp_path, n_workers=workers, resume=True, stats=stats)
    assert stats == {"reused": 2, "ran": 1}  # a resumed call reruns only the failed job


def test_log_hears_reuse_and_each_finished_job(tmp_path):
    lines = []
    run_jobs(_jobs()[:1], tmp_path, log=lines.append)
    run_jobs(_jobs(), tmp_path, resume=True, log=lines.append)
    assert lines[0] == "0 of 1 jobs reused from records, running 1 (0 resume from checkpoints) on 1 worker(s)"
    assert lines[1].startswith("job a done in ") and lines[1].endswith("(1 of 1)")
    assert lines[2].startswith("1 of 2 jobs reused") and lines[3].startswith("job b done") and len(lines) == 4


def test_records_name_the_commit_the_process_started_at(monkeypatch, tmp_path):
    """git_sha is read once per process, by run_jobs before the first job: a commit made in the checkout while a
    long run records (the code that runs is what the process imported) does not rename the later records; a tree
    that differs from HEAD is marked +dirty."""
    import subprocess
    from types import SimpleNamespace

    from symformer import results

    state = {"head": "a" * 40, "status": ""}
    calls = []

    def fake_run(args, **kw):
        calls.append(args)
        out = state["head"] if "rev-parse" in args else state["status"]
        return SimpleNamespace(stdout=out + "\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    results.git_sha.cache_clear()
    try:
        state["status"] = " M src/x.py"
        jobs = _jobs()
        run_jobs(jobs[:1], tmp_path, resume=True)
        state["head"], state["status"] = "b" * 40, ""  # a commit while the run goes on
        run_jobs(jobs, tmp_path, resume=True)
        shas = {k: json.loads((tmp_path / f"{k}.json").read_text())["provenance"]["git_sha"] for k in ("a", "b")}
        assert shas == {"a": "a" * 40 + "+dirty", "b": "a" * 40 + "+dirty"}
        assert len([c for c in calls if c[0] == "git"]) == 2  # HEAD and status, once
    finally:
        results.git_sha.cache_clear()
