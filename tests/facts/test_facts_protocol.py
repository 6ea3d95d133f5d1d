"""Issue 45: the full `facts` plan at the paper's protocol, the paper-form rows and the recorded-cost metrics."""

from __future__ import annotations

import json

import pytest
import torch

from symformer.experiments.facts import claims as facts_claims
from symformer.experiments.facts import laws as facts_laws
from symformer.experiments.facts import plan as facts_plan
from symformer.experiments.facts import report as facts_report
from symformer.experiments.facts import runs as facts_runs
from symformer.experiments.facts import whitening as facts_whitening
from symformer.facts import decoders
from symformer.facts.capacity import BuildOptions, build_fact_mlp, method_capacity
from symformer.facts.embeddings import make_fact_set


def test_full_plan_whitens_at_beta_quarter_and_quick_keeps_4d():
    """App. A.1.1: F = beta d^2 with beta = 0.25 unless stated; the full (d) points follow it."""
    full = facts_plan.jobs(facts_plan.FactsPlan.for_run(False), False, 0)["d"]
    assert {(j.kwargs["d"], j.kwargs["F"]) for j, _ in full} == {(16, 64), (32, 256), (64, 1024), (128, 4096)}
    quick = facts_plan.jobs(facts_plan.FactsPlan.for_run(True), True, 0)["d"]
    assert all(j.kwargs["F"] == 4 * j.kwargs["d"] for j, _ in quick)
    assert facts_laws.options(False).decoder_early_stop is False and facts_laws.options(True).decoder_early_stop is True
    from symformer.experiments import load_all

    assert load_all().get("facts").protocol == "2"  # --resume refuses a protocol-1 runs folder


def test_whiten_point_takes_F():
    row = facts_runs.whiten_point(d=8, kappa=10.0, quick=True, seed=0, F=16)
    assert row["F"] == 16 and row["params_whitened"]
    assert facts_runs.whiten_point(d=8, kappa=10.0, quick=True, seed=0)["F"] == 32  # the default stays 4d


def test_decoder_early_stop_off_runs_every_step(monkeypatch):
    v = make_fact_set(32, 8, seed=0).values
    steps = []
    real = torch.nn.functional.cross_entropy
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", lambda *a, **k: (steps.append(1), real(*a, **k))[1])
    decoders.gd_decoder(v, 8, steps=100, early_stop=True)
    early = len(steps)
    steps.clear()
    decoders.gd_decoder(v, 8, steps=100, early_stop=False)
    assert early < 100 and len(steps) == 100  # 8 codes decode 32 values well before 100 steps


def test_codec_cache_gives_the_same_mlp_and_is_read(tmp_path, monkeypatch):
    """A cached GD decoder is the decoder a rebuild gives, so no size or verdict can depend on the cache."""
    fs = make_fact_set(48, 8, seed=3)
    opts = BuildOptions(decoder_steps=60, encoder_steps=60)
    cached = BuildOptions(**{**vars(opts), "codec_cache": str(tmp_path)})
    plain = {
        m: build_fact_mlp(fs.keys, fs.values, fs.facts, m, m=6, strict=False, options=opts) for m in ("gd+gd", "bin+gd")
    }
    first = build_fact_mlp(fs.keys, fs.values, fs.facts, "gd+gd", m=6, strict=False, options=cached)
    assert len(list(tmp_path.glob("gd_decoder_*.pt"))) == 1
    monkeypatch.setattr(decoders, "gd_decoder", lambda *a, **k: pytest.fail("rebuilt a cached decoder"))
    again = build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+gd", m=6, strict=False, options=cached)
    for a, b in ((plain["gd+gd"], first), (plain["bin+gd"], again)):
        assert a.accuracy == b.accuracy
        assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_search_with_work_dir_caches_codecs_and_agrees(tmp_path):
    fs = make_fact_set(32, 8, seed=1)
    opts = BuildOptions(decoder_steps=40, encoder_steps=40)
    a = method_capacity("bin+gd", [fs], 2, 8, options=opts)
    b = method_capacity("bin+gd", [fs], 2, 8, options=opts, work_dir=tmp_path)
    assert (a.size, a.params, a.evaluations) == (b.size, b.params, b.evaluations)
    assert list(tmp_path.glob("gd_decoder_*.pt"))


def _b(d, F, m, params):
    return {"d": d, "F": F, "method": m, "params": params}


def test_per_d_slopes_row():
    rows = [_b(d, F, "bin+jl", 10 * F) for d, Fs in ((32, (64, 256)), (64, (256, 1024))) for F in Fs]
    rows += [_b(32, F, "gd-swiglu", F**1.5) for F in (64, 256)] + [_b(64, 256, "ntk", 5)]
    part = facts_claims.claim_per_d(rows, "ours: x")
    m, (c,) = part.metrics, part.claims
    assert m["scaling_exponent_per_d"]["bin+jl"] == {32: pytest.approx(1.0), 64: pytest.approx(1.0)}
    assert m["scaling_exponent_spread"] == {"bin+jl": pytest.approx(0.0)} and c.verdict == "holds"
    rows[3]["params"] = 10 * 1024 * 2  # d = 64: slope log(8) / log(4) = 1.5, spread 0.5 > 0.3
    assert facts_claims.claim_per_d(rows, "ours: x").claims[0].verdict == "fails"
    assert facts_claims.claim_per_d(rows[:1], "ours: x").claims[0].verdict == "inconclusive"


def _c(fam, k, binjl, gd, lb=None):
    return {
        "family": fam,
        "kappa": k,
        "bin+jl": binjl,
        "gd-swiglu": gd,
        "bin+jl_lower_bound": lb or binjl,
        "gd-swiglu_lower_bound": gd,
        "rho": 0.1,
    }


def test_whitening_gain_in_fig2a_form_pools_the_c_points():
    rows = [
        _c("raw", 1.0, 100, 50),
        _c("whitened", 1.0, 100, 50),
        _c("raw", 1e4, None, 400, lb=4000),
        _c("whitened", 1e4, 200, 100),
        _c("raw", 100.0, 300, 60),
        _c("offset", 1.0, 100, 50),
    ]
    part = facts_whitening.claims_whiten_pooled(rows, 32, 256, 2)
    m, (c,) = part.metrics, part.claims
    assert m["whitening_gain_fig2a"] == {1.0: 1.0, 1e4: 20.0}  # kappa 100 has no whitened point
    assert m["whitening_gain_fig2a_lower_bounds"] == [1e4] and m["whitening_gain_fig2a_gd"][1e4] == 4.0
    assert c.verdict == "holds" and "(a lower bound)" in c.measured and "(= d^2/4)" in c.setting
    assert facts_whitening.claims_whiten_pooled(rows[:2], 32, 256, 2).claims[0].verdict == "fails"


def test_rho_size_reports_the_inverse_fit_beside_the_loglog():
    rows = [
        {"family": f, "kappa": k, "rho": r, "coherence": 0.5, "bin+jl": 7 / r, "gd-swiglu": 3 / r**2}
        for f, k, r in (("raw", 1, 0.5), ("raw", 10, 0.2), ("whitened", 10, 0.4), ("raw", 100, 0.05))
    ]
    part = facts_laws.claims_rho_size(rows, 32, 256, 2)
    m, cl = part.metrics, part.claims
    assert m["rho_size_inv_r2_constructed"] == pytest.approx(1.0) and m["rho_size_inv_r2_gd"] < 0.99
    assert "1/rho" in cl[0].evidence and cl[1].statement.startswith("ours:")


def test_recorded_cost_counts_records_and_seconds(tmp_path):
    for k, s in (("a", 1800.0), ("b", 5400.0)):
        (tmp_path / f"{k}.json").write_text(json.dumps({"result": 1, "provenance": {"seconds": s}}))
    (tmp_path / "c.json").write_text("{torn")
    assert facts_report.recorded_cost(tmp_path, ["a", "b", "c", "missing"]) == (2, 2.0, 2)
    # a point resumed over several calls counts them all, not its last call's 1800 s
    prov = {"seconds": 1800.0, "parts": 3, "seconds_all_parts": 9000.0}
    (tmp_path / "d.json").write_text(json.dumps({"result": 1, "provenance": prov}))
    assert facts_report.recorded_cost(tmp_path, ["a", "d"]) == (2, 3.0, 1)  # a counts its last call only


def test_method_table_matches_the_method_names():
    """The typed fields of the fact-MLP methods say what their names say (encoder + decoder, 'gd' for a trained
    part), and the table holds every method build_fact_mlp knows, so no plan, point or claim reads a name's parts."""
    from symformer.experiments.facts.methods import METHODS
    from symformer.facts.capacity import METHODS as BUILDABLE

    assert set(METHODS) == set(BUILDABLE)
    for name, m in METHODS.items():
        coded = "+" in name
        assert m.name == name and (m.encoder, m.decoder) == (tuple(name.split("+")) if coded else (None, None))
        assert m.trained == ("gd" in name)
        assert m.trained_mlp == name.startswith("gd-") and m.constructed == (coded and not name.startswith("gd+"))
    recall_kinds = ("bin+jl", "bin+gd", "gd-swiglu", "gd-relu", "ntk")  # fact-recall's: constructed = Bin+*
    assert [k for k in recall_kinds if METHODS[k].constructed] == ["bin+jl", "bin+gd"]
    assert {m.name for m in facts_runs.CONSTRUCTIONS} <= set(METHODS) and set(facts_plan.GD_METHODS) <= set(METHODS)
