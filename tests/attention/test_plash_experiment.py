"""Pieces of the `plash` experiment and benchmark that run fast (the full runs are the CLI's job)."""

import math

from symformer.benchmarks.attention_plash import matmul_throughput
from symformer.experiments.base import load_all
from symformer.experiments.plash.checks import sketch_checks


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
    from symformer.experiments.base import RunContext
    from symformer.experiments.plash import report as plash_report
    from symformer.experiments.plash.plan import protocol

    seen = {}

    def fake_run_jobs(jobs, *args, **kwargs):
        seen["order"] = [j.key for j in jobs]
        return {j.key: {"fake": True} for j in jobs}

    monkeypatch.setattr(plash_report, "run_jobs", fake_run_jobs)
    plan = protocol(RunContext(out_dir=tmp_path, quick=False))
    runs, _ = plash_report.forecast_runs(RunContext(out_dir=tmp_path, quick=False), plan)
    order = seen["order"]
    assert len(order) == 27 and len(set(order)) == 27
    assert order[0].startswith("etth1_informer_plash") and "_h168_" in order[0]
    assert order[-1].startswith("etth1_informer_softmax") and "_h24_" in order[-1]
    assert list(runs) == [(m, h) for h in (24, 48, 168) for m in ("softmax", "favor", "plash")]  # report order


def test_forecast_verdicts_carry_the_seed_error():
    """T1 rows compare mean ± 2 SE with the bound: a difference inside the noise is inconclusive, not holds/fails;
    the horizon average adds per-horizon standard errors in quadrature; the ratio's SE is the delta method's."""
    import random

    from symformer.experiments.plash.claims import band_verdict, horizon_average, relative_difference

    avg = horizon_average({"h=24": {"mean": 0.4, "se": 0.03}, "h=48": {"mean": 0.6, "se": 0.04}})
    assert math.isclose(avg["mean"], 0.5) and math.isclose(avg["se"], 0.025)
    a, b = {"mean": 0.52, "se": 0.01}, {"mean": 0.5, "se": 0.02}
    rel, se = relative_difference(a, b)
    rng = random.Random(0)  # Monte Carlo check of the delta method at small relative errors
    draws = [rng.gauss(0.52, 0.01) / rng.gauss(0.5, 0.02) - 1 for _ in range(20000)]
    m = sum(draws) / len(draws)
    sd = math.sqrt(sum((x - m) ** 2 for x in draws) / (len(draws) - 1))
    assert math.isclose(rel, 0.04) and abs(se / sd - 1) < 0.05
    assert band_verdict(0.04, 0.0, 0.05) == "holds" and band_verdict(0.06, 0.0, 0.05) == "fails"
    assert band_verdict(0.04, 0.01, 0.05) == "inconclusive" and band_verdict(0.04, 0.004, 0.05) == "holds"
    assert band_verdict(0.08, 0.01, 0.05) == "fails" and band_verdict(0.06, 0.01, 0.05) == "inconclusive"
