"""experiments/jobs.py: records are atomic JSON, reused only with resume and a matching signature."""
import json

import pytest

from symformer.experiments.jobs import Job, run_jobs
from symformer.experiments.teleport import speedup_pct


def _jobs():
    return [Job("a", speedup_pct, {"base": [0.1, 0.5], "tele": [0.5, 0.6]}),
            Job("b", speedup_pct, {"base": [0.1, 0.2, 0.5], "tele": [0.1, 0.5, 0.6]})]


def test_serial_results_and_records(tmp_path):
    got = run_jobs(_jobs(), tmp_path)
    assert got == {"a": 50.0, "b": pytest.approx(100 / 3)}
    rec = json.loads((tmp_path / "a.json").read_text())
    assert rec["result"] == 50.0 and rec["signature"]["fn"].endswith("speedup_pct")
    assert not list(tmp_path.glob("*.tmp"))
    prov = rec["provenance"]  # a run spanning sessions says, per record, which commit and machine made it
    assert set(prov) == {"git_sha", "host", "machine", "seconds", "finished_at"} and prov["seconds"] >= 0


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


@pytest.mark.parametrize("jobs, name", [([Job("a/b", speedup_pct)], "jobs"),
                                        ([Job("a", speedup_pct), Job("a", speedup_pct)], "jobs")])
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
