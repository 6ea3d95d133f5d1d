"""The `favor` experiment's Monte Carlo machinery and the `attention` benchmark's plan and ratios."""

from __future__ import annotations

import math

import torch

from symformer.benchmarks import attention as bench
from symformer.experiments.favor import claims as favor_claims
from symformer.experiments.favor import monte_carlo_check
from symformer.experiments.favor.plan import ESTIMABLE_SE
from symformer.stats import fit_exponent

torch.set_num_threads(1)


def test_grid_points_have_the_requested_norms_and_angles():
    x, y, meta = monte_carlo_check.grid_points(6, [0.5, 1.5], [0.0, math.pi / 3, math.pi], seed=0)
    for xi, yi, (nx, ny, ang) in zip(x, y, meta):
        assert abs(float(xi.norm()) - nx) < 1e-13 and abs(float(yi.norm()) - ny) < 1e-13
        assert abs(float(xi @ yi) - nx * ny * math.cos(ang)) < 1e-13


def test_monte_carlo_small_grid_is_unbiased_and_matches_variance():
    """20k draws on 12 points; per point P(|z| > 4.5) ~ 7e-6; variance cells must be within 0.15."""
    mc = monte_carlo_check.monte_carlo(4, 20_000, [1, 4], [0.3, 0.6], [0.0, math.pi / 2, math.pi], seed=1, chunk=8_000)
    claims, metrics = favor_claims.monte_carlo_claims(mc, 20_000)
    assert math.isfinite(metrics["unbiased_max_abs_z"]) and metrics["unbiased_max_abs_z"] < 4.5
    assert metrics["variance_estimable_cells"] > 10 and metrics["variance_max_rel_err"] < 0.15
    assert [c.verdict for c in claims[:2]] == ["holds", "holds"]


def test_z_score_detects_a_biased_estimator():
    """Features with variance 1.2^2 instead of 1 bias exp(x.y) upwards: the z-score must flag it."""
    x = torch.tensor([[0.5, 0.2, 0.0]], dtype=torch.float64)
    y = torch.tensor([[0.4, -0.1, 0.3]], dtype=torch.float64)
    w = torch.randn(50_000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 1.2
    z = monte_carlo_check.draw_z(w, x, y)[:, 0]
    var = float(monte_carlo_check.single_draw_variance(x, y)[0])
    zscore = (float(z.mean()) - math.exp(float(x @ y.T))) / math.sqrt(var / len(z))
    assert zscore > 4.5


def test_relative_se_grows_with_norms():
    x = torch.tensor([[0.1, 0.0], [1.5, 0.0]], dtype=torch.float64)
    se = monte_carlo_check.relative_se_of_variance(x, x, 1, 100_000)
    assert se[0] < ESTIMABLE_SE < se[1]


def test_fit_slope_recovers_a_power_law():
    ms = [16, 64, 256, 1024]
    assert abs(fit_exponent(ms, [3.0 * m**-0.5 for m in ms]) + 0.5) < 1e-12


def test_registered():
    from symformer.benchmarks import SUITES, load_all
    from symformer.experiments import EXPERIMENTS
    from symformer.experiments import load_all as load_experiments

    load_experiments()
    load_all()
    assert "tinyshakespeare.txt" in EXPERIMENTS.get("favor").data_files
    assert "attention" in SUITES


def test_bench_plan_covers_the_ratios_and_caps_naive():
    names = ["sdpa", "naive", "favor", "favor_causal", "performer_pytorch"]
    for quick in (True, False):
        plan = set(bench._plan(quick, names))
        assert {("favor", "fwd", n) for n in bench.EXPONENT_NS} <= plan
        assert {("performer_pytorch", "fwd", 8192), ("sdpa", "fwd", 8192), ("favor", "fwd+bwd", 8192)} <= plan
        assert all(n <= bench.NAIVE_MAX_N for name, _, n in plan if name == "naive")
    full = set(bench._plan(False, names))
    assert {("sdpa", p, n) for p in ("fwd", "fwd+bwd") for n in bench.NS} <= full


def test_bench_ratios_from_times():
    times = {("favor", "fwd", n): 1e-5 * n for n in bench.EXPONENT_NS}
    times[("performer_pytorch", "fwd", 8192)] = 4 * times[("favor", "fwd", 8192)]
    times[("sdpa", "fwd", 8192)] = 10 * times[("favor", "fwd", 8192)]
    r = bench._ratios(times)
    assert abs(r["favor_time_exponent"] - 1) < 1e-12
    assert abs(r["favor_vs_performer_pytorch_8192"] - 0.25) < 1e-12
    assert abs(r["favor_vs_sdpa_8192"] - 0.1) < 1e-12
    assert "favor_vs_sdpa_8192_fwd_bwd" not in r
