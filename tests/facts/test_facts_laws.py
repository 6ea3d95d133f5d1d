"""Helpers of the `facts` experiment's rho-size, coherence and whitening rows (issue #11)."""

from __future__ import annotations

import math

import pytest

from symformer.experiments.facts.laws import offset
from symformer.facts.decodability import decodability
from symformer.facts.embeddings import coherence, make_fact_set, sentence_like_embeddings
from symformer.results import Claim, claims_table
from symformer.stats import loglog, r2


def test_loglog_recovers_a_power_law():
    rho = [0.05, 0.1, 0.2, 0.4, 0.8]
    size = [3.0 * r**-1.5 for r in rho]
    fit, slope = loglog(rho, size)
    assert fit == pytest.approx(1.0, abs=1e-12) and slope == pytest.approx(-1.5, abs=1e-12)
    noisy = [s * (1.3 if i % 2 else 0.7) for i, s in enumerate(size)]
    assert loglog(rho, noisy)[0] < 0.99
    assert r2([1.0, 2.0], [1.0, 2.0]) is None and loglog([1.0, 2.0], [1.0, 2.0]) == (None, None)


def test_offset_family_moves_coherence_not_rho():
    fs = make_fact_set(32, 32, kappa=10.0, seed=2)
    base = decodability(fs.values)
    shifted = offset(fs, 3.0, seed=1)
    moved = decodability(shifted.values)
    assert float((moved.rho_i - base.rho_i).abs().max()) <= 1e-9
    assert coherence(shifted.values) > coherence(fs.values) + 0.05


def test_claim_rows_carry_their_setting():
    c = Claim("x", "s", "p", "m", "holds", "ev", "ours: d=16", "paper: d=256")
    assert c.setting == "ours: d=16" and c.paper_setting == "paper: d=256"
    assert "| ours: d=16 | paper: d=256 |" in claims_table([c])  # the report shows both next to the verdict
    with pytest.raises(ValueError, match="verdict"):
        Claim("x", "s", "p", "m", "maybe", "", "a", "b")


def test_sentence_like_embeddings_condition_number():
    from symformer.facts.embeddings import condition_number

    x = sentence_like_embeddings(200, 24, seed=0)
    assert math.isclose(condition_number(x - x.mean(0)), 15.0, rel_tol=1e-9)
    with pytest.raises(ValueError, match="kappa"):
        sentence_like_embeddings(10, 4, kappa=0.5)


def test_ntk_search_reports_the_cap_not_a_bare_none(monkeypatch):
    """Issue #11 item 4: where no h up to the cap stores every fact, the row says so and why."""
    from symformer.experiments.facts import laws as facts_laws

    monkeypatch.setattr(facts_laws, "NTK_H_CAP", 4096)
    fs = make_fact_set(64, 16, kappa=30.0, seed=13)
    res = facts_laws.ntk_search(fs, decodability(fs.values), "ntk", quick=True)
    assert res["params"] is None and res["best_accuracy"] < 1.0 and res["params_at_cap"] > 0
    assert "no h <= 4096 stores every fact" in res["reason"]
    ok = facts_laws.ntk_search(make_fact_set(16, 16, seed=1), None, "ntk", quick=True)  # h = 1352 stores all
    assert ok["params"] and "reason" not in ok


def test_ntk_gain_rows_exact_lower_bound_and_none():
    from symformer.experiments.facts.laws import claims_ntk

    rows = [
        {"kappa": 1.0, "gain": 1.5, "gain_kind": "exact", "reason": None},
        {"kappa": 10.0, "gain": 2.5, "gain_kind": "lower bound", "reason": "ntk: no h <= 8 stores every fact"},
        {"kappa": 30.0, "gain": None, "gain_kind": "none", "reason": "ntk: ...; ntk-mo: ..."},
    ]
    part = claims_ntk(rows, 16, 64)
    metrics, (claim,) = part.metrics, part.claims
    assert metrics["ntk_mo_gain_max"] == 2.5 and metrics["ntk_mo_gain_kind"][10.0] == "lower bound"
    assert set(metrics["ntk_mo_breakdown"]) == {10.0, 30.0}
    assert claim.verdict == "holds" and "(a lower bound)" in claim.measured and "(= d^2/4)" in claim.setting
    part = claims_ntk(rows[2:], 16, 64)
    assert part.claims[0].verdict == "inconclusive" and part.metrics["ntk_mo_gain_max"] is None


def test_whitening_rows_list_points_without_a_bound():
    """A raw point whose every Bin+JL build raised (lower bound 0) is listed as "no bound", not dropped (#45)."""
    from symformer.experiments.facts.whitening import claims_whiten, claims_whiten_pooled

    def d_row(d, kappa, raw, lower, white):
        return {
            "d": d,
            "F": d * d // 4,
            "kappa": kappa,
            "params_raw": raw,
            "params_raw_lower_bound": lower,
            "params_whitened": white,
        }

    rows = [d_row(32, 1.0, 200, 200, 100), d_row(32, 1e3, None, 1800, 100), d_row(64, 1e4, None, 0, 100)]
    part = claims_whiten(rows, quick=False)
    m, (claim,) = part.metrics, part.claims
    assert m["whitening_gain"] == {"d=32,kappa=1": 2.0} and m["whitening_gain_lower_bounds"] == {
        "d=32,kappa=1000": 18.0
    }
    assert m["whitening_gain_no_bound"] == ["d=64,kappa=10000"] and "['d=64,kappa=10000']" in claim.evidence
    assert claim.verdict == "holds" and "(a lower bound)" in claim.measured
    assert claims_whiten(rows[2:], quick=False).claims[0].verdict == "inconclusive"

    def c_row(family, kappa, binjl, lower):
        return {"family": family, "kappa": kappa, "bin+jl": binjl, "bin+jl_lower_bound": lower, "gd-swiglu": 10}

    pooled = [
        c_row("raw", 1.0, 300, 300),
        c_row("whitened", 1.0, 100, 100),
        c_row("raw", 1e4, None, 0),
        c_row("whitened", 1e4, 100, 100),
    ]
    part = claims_whiten_pooled(pooled, d=32, F=256, n_seeds=2)
    assert part.metrics["whitening_gain_fig2a"] == {1.0: 3.0} and part.metrics["whitening_gain_fig2a_no_bound"] == [1e4]
    assert part.claims[0].verdict == "fails" and "kappa in [10000.0]" in part.claims[0].evidence
