"""jobs.recorded_plan: a runs folder names its protocol (runs/PLAN.json); --resume refuses another one."""

import json
from pathlib import Path

import pytest

from symformer import cli
from symformer.experiments import base as ebase
from symformer.experiments import load_all
from symformer.experiments.teleport import speedup_pct
from symformer.results import ExperimentResult
from symformer.runner.jobs import Job, PlanMismatch, plan_digest, recorded_plan, run_jobs

PLAN = {"experiment": "x", "protocol": "1", "quick": False, "seed": 0, "options": {}, "full": False}


def _jobs():
    return [Job("a", speedup_pct, {"base": [0.1, 0.5], "tele": [0.5, 0.6]})]


def _run(runs, plan, resume):
    with recorded_plan(runs, plan, resume):
        return run_jobs(_jobs(), runs, resume=resume)


def _mark(runs):
    """A marker result: a reused record returns -1, a rerun does not."""
    rec = json.loads((runs / "a.json").read_text())
    rec["result"] = -1.0
    (runs / "a.json").write_text(json.dumps(rec))
    return rec


def test_plan_written_records_stamped_and_same_plan_resumes(tmp_path):
    _run(tmp_path, PLAN, False)
    assert json.loads((tmp_path / "PLAN.json").read_text()) == PLAN
    assert _mark(tmp_path)["plan"] == plan_digest(PLAN)
    assert _run(tmp_path, PLAN, True)["a"] == -1.0


@pytest.mark.parametrize("change", [{"quick": True}, {"protocol": "2"}, {"options": {"epochs": 3}}])
def test_resume_into_another_plan_refuses_naming_folder_and_difference(tmp_path, change):
    _run(tmp_path, PLAN, False)
    _mark(tmp_path)
    with pytest.raises(PlanMismatch) as e:
        _run(tmp_path, {**PLAN, **change}, True)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg
    ((k, v),) = change.items()
    assert f"{k}: {json.dumps(PLAN[k])} there, {json.dumps(v)} here" in msg
    assert json.loads((tmp_path / "a.json").read_text())["result"] == -1.0  # nothing ran, nothing overwritten


def test_legacy_folder_without_plan_resumes_and_gets_one(tmp_path):
    run_jobs(_jobs(), tmp_path)  # written before the fingerprint existed: no PLAN.json, no stamp
    assert not (tmp_path / "PLAN.json").exists() and "plan" not in _mark(tmp_path)
    assert _run(tmp_path, PLAN, True)["a"] == -1.0
    assert json.loads((tmp_path / "PLAN.json").read_text()) == PLAN


def test_fresh_run_replaces_plan_and_never_reuses_the_old_stamp(tmp_path):
    _run(tmp_path, PLAN, False)
    rec = _mark(tmp_path)
    other = {**PLAN, "protocol": "2"}
    (tmp_path / "PLAN.json").unlink()
    _run(tmp_path / "elsewhere", other, False)  # another folder: this one's plan is untouched
    assert not (tmp_path / "PLAN.json").exists()
    # a fresh run of protocol 2 killed before it reached job a: PLAN.json says 2, a.json is still protocol 1's
    with recorded_plan(tmp_path, other, False):
        run_jobs([], tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(rec))
    assert _run(tmp_path, other, True)["a"] == 50.0  # rerun, not mixed in


@pytest.fixture
def one_experiment(monkeypatch):
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)

    @ebase.experiment("tiny", "one recorded job")
    def tiny(ctx):
        got = run_jobs(_jobs(), ctx.out_dir / "runs", resume=ctx.resume)
        return ExperimentResult(metrics={"a": got["a"]})

    return reg


def test_cli_quick_into_full_is_one_line_exit_2(capsys, one_experiment, tmp_path):
    assert cli.main(["reproduce", "tiny", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "tiny" / "runs" / "PLAN.json").read_text())["quick"] is False
    capsys.readouterr()
    assert cli.main(["reproduce", "tiny", "--quick", "--resume", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "[tiny] running (quick) ..."  # the progress line, then the error's one line
    (err,) = lines[1:]
    assert err.startswith("error: --resume: ") and str(tmp_path / "tiny" / "runs") in err
    assert "quick: false there, true here" in err
    assert cli.main(["reproduce", "tiny", "--resume", "--out", str(tmp_path)]) == 0  # the same protocol resumes


def _interrupt_parent(wait: float) -> None:
    import os
    import signal
    import time

    os.kill(os.getppid(), signal.SIGINT)  # what Ctrl-C does to the main process
    time.sleep(wait)


@pytest.mark.parametrize("kept", [False, True])
def test_ctrl_c_stops_worker_processes_at_once(tmp_path, kept):
    """Ctrl-C must stop `reproduce --jobs N`, not leave the workers running the queued jobs for hours; also the
    pool that the local engine keeps between run_jobs calls (`reproduce` runs under it), which it then drops."""
    import signal
    import time
    from contextlib import nullcontext
    from multiprocessing import active_children

    from symformer.runner.engine import Engine, using_engine

    jobs = [Job(f"j{i}", _interrupt_parent, {"wait": 60.0}) for i in range(4)]
    engine = Engine()
    # Python's own Ctrl-C handler, as the CLI runs under: an earlier test in this worker process (a Ray or submitit
    # engine) may have left another SIGINT handler installed
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt), using_engine(engine) if kept else nullcontext():
            run_jobs(jobs, tmp_path, n_workers=2)
    finally:
        signal.signal(signal.SIGINT, old)
    assert time.perf_counter() - t0 < 45 and not active_children() and engine.kept is None
    assert not list(tmp_path.glob("j*.json"))


# ---------------------------------------------------------------- the recorded experiments' jobs, pinned
# A recorded run (results/<experiment>/runs, a long facts run in progress) resumes only where the runs folder's plan
# digest and each job's key and signature are those it was recorded with: a refactor of a plan (typed plans, typed
# arms and methods) must leave them as they are. The digests were taken before the typed plans (commit acb513d).
def _jobs_digest(rows) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def _job_row(job, *extra):
    return [job.key, job.signature(), job.checkpoints, *extra]


def _facts_jobs(quick):
    from symformer.experiments.facts import plan as facts_plan

    parts = facts_plan.jobs(facts_plan.FactsPlan.for_run(quick), quick, 0)
    return {part: [_job_row(j, cost) for j, cost in jcs] for part, jcs in parts.items()}


def _espr_jobs(quick, monkeypatch):
    from symformer.experiments.espr import ood as espr_ood
    from symformer.experiments.espr import report as espr_report

    got = []

    def record(jobs, *args, **kw):  # the plan's jobs, without running them
        got.extend(jobs)
        return {j.key: {"val_loss": 1.0 + i} for i, j in enumerate(jobs)}

    monkeypatch.setattr(espr_ood, "run_jobs", record)
    espr_ood.run_ood(espr_report.ood_config(quick, 0))
    return [_job_row(j) for j in got]


def _fact_recall_jobs(quick):
    from symformer.experiments.fact_recall import plan as fact_recall_plan

    ctx = ebase.RunContext(Path("unused"), quick=quick, seed=0)
    ctx.options = {k: default for k, (default, _) in fact_recall_plan.OPTIONS.items()}
    lm = fact_recall_plan.lm_job(ctx)
    jobs = [
        lm,
        fact_recall_plan.top1_job(lm),
        *fact_recall_plan.ssfr_jobs(ctx),
        *fact_recall_plan.usability_jobs(ctx, 64),
    ]
    ctx.options["usability_trainings"] = "paper"
    return [_job_row(j) for j in [*jobs, *fact_recall_plan.usability_jobs(ctx, 64)]]


@pytest.mark.parametrize(
    "quick, facts, espr, fact_recall",
    [
        (True, "c65e1d705fc3ec4c", "503bd3ef142fa110", "718d74967e071e13"),
        (False, "96a81bf054ef1bad", "3a47d55d170d132e", "f34615480f5c1700"),
    ],
)
def test_recorded_jobs_keep_their_keys_and_signatures(quick, facts, espr, fact_recall, monkeypatch):
    assert _jobs_digest(_facts_jobs(quick)) == facts
    assert _jobs_digest(_espr_jobs(quick, monkeypatch)) == espr
    assert _jobs_digest(_fact_recall_jobs(quick)) == fact_recall


@pytest.mark.parametrize("quick, digest", [(True, "0fdd31b14ba572da"), (False, "9497b73d55c9c36d")])
def test_facts_runs_folder_keeps_its_plan_digest(quick, digest):
    """The digest that every facts record is stamped with (runs/PLAN.json: experiment, protocol, quick, seed,
    options, --full); the quick one is the stamp of the records of a quick run made before the typed plans."""
    spec = load_all().get("facts")
    plan = {
        "experiment": "facts",
        "protocol": spec.protocol,
        "quick": quick,
        "seed": 0,
        "options": spec.resolve_options({}),
        "full": False,
    }
    assert plan_digest(plan) == digest


def test_hf_plan_keeps_the_recorded_training_sizes():
    """hf records no runs folder: its typed plan must give the sizes that results.json's config recorded."""
    from dataclasses import asdict

    from symformer.experiments.hf.plan import HfPlan

    quick, full = HfPlan.for_run(True), HfPlan.for_run(False)
    spec = {"hidden_size": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "intermediate_size": 160}
    assert asdict(quick.spec) == {**spec, "max_len": 256, "rope_theta": 10000.0}
    assert (quick.block, quick.max_chars, quick.steps, quick.batch_size, quick.eval_batches) == (64, 300_000, 60, 8, 4)
    assert (full.block, full.max_chars, full.steps, full.batch_size, full.eval_batches) == (128, None, 600, 16, 32)
    assert (quick.eval_every, full.eval_every) == (20, 200)
