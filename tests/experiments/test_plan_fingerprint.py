"""jobs.recorded_plan: a runs folder names its protocol (runs/PLAN.json); --resume refuses another one."""

import json

import pytest

from symformer import cli
from symformer.experiments import base as ebase
from symformer.experiments.jobs import Job, PlanMismatch, plan_digest, recorded_plan, run_jobs
from symformer.experiments.teleport import speedup_pct
from symformer.results import ExperimentResult

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


def test_ctrl_c_stops_worker_processes_at_once(tmp_path):
    """Ctrl-C must stop `reproduce --jobs N`, not leave the workers running the queued jobs for hours."""
    import time
    from multiprocessing import active_children

    jobs = [Job(f"j{i}", _interrupt_parent, {"wait": 60.0}) for i in range(4)]
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs, tmp_path, n_workers=2)
    assert time.perf_counter() - t0 < 45 and not active_children()
    assert not list(tmp_path.glob("j*.json"))
