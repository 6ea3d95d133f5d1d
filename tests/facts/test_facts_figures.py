"""experiments/facts/figures.py: the Fig. 2a and Fig. 5 forms, drawn from the rows their claims read."""

from __future__ import annotations

import math

import pytest

from symformer.experiments.facts import figures
from symformer.stats import loglog


def _rho_rows() -> list[dict]:
    rows = []
    for i, (fam, rho) in enumerate([("raw", 0.1), ("raw", 0.3), ("whitened", 0.45), ("whitened", 0.5)]):
        rows.append(
            {
                "family": fam,
                "kappa": 10.0**i,
                "rho": rho,
                "bin+jl": round(40 * rho**-1.5),
                "bin+jl_lower_bound": round(40 * rho**-1.5),
                "gd-swiglu": None if i == 0 else 300,  # none stored up to the cap: drawn hollow at the cap
                "gd-swiglu_lower_bound": 900 if i == 0 else 300,
            }
        )
    rows.append({**rows[-1], "family": "offset", "kappa": 1.0, "offset": 2.0})
    return rows


def test_fit_line_is_the_claims_loglog_fit():
    pts = [(0.1, 2000.0), (0.2, 700.0), (0.4, 260.0), (0.5, 200.0)]
    a, b = figures._loglog_line(pts)
    assert b == loglog([x for x, _ in pts], [y for _, y in pts])[1]
    exact = [(x, 3.0 * x**-1.5) for x in (0.1, 0.2, 0.4)]
    a, b = figures._loglog_line(exact)
    assert b == pytest.approx(-1.5, abs=1e-12) and math.exp(a) == pytest.approx(3.0, rel=1e-12)


def test_rho_size_and_ntk_figures_are_written(tmp_path):
    assert figures.rho_size(tmp_path, _rho_rows(), 16, 64) == figures.RHO_SIZE
    ntk = [
        {"kappa": 1.0, "ntk": 1000, "ntk-mo": 500, "search": {"ntk": {}, "ntk-mo": {}}},
        {"kappa": 30.0, "ntk": None, "ntk-mo": 800, "search": {"ntk": {"params_at_cap": 9000}, "ntk-mo": {}}},
        {"kappa": 100.0, "ntk": None, "ntk-mo": None, "search": {"ntk": {"params_at_cap": 9000}, "ntk-mo": {}}},
    ]
    assert figures.ntk_kappa(tmp_path, ntk, 16, 64) == figures.NTK_KAPPA
    for name in (figures.RHO_SIZE, figures.NTK_KAPPA):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
