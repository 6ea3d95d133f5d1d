"""The quick `facts` experiment end to end (slow: several minutes on 2 cores)."""

from __future__ import annotations

import pytest

METRICS = [
    "construction_store_accuracy_min",
    "rho_size_r2_constructed",
    "rho_size_r2_gd",
    "coherence_size_r2_gd",
    "whitening_gain_max",
    "gd_vs_binjl_param_ratio",
    "gdgd_vs_gd_param_ratio",
    "ntk_vs_constructed_param_ratio",
    "bits_per_param",
    # issue #11
    "rho_solver_max_abs_err",
    "rho_solver_false_non_vertices",
    "rho_size_loglog_r2_constructed",
    "rho_size_loglog_r2_gd",
    "rho_size_exponent_constructed",
    "rho_size_exponent_gd",
    "coherence_size_r2_decoupled_constructed",
    "coherence_size_r2_decoupled_gd",
    "ntk_mo_gain_max",
]


@pytest.mark.slow
def test_quick_experiment_reports_every_metric(tmp_path):
    from symformer.experiments import RunContext, load_all

    res = load_all().get("facts").fn(RunContext(out_dir=tmp_path, quick=True, progress=False))
    assert set(METRICS) <= set(res.metrics)
    assert res.metrics["construction_store_accuracy_min"] == 1.0
    assert all(c.verdict in ("holds", "fails", "inconclusive") for c in res.claims)
    assert all((tmp_path / f).is_file() for f in ("scaling.png", "rho_size.png", "ntk_kappa.png"))
    assert all(c.setting and c.paper_setting for c in res.claims)
    assert res.metrics["rho_solver_false_non_vertices"] == 0 and res.metrics["rho_solver_max_abs_err"] <= 1e-6
