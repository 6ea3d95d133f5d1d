"""Pieces of the `plash` experiment and benchmark that run fast (the full runs are the CLI's job)."""
import math

from symformer.benchmarks.attention_plash import matmul_throughput
from symformer.experiments.base import load_all
from symformer.experiments.plash import sketch_checks


def test_experiment_registered_with_data_file():
    spec = load_all().get("plash")
    assert spec.data_files == ("ETTh1.csv",)


def test_sketch_checks_report_every_degree():
    out = sketch_checks(500, seed=0)
    for k in (1, 2, 3):
        assert math.isfinite(out["z"][k]) and abs(out["z"][k]) < 4.5  # eq. (47); |z| >= 4.5 has prob ~7e-6
        assert out["bound_uniform"][k] == 2 / 16
    # Prop. C.4's variance bound breaks for k >= 2 at the uniform vector (see test_sketch.py for the margin)
    assert out["var_uniform"][3] > out["bound_uniform"][3]


def test_matmul_throughput_positive():
    assert matmul_throughput(n=64) > 0


def test_recorded_forecast_jobs_run_longest_first(monkeypatch, tmp_path):
    """The 27 recorded runs go to the workers longest first (PLASH at horizon 168 before softmax at 24), so the
    last worker to finish is not left alone with a long job; the records and their keys do not change."""
    from symformer.experiments import plash as P
    from symformer.experiments.base import RunContext

    seen = {}

    def fake_run_jobs(jobs, *args, **kwargs):
        seen["order"] = [j.key for j in jobs]
        return {j.key: {"fake": True} for j in jobs}

    monkeypatch.setattr(P, "run_jobs", fake_run_jobs)
    proto = P.protocol(RunContext(out_dir=tmp_path, quick=False))
    runs = P._forecast_runs(RunContext(out_dir=tmp_path, quick=False), proto, P.ExperimentResult())
    order = seen["order"]
    assert len(order) == 27 and len(set(order)) == 27
    assert order[0].startswith("etth1_informer_plash") and "_h168_" in order[0]
    assert order[-1].startswith("etth1_informer_softmax") and "_h24_" in order[-1]
    assert list(runs) == [(m, h) for h in (24, 48, 168) for m in ("softmax", "favor", "plash")]  # report order
