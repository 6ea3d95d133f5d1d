"""The `facts` experiment as recorded, resumable jobs (experiments/facts/runs.py): every point of parts (a)-(f)
is a job whose record a --resume call reuses, and whose result depends neither on the global random stream nor
on the process that runs it."""

from __future__ import annotations

import json

import pytest
import torch

from symformer.experiments.base import RunContext
from symformer.experiments.facts import plan as facts_plan
from symformer.experiments.facts import report as facts_report
from symformer.experiments.facts import runs as facts_runs
from symformer.runner.jobs import Job


@pytest.mark.parametrize("quick", [True, False])
def test_plan_has_one_valid_job_per_point(quick):
    cfg = facts_plan.FactsPlan.for_run(quick)
    p = facts_plan.jobs(cfg, quick, seed=0)
    keys = [j.key for part in p.values() for j, _ in part]
    assert len(keys) == len(set(keys))
    assert all(k and all(c.isalnum() or c in "._-=" for c in k) for k in keys)
    n_b = sum(len(Fs) * len(cfg.by_d[d]) for d, Fs in cfg.grid.items())
    law = cfg.laws
    assert len(p["b"]) == n_b and len(p["c"]) == 2 * len(law.kappas) + len(law.offsets)
    assert len(p["a"]) == len(cfg.dims_a) + 1 and len(p["e"]) == len(cfg.ntk_kappas)
    for part in p.values():
        for job, cost in part:
            assert job.fn.name == f"symformer.experiments.facts_runs.{job.fn.fn.__name__}"  # the recorded name
            assert getattr(facts_runs, job.fn.fn.__name__) is job.fn.fn  # workers import it
            assert json.loads(json.dumps(job.kwargs)) == job.kwargs and cost > 0  # the signature reads back
    if not quick:  # the full protocol: Fig. 2c's d = 128 column up to F = 4096, two seeds per point
        assert cfg.grid[128] == [1024, 2048, 4096] and cfg.seeds_per_point == 2


def test_a_point_ignores_the_global_stream():
    torch.manual_seed(1)
    a = facts_runs.scaling_point(16, 32, "bin+jl", 1, True, 0)
    torch.manual_seed(2)
    torch.randn(100)
    b = facts_runs.scaling_point(16, 32, "bin+jl", 1, True, 0)
    assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert a["params"] and a["method"] == "bin+jl" and (a["d"], a["F"]) == (16, 32)


def _tiny_plan() -> dict:
    q = dict(quick=True, seed=0)
    return {
        "b": [(Job("b_tiny", facts_runs.scaling_point, dict(d=16, F=32, method="bin+jl", n_seeds=1, **q)), 2.0)],
        "d": [(Job("d_tiny", facts_runs.whiten_point, dict(d=8, kappa=100.0, **q)), 1.0)],
    }


def test_points_are_recorded_and_reused_on_resume(tmp_path):
    ctx = RunContext(out_dir=tmp_path, quick=True, progress=False)
    stats: dict = {}
    first = facts_report._run_points(ctx, _tiny_plan(), stats)
    assert stats == {"reused": 0, "ran": 2} and sorted(p.name for p in (tmp_path / "runs").glob("*.json")) == [
        "b_tiny.json",
        "d_tiny.json",
    ]
    ctx.resume, stats = True, {}
    again = facts_report._run_points(ctx, _tiny_plan(), stats)
    assert stats == {"reused": 2, "ran": 0}
    assert again == json.loads(json.dumps(first))  # the reused records are the results, as JSON reads them back
    assert again["d"][0]["params_whitened"] and again["d"][0]["rho_raw"] > 0


def test_points_agree_across_worker_processes(tmp_path):
    """--jobs 2 runs each point in a spawned process with one thread; run_jobs' in-process path uses one thread
    too, so a record does not depend on --jobs (a resumed run reproduces an uninterrupted one)."""
    a = facts_report._run_points(RunContext(out_dir=tmp_path / "one", progress=False), _tiny_plan(), {})
    b = facts_report._run_points(RunContext(out_dir=tmp_path / "two", progress=False, jobs=2), _tiny_plan(), {})
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert strip(a["b"][0]) == strip(b["b"][0]) and a["d"] == b["d"]


def test_a_search_killed_midway_resumes_from_its_work_dir(tmp_path, monkeypatch):
    """method_capacity(work_dir=...): the evaluations done before a kill are not redone, the result is the
    uninterrupted one, and no training checkpoint is left once an evaluation is remembered."""
    from symformer.facts import capacity
    from symformer.facts.embeddings import make_fact_set

    fss = [make_fact_set(32, 16, seed=s) for s in range(2)]
    opts = capacity.BuildOptions(train_epochs=300, train_lr=1e-2)
    whole = capacity.method_capacity("gd-swiglu", fss, 2, 8, max_size=64, options=opts)
    real, calls = capacity.build_fact_mlp, []

    class Killed(Exception):
        pass

    def dies_after_three(*a, **kw):
        calls.append(kw["options"].train_checkpoint)
        if len(calls) > 3:
            raise Killed
        return real(*a, **kw)

    monkeypatch.setattr(capacity, "build_fact_mlp", dies_after_three)
    with pytest.raises(Killed):
        capacity.method_capacity("gd-swiglu", fss, 2, 8, max_size=64, options=opts, work_dir=tmp_path)
    assert all(c and c.startswith(str(tmp_path)) for c in calls)  # GD trainings checkpoint in the work dir
    (path,) = tmp_path.glob("gd-swiglu_*_evaluations.json")
    assert len(json.loads(path.read_text())) == 3
    calls.clear()
    monkeypatch.setattr(capacity, "build_fact_mlp", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    again = capacity.method_capacity("gd-swiglu", fss, 2, 8, max_size=64, options=opts, work_dir=tmp_path)
    assert (again.size, again.params) == (whole.size, whole.params) and whole.size is not None
    assert again.evaluations == whole.evaluations
    n_evals = len(json.loads(path.read_text()))
    assert len(calls) == n_evals - 3 and not list(tmp_path.glob("*.pt"))
    # another search in the same folder (other fact sets, or other options) does not read these evaluations
    calls.clear()
    other = [make_fact_set(32, 16, seed=s + 5) for s in range(2)]
    capacity.method_capacity("gd-swiglu", other, 2, 8, max_size=64, options=opts, work_dir=tmp_path)
    assert len(calls) > 0 and len(list(tmp_path.glob("gd-swiglu_*_evaluations.json"))) == 2
    calls.clear()
    capacity.method_capacity(
        "gd-swiglu",
        fss,
        2,
        8,
        max_size=64,
        options=capacity.BuildOptions(train_epochs=200, train_lr=1e-2),
        work_dir=tmp_path,
    )
    assert len(calls) > 0


def test_a_bad_work_dir_is_refused_before_any_work(tmp_path, monkeypatch):
    """work_dir: not a path (TypeError), a file (ValueError), or a damaged remembered-evaluations file (ValueError
    naming it), each before any model is built."""
    from symformer.facts import capacity
    from symformer.facts.embeddings import make_fact_set

    fss = [make_fact_set(32, 16, seed=0)]
    monkeypatch.setattr(capacity, "build_fact_mlp", lambda *a, **kw: pytest.fail("built a model"))
    with pytest.raises(TypeError, match=r"^work_dir: got 'int', expected a folder path"):
        capacity.method_capacity("gd-swiglu", fss, 2, 8, work_dir=3)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ValueError, match=r"^work_dir: got '.*f\.txt', expected a folder \(this path is a file\)"):
        capacity.method_capacity("gd-swiglu", fss, 2, 8, work_dir=tmp_path / "f.txt")
    opts = capacity.BuildOptions(train_epochs=5)
    name = capacity._Remembered(tmp_path, "gd-swiglu", fss, opts).path
    name.write_text("{not json")
    with pytest.raises(ValueError, match=r"^work_dir: got '.*_evaluations\.json', expected a remembered-evaluations"):
        capacity.method_capacity("gd-swiglu", fss, 2, 8, options=opts, work_dir=tmp_path)
