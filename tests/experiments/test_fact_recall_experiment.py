"""Experiment `fact-recall`: metric names, verdicts computed from the records, and a slow quick run."""

import json
import math

import pytest

from symformer.experiments.base import RunContext
from symformer.experiments.fact_recall import claims as fact_recall_claims
from symformer.experiments.fact_recall import lm_claims as fact_recall_lm_claims
from symformer.experiments.fact_recall import lm_runs as fact_recall_lm_runs
from symformer.experiments.fact_recall import plan as fact_recall_plan
from symformer.experiments.fact_recall import report as fact_recall_report
from symformer.experiments.fact_recall import runs as fact_recall_runs
from symformer.experiments.fact_recall import search as fact_recall_search
from symformer.results import ExperimentResult


def _lm(swap_score, base_score, ce_change=2.0, new_acc=1.0):
    m = {"swap": {"score": swap_score, "efficacy": 1, "paraphrase": 1, "specificity": 1, "config": {}}}
    for k in ("rome", "memit", "alphaedit"):
        m[k] = {"score": base_score, "efficacy": 1, "paraphrase": 1, "specificity": 1, "config": {}}
    return {
        "n_facts": 8,
        "d": 8,
        "mlp_hidden": 8,
        "train": {"steps": 1},
        "swap": {
            "new_fact_accuracy": new_acc,
            "nonfact_ce_before": 1.0,
            "nonfact_ce_after": 1 + ce_change / 100,
            "nonfact_ce_change_pct": ce_change,
        },
        "edits": {"0.1": {"methods": m}},
    }


def test_lm_claims_follow_the_numbers():
    res = ExperimentResult()
    res = fact_recall_lm_claims.lm_claims(_lm(0.9, 0.4), quick=True)
    assert res.metrics["edit_score_swap_vs_best_baseline"]["0.1"] == pytest.approx(2.25)
    assert res.metrics["edit_score"]["rome/0.1"] == 0.4
    assert {c.id: c.verdict for c in res.claims} == {"S5.4-swap": "holds", "Fig4": "holds"}
    res = ExperimentResult()
    res = fact_recall_lm_claims.lm_claims(
        _lm(0.6, 0.5, ce_change=30.0), quick=False, top1=_lm(0.6, 0.5, ce_change=30.0)
    )
    assert {c.id: c.verdict for c in res.claims} == {"S5.4-swap": "fails", "Fig4": "fails"}
    res = ExperimentResult()
    res = fact_recall_lm_claims.lm_claims(_lm(0.6, 0.5, ce_change=30.0), quick=False)
    assert {c.id: c.verdict for c in res.claims} == {"S5.4-swap": "inconclusive", "Fig4": "fails"}
    res = ExperimentResult()  # baselines at 0.9: no editor can reach 1.5x (scores <= 1), the test has no power
    res = fact_recall_lm_claims.lm_claims(_lm(1.0, 0.9), quick=False)
    fig4 = {c.id: c for c in res.claims}["Fig4"]
    assert fig4.verdict == "inconclusive" and "out of reach" in fig4.measured
    res = ExperimentResult()  # the threshold reached even though baselines are high: holds
    res = fact_recall_lm_claims.lm_claims(_lm(1.0, 0.6), quick=False)
    assert {c.id: c.verdict for c in res.claims}["Fig4"] == "holds"
    res = ExperimentResult()  # the router is not in the paper: either reading meeting the claim is enough
    res = fact_recall_lm_claims.lm_claims(_lm(0.6, 0.5, ce_change=30.0), quick=False, top1=_lm(0.6, 0.5, ce_change=2.0))
    assert {c.id: c.verdict for c in res.claims}["S5.4-swap"] == "holds"
    assert res.metrics["lm_swap_by_router"]["top1"]["nonfact_ce_change_pct"] == 2.0
    res = ExperimentResult()  # a top-1 LM that does not use the new MLP (0.2) is outside the claim: inconclusive
    res = fact_recall_lm_claims.lm_claims(
        _lm(0.6, 0.5, ce_change=30.0), quick=False, top1=_lm(0.6, 0.5, ce_change=2.0, new_acc=0.2)
    )
    assert {c.id: c.verdict for c in res.claims}["S5.4-swap"] == "inconclusive"
    swap = res.claims[0].measured
    assert "soft router: " in swap and "top1 router: new-fact accuracy 0.2000" in swap
    res = ExperimentResult()  # both use the new MLP and both miss the CE part: fails
    res = fact_recall_lm_claims.lm_claims(_lm(0.6, 0.5, ce_change=30.0), quick=False, top1=_lm(0.6, 0.5, ce_change=6.0))
    assert {c.id: c.verdict for c in res.claims}["S5.4-swap"] == "fails"
    res = ExperimentResult()  # a miss of the accuracy part alone refutes nothing: inconclusive
    res = fact_recall_lm_claims.lm_claims(_lm(0.6, 0.5, new_acc=0.5), quick=False, top1=_lm(0.6, 0.5, new_acc=0.5))
    assert {c.id: c.verdict for c in res.claims}["S5.4-swap"] == "inconclusive"
    lm = _lm(0.6, 0.5)
    lm["swap"]["train_fact_accuracy"] = 0.843
    res = ExperimentResult()
    res = fact_recall_lm_claims.lm_claims(lm, quick=False)
    assert "own-fact accuracy before the swap 0.8430; new-fact accuracy 1.0000" in res.claims[0].measured
    res = ExperimentResult()
    res = fact_recall_lm_claims.lm_claims(_lm(0.9, 0.9, ce_change=30.0), quick=True)
    assert {c.id: c.verdict for c in res.claims} == {"S5.4-swap": "inconclusive", "Fig4": "inconclusive"}
    assert all(c.setting and c.paper_setting for c in res.claims)


def test_ssfr_claims_and_metric_names():
    out = {"a": {"kind": "gd-swiglu", "n_facts": 256, "best_fact_adaptive_accuracy": 0.995, "min_params": 100}}
    res = ExperimentResult()
    res = fact_recall_claims.ssfr_claims(out, quick=True)
    assert res.metrics["ssfr_fact_adaptive_accuracy"] == {"gd-swiglu/F=256": 0.995}
    assert res.metrics["ssfr_min_params_99"] == {"gd-swiglu/F=256": 100}
    v = {c.id: c.verdict for c in res.claims}
    assert v == {"S5.1": "holds", "S5.1-constructed": "inconclusive", "S5.1-scaling": "inconclusive"}


def test_usability_claims_rank_correlation():
    pts = [
        {
            "kappa": 1.1,
            "whiten": a,
            "capacity_new": 0.5 + a / 2,
            "fact_adaptive_accuracy": 0.5 - a / 4,
            "usability": (0.5 - a / 4) / (0.5 + a / 2),
            "lipschitz": 1 + 10 * a,
        }
        for a in (0.0, 0.1, 0.5, 1.0)
    ]
    res = ExperimentResult()
    res = fact_recall_claims.usability_claims(pts)
    assert res.metrics["usability_lipschitz_spearman"] == pytest.approx(-1.0)
    assert {c.id: c.verdict for c in res.claims} == {"S5.2": "holds", "S5.3": "holds"}


def test_usability_claims_without_power_or_protocol_are_inconclusive():
    """Capacity 1.0 at every point (the MLP at 1.1 h* stores all facts): no trade-off can show, inconclusive,
    not fails (scipy's NaN used to read as a miss). One training per point can confirm but not refute; the
    paper's best of 20 trainings can refute."""

    def pts(cap, use):
        return [
            {
                "kappa": 1.1,
                "whiten": a,
                "capacity_new": cap(a),
                "fact_adaptive_accuracy": use(a) * cap(a),
                "usability": use(a),
                "lipschitz": 1 + 10 * a,
            }
            for a in (0.0, 0.1, 0.5, 1.0)
        ]

    res = ExperimentResult()
    res = fact_recall_claims.usability_claims(pts(lambda a: 1.0, lambda a: 1.0 - a / 2))
    c = {c.id: c for c in res.claims}
    assert c["S5.2"].verdict == "inconclusive" and "no trade-off can show" in c["S5.2"].measured
    assert c["S5.3"].verdict == "holds"
    rising = pts(lambda a: 0.5 + a / 2, lambda a: 0.5 + a / 4)  # usability rises with alpha and Lipschitz
    for trainings, want in ((1, "inconclusive"), (fact_recall_claims.PAPER_TRAININGS_PER_POINT, "fails")):
        res = ExperimentResult()
        res = fact_recall_claims.usability_claims(rising, trainings=trainings)
        assert {c.id: c.verdict for c in res.claims} == {"S5.2": want, "S5.3": want}


@pytest.mark.slow
def test_quick_run_writes_results(tmp_path):
    from symformer.experiments.base import EXPERIMENTS, load_all
    from symformer.results import write_experiment

    load_all()
    ctx = RunContext(out_dir=tmp_path, quick=True, progress=False)
    res = EXPERIMENTS.get("fact-recall").fn(ctx)
    write_experiment(tmp_path, "fact-recall", True, res)
    data = json.loads((tmp_path / "results.json").read_text())
    for name in (
        "ssfr_fact_adaptive_accuracy",
        "ssfr_min_params_99",
        "lm_swap_new_fact_accuracy",
        "lm_swap_nonfact_ce_change_pct",
        "edit_score",
        "edit_score_swap_vs_best_baseline",
    ):
        assert name in data["metrics"]
    assert (tmp_path / "ssfr_size_vs_facts.png").is_file()


def test_size_figure_plots_each_kinds_minimum_against_f(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(
        fact_recall_report, "size_vs_facts", lambda path, series, *a: seen.update(path=path, series=series)
    )
    ssfr = {
        "a": {"kind": "gd-relu", "n_facts": 256, "min_params": 100},
        "b": {"kind": "gd-relu", "n_facts": 512, "min_params": None},
        "c": {"kind": "ntk", "n_facts": 256, "min_params": 7},
    }
    name = fact_recall_report._size_figure(RunContext(out_dir=tmp_path, quick=True, progress=False), ssfr)
    assert seen["path"] == tmp_path / name
    assert seen["series"] == {"gd-relu": [(256, 100), (512, None)], "ntk": [(256, 7)]}


def test_size_vs_facts_skips_missing_sizes_and_writes_a_png(tmp_path):
    from symformer.experiments.plots import size_vs_facts

    size_vs_facts(tmp_path / "f.png", {"x": [(512, 30), (256, None), (1024, 90)], "none": [(256, None)]}, "p", "t")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_size_vs_facts_gives_every_series_its_own_colour_and_style(tmp_path, monkeypatch):
    """facts' Fig. 2c form draws 18 series: colour by method, marker and line style by d, so none look alike."""
    from symformer.experiments import plots

    plt = plots.pyplot()
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    series = {
        f"{m} d={d}": [(64, 10), (128, 20)] for m in ("bin+jl", "gd-swiglu", "ntk", "gd+gd") for d in (32, 64, 128)
    }
    plots.size_vs_facts(tmp_path / "f.png", series, "p", "t")
    lines = [ln for ln in kept[0].axes[0].get_lines() if ln.get_label() in series]
    looks = {(str(ln.get_color()), ln.get_marker(), ln.get_linestyle()) for ln in lines}
    assert len(lines) == len(series) == len(looks)
    plt.close(kept[0])


def test_constructed_search_fixes_m_then_grows_the_gadget_width(monkeypatch):
    """Constructions: m is the smallest storing code width, then h~ doubles from ceil(F/d) and is bisected;
    min_size is the hidden size m h~."""

    calls = []

    def point(kind, size, n_facts, d, seed, quick, paper_budget=False, h_tilde=None, work_dir=None, device="cpu"):
        calls.append((size, h_tilde))
        return {"params": size * h_tilde, "fact_adaptive_accuracy": 1.0 if h_tilde >= 5 else 0.5}

    monkeypatch.setattr(
        fact_recall_search, "code_width", lambda kind, F, d, seeds, start, max_size, bisect, quick, work_dir: 24
    )
    monkeypatch.setattr(fact_recall_search, "ssfr_point", point)
    r = fact_recall_search.ssfr_search("bin+jl", 256, 128, 1, False, 16, 256, bisect=True)
    assert (r["m"], r["h_tilde"], r["min_size"], r["min_params"]) == (24, 5, 120, 120)
    assert [c[1] for c in calls] == [2, 4, 8, 6, 5] and all(c[0] == 24 for c in calls)
    monkeypatch.setattr(fact_recall_search, "code_width", lambda *a: None)
    r = fact_recall_search.ssfr_search("bin+jl", 256, 128, 1, False, 16, 256)
    assert r["min_size"] is None and r["best_fact_adaptive_accuracy"] == 0.0


def test_code_width_is_the_smallest_storing_m():
    """Both MLPs (f and f') store >= 99% at the returned m; at m - 1 one of them does not."""
    import torch

    from symformer.facts.capacity import build_fact_mlp
    from symformer.facts.lm.ssfr import make_ssfr

    torch.set_num_threads(1)
    m = fact_recall_search.code_width("bin+jl", 64, 32, 1, 4, 64, bisect=True)
    t = make_ssfr(64, 32, seed=0)
    K, V = t.mlp_embeddings()
    f2 = fact_recall_runs.random_fact_map(64, seed=10_000)

    def worst(width):
        return min(
            build_fact_mlp(K, V, t.facts, "bin+jl", m=width, seed=0, strict=False).accuracy,
            build_fact_mlp(K, V, f2, "bin+jl", m=width, seed=1, strict=False).accuracy,
        )

    assert worst(m) >= fact_recall_runs.TARGET > worst(m - 1)


def test_constructed_claim_reports_each_gadget_width():
    pts = [
        {
            "kind": "bin+jl",
            "n_facts": 256,
            "seed": 0,
            "size": 32,
            "h_tilde": ht,
            "params": 10 * ht,
            "lipschitz": lip,
            "fact_adaptive_accuracy": acc,
            "trained": True,
        }
        for ht, lip, acc in ((2, 3e4, 0.004), (8, 107.0, 0.997))
    ]
    out = {
        "a": {"kind": "bin+jl", "n_facts": 256, "best_fact_adaptive_accuracy": 0.997, "min_params": 80, "points": pts}
    }
    res = ExperimentResult()
    res = fact_recall_claims.ssfr_claims(out, quick=True)
    row = next(c for c in res.claims if c.id == "S5.1-constructed")
    assert row.verdict == "holds" and "h~=2: Lipschitz 3e+04, accuracy 0.0040" in row.measured
    assert [p["h_tilde"] for p in res.metrics["ssfr_constructed_points"]] == [2, 8]


def test_lm_job_shares_the_first_batch_with_ssfr(monkeypatch, tmp_path):
    """The LM job needs nothing from SSFR, so it goes first into SSFR's batch (one worker runs it while the
    other runs the searches); full mode edits at the paper's three splits (Fig. 4) and honours paper_budget."""
    calls = []

    def fake_run_jobs(jobs, *a, **k):
        calls.append([j.key for j in jobs])
        out = {}
        for j in jobs:
            if j.key.startswith("lm_"):
                out[j.key] = _lm(0.9, 0.5)
            else:
                out[j.key] = {
                    "kind": j.kwargs.get("kind", "gd-swiglu"),
                    "n_facts": j.kwargs["n_facts"],
                    "min_size": 8,
                    "min_params": 10,
                    "best_fact_adaptive_accuracy": 0.995,
                    "points": [],
                    "usability": 1.0,
                    "lipschitz": 1.0,
                    "whiten": 0.0,
                    "capacity_new": 1.0,
                    "kappa": 1.1,
                    "fact_adaptive_accuracy": 1.0,
                }
        return out

    monkeypatch.setattr(fact_recall_report, "run_jobs", fake_run_jobs)
    opts = {k: v[0] for k, v in fact_recall_plan.OPTIONS.items()}
    fact_recall_report.run(RunContext(out_dir=tmp_path, quick=True, progress=False))
    assert calls[0][0] == "lm_F=128" and len(calls) == 1 and all(k.startswith("ssfr_") for k in calls[0][1:])
    # full mode: the GD-SwiGLU F=256 search beside the LM job, then the other searches (`_ssfr_order`) and the
    # usability points (h = 1.1 h* from that search) in one batch
    calls.clear()
    kwargs = {}

    def spy(jobs, *a, **k):
        kwargs.update({j.key: j.kwargs for j in jobs})
        return fake_run_jobs(jobs)

    monkeypatch.setattr(fact_recall_report, "run_jobs", spy)
    res = fact_recall_report.run(RunContext(out_dir=tmp_path, quick=False, progress=False))
    assert calls[0] == ["lm_F=1024", "ssfr_gd-swiglu_F=256"] and len(calls) == 2
    ssfr = [k for k in calls[1] if k.startswith("ssfr_")]
    usab = [k for k in calls[1] if k.startswith("usab_")]
    assert len(ssfr) == 24 and len(usab) == 32 and calls[1] == ["lm_F=1024_top1"] + ssfr + usab
    top1 = kwargs["lm_F=1024_top1"]  # the soft LM's settings, top-1 routing, swap check only
    assert top1["router_top1"] is True and top1["fractions"] == [] and top1["steps"] == 4000
    assert set(res.metrics["lm_swap_by_router"]) == {"soft", "top1"}
    assert ssfr == [
        j.key
        for j in sorted(
            fact_recall_plan.ssfr_jobs(
                RunContext(
                    out_dir=tmp_path,
                    quick=False,
                    progress=False,
                    options={k: v[0] for k, v in fact_recall_plan.OPTIONS.items()},
                )
            ),
            key=fact_recall_report._ssfr_order,
        )
        if j.key != "ssfr_gd-swiglu_F=256"
    ]
    assert {kwargs[k]["h"] for k in usab} == {9}  # round(1.1 x 8)
    assert len(res.metrics["ssfr_fact_adaptive_accuracy"]) == 25 and "usability_lipschitz_spearman" in res.metrics
    full = fact_recall_plan.lm_job(RunContext(out_dir=tmp_path, quick=False, progress=False, options=opts))
    assert full.kwargs["fractions"] == [0.02, 0.05, 0.1, 0.2] and full.kwargs["lr"] == 2e-3
    paper = fact_recall_plan.lm_job(
        RunContext(out_dir=tmp_path, quick=False, progress=False, options={**opts, "paper_budget": True})
    )
    assert paper.kwargs["steps"] * 128 == 4_800_000 and paper.kwargs["lr"] == 2e-4


def test_untrainable_point_builds_only_the_swapped_in_mlp(monkeypatch):
    """A size whose f' MLP stores < 99% is not trained, so the f MLP (a 20,000-epoch GD build at F = 4096) is not
    built; a trainable point builds both, f' from seed + 1 as before; code_width builds f' only when f stores."""
    from symformer.facts.mlp import FactMLP

    built = []

    def fake(K, V, facts, kind, seed=0, h=None, **kw):  # stores everything from h = 8 on
        built.append(seed)
        mlp = FactMLP(K.shape[1], h, activation="silu", gated=True, bias=True, out_bias=True)
        mlp.accuracy = 1.0 if h >= 8 else 0.5
        return mlp

    monkeypatch.setattr(fact_recall_runs, "build_fact_mlp", fake)
    monkeypatch.setattr(fact_recall_runs, "train_ssfr", lambda model, task, cfg, checkpoint=None: {"steps": 0})
    rec = fact_recall_search.ssfr_point("gd-swiglu", 4, 32, 16, seed=3, quick=True)
    assert built == [4] and rec["trained"] is False and rec["capacity"] is None and rec["capacity_new"] == 0.5
    built.clear()
    rec = fact_recall_search.ssfr_point("gd-swiglu", 8, 32, 16, seed=3, quick=True)
    assert built == [4, 3] and rec["trained"] is True and rec["capacity"] == 1.0
    assert rec["params"] == fact_recall_runs.count_params(
        FactMLP(16, 8, activation="silu", gated=True, bias=True, out_bias=True)
    )
    built.clear()
    assert fact_recall_search.code_width("gd-swiglu", 32, 16, seeds=2, start=4, max_size=4, bisect=False) is None
    assert built == [0, 1]  # each seed's f MLP fails: no f' build
    built.clear()
    assert fact_recall_search.code_width("gd-swiglu", 32, 16, seeds=2, start=8, max_size=8, bisect=False) == 8
    assert built == [0, 1]  # seed 0: f then f' (seed + 1)


def test_a_killed_search_resumes_from_its_work_dir(monkeypatch, tmp_path):
    """ssfr_search with a work_dir remembers every finished point and code-width check: run again after a kill,
    it builds and trains only what it had not finished, and returns what an uninterrupted search returns."""
    from symformer.facts.mlp import FactMLP

    built, trained, kill = [], [], {"at": None}

    class Killed(Exception):
        pass

    def fake(K, V, facts, kind, seed=0, m=None, options=None, **kw):  # stores from m = 12 on
        built.append((m, seed, options.encoder_hidden))
        mlp = FactMLP(K.shape[1], 4, activation="silu", gated=True, bias=True, out_bias=True)
        mlp.accuracy = 1.0 if m >= 12 else 0.5
        return mlp

    def train(model, task, cfg, checkpoint=None):
        trained.append(checkpoint)
        if len(trained) == kill["at"]:  # the third point (h~ = 8), after h~ = 2 and 4 are remembered
            raise Killed
        return {"steps": 1}

    monkeypatch.setattr(fact_recall_runs, "build_fact_mlp", fake)
    monkeypatch.setattr(fact_recall_runs, "train_ssfr", train)
    monkeypatch.setattr(
        fact_recall_runs, "fact_adaptive_accuracy", lambda model, task, mlp: 1.0 if mlp.h_tilde >= 5 else 0.5
    )
    monkeypatch.setattr(fact_recall_runs, "lipschitz_estimate", lambda *a, **k: 1.0)
    monkeypatch.setattr(FactMLP, "h_tilde", property(lambda self: built[-1][2]), raising=False)
    args = ("bin+jl", 32, 16, 1, True, 8, 64)
    plain = fact_recall_search.ssfr_search(*args)
    n_plain = len(built)
    built.clear(), trained.clear()
    kill["at"] = 3
    with pytest.raises(Killed):
        fact_recall_search.ssfr_search(*args, work_dir=str(tmp_path))
    before = len(built)
    again = fact_recall_search.ssfr_search(*args, work_dir=str(tmp_path))

    def same(r):  # every point's wall time differs between calls
        return {**r, "points": [{k: v for k, v in q.items() if k != "seconds"} for q in r["points"]]}

    assert same(again) == same(plain) and again["h_tilde"] == 5
    # the resumed call repeats only the point that was killed (its two builds), nothing finished before it
    assert len(built) - before == n_plain - before + 2 and all(c is not None for c in trained)
    assert not list(tmp_path.glob("*.pt"))


@pytest.mark.parametrize("start, probes", [(2, [2, 4, 8, 6, 5]), (16, [16, 8, 4, 6, 5]), (5, [5, 2, 3, 4])])
def test_size_search_answer_does_not_depend_on_the_start(start, probes):
    """Doubling while the size fails, halving while it passes, then bisection: the smallest passing size (5)
    from any start; a passing floor is returned as is, and nothing below the floor is tried."""

    seen = []

    def ok(n):
        seen.append(n)
        return n >= 5

    assert fact_recall_search._smallest(ok, start, 64, bisect=True) == 5 and seen == probes
    seen.clear()
    assert fact_recall_search._smallest(ok, 16, 64, bisect=True, floor=7) == 7 and seen == [16, 8, 7]


def test_size_search_stops_within_its_resolution():
    """Large sizes bisect until the bracket is within 1/16 of its upper end: the threshold 300 from start 32
    (the F = 4096 GD start) gives 304 after 9 probes (bisecting to 1 would take 4 more). Any threshold t: the
    answer r has t <= r <= t + max(1, r // 16) - 1, so answers below 32 are exact."""

    seen = []

    def ok(n):
        seen.append(n)
        return n >= 300

    assert fact_recall_search.SIZE_RESOLUTION == 16
    assert fact_recall_search._smallest(ok, 32, 1024, bisect=True) == 304 and seen == [
        32,
        64,
        128,
        256,
        512,
        384,
        320,
        288,
        304,
    ]
    for t in range(1, 700):
        r = fact_recall_search._smallest(lambda n, t=t: n >= t, 2, 1024, bisect=True)
        assert t <= r <= t + max(1, r // 16) - 1


def test_search_reports_the_largest_failing_size(monkeypatch):

    def point(kind, size, n_facts, d, seed, quick, paper_budget=False, h_tilde=None, work_dir=None, device="cpu"):
        return {"params": size, "fact_adaptive_accuracy": 1.0 if size >= 300 else 0.5}

    monkeypatch.setattr(fact_recall_search, "ssfr_point", point)
    r = fact_recall_search.ssfr_search("gd-relu", 4096, 128, 1, False, 32, 1024, bisect=True)
    assert (r["min_size"], r["max_failing_size"], r["min_params"]) == (304, 288, 304)
    r = fact_recall_search.ssfr_search("gd-relu", 4096, 128, 1, False, 32, 256, bisect=True)
    assert (r["min_size"], r["max_failing_size"]) == (None, 256)
    monkeypatch.setattr(fact_recall_search, "ssfr_point", lambda *a, **k: {"params": 1, "fact_adaptive_accuracy": 1.0})
    r = fact_recall_search.ssfr_search("gd-relu", 4096, 128, 1, False, 4, 256, bisect=True)
    assert (r["min_size"], r["max_failing_size"]) == (1, None)


def test_hidden_size_searches_start_scaled_with_f():
    from symformer.experiments.fact_recall.plan import START, start_size

    assert start_size("gd-swiglu", 256) == START["gd-swiglu"] and start_size("gd-relu", 4096) == 16 * START["gd-relu"]
    assert start_size("bin+jl", 4096) == START["bin+jl"]


def test_a_killed_lm_job_resumes_its_training_swap_and_finished_edits(monkeypatch, tmp_path):
    """lm_run with a work_dir, killed in its second editing fraction: run again, it trains nothing, repeats
    neither the swap check nor the first fraction, and returns what an uninterrupted run returns."""

    monkeypatch.setattr(fact_recall_lm_runs, "LMConfig", _small_lm_config)  # small fact MLPs and batches: a few seconds
    swaps, edits, kill = [], [], {"at": None}
    real_swap, real_edit = fact_recall_lm_runs.swap_check, fact_recall_lm_runs.run_editors

    def swap(*a, **k):
        swaps.append(1)
        return real_swap(*a, **k)

    def edit(*a, **k):
        edits.append(1)
        if len(edits) == kill["at"]:
            raise KeyboardInterrupt
        return real_edit(*a, **k)

    def train(model, *a, **k):  # counts the training steps each call takes
        forward = model.forward

        def count(*x, **y):
            steps.append(1)
            return forward(*x, **y)

        model.forward = count
        try:
            return real_train(model, *a, **k)
        finally:
            model.forward = forward

    steps, real_train = [], fact_recall_lm_runs.train_lm
    monkeypatch.setattr(fact_recall_lm_runs, "swap_check", swap)
    monkeypatch.setattr(fact_recall_lm_runs, "run_editors", edit)
    monkeypatch.setattr(fact_recall_lm_runs, "train_lm", train)
    args = dict(n_facts=20, d=16, mlp_hidden=32, steps=12, fractions=[0.1, 0.2], seed=0, quick=True)
    plain = fact_recall_lm_runs.lm_run(**args)
    swaps.clear(), edits.clear(), steps.clear()
    kill["at"] = 2
    with pytest.raises(KeyboardInterrupt):
        fact_recall_lm_runs.lm_run(**args, work_dir=str(tmp_path))
    assert len(list(tmp_path.glob("*.pt"))) == 1 and len(list(tmp_path.glob("*.json"))) == 2  # swap, edit 0.1
    kill["at"] = None
    again = fact_recall_lm_runs.lm_run(**args, work_dir=str(tmp_path))
    assert (len(swaps), len(edits), len(steps)) == (1, 3, 12)  # the resumed call ran only the killed fraction

    def same(r):  # wall times differ between calls
        return {k: v for k, v in r.items() if k not in ("timing", "seconds", "train")} | {
            "train": {k: v for k, v in r["train"].items() if k != "seconds"}
        }

    assert same(json.loads(json.dumps(again))) == same(json.loads(json.dumps(plain)))
    assert set(again["timing"]) == {"build", "train_and_swap", "edit_0.1", "edit_0.2"}


def _small_lm_config(**kw):
    from symformer.facts.lm.books_lm import LMConfig

    return LMConfig(mlp_steps=60, batch_size=16, **kw)


def test_paper_usability_protocol_jobs_and_best_of(tmp_path, monkeypatch):
    """usability_trainings=paper: one job per (kappa, alpha, lr, training seed), App. A.2.4's 5 lrs x 4 seeds; the
    default keeps the recorded run's 32 job signatures (no lr / train_seed kwargs: their records stay reusable);
    the claims keep the best training per point; a bad value is refused before any training."""
    from symformer.facts.mlp import FactMLP

    opts = {k: v[0] for k, v in fact_recall_plan.OPTIONS.items()}
    one = fact_recall_plan.usability_jobs(RunContext(out_dir=tmp_path, quick=False, progress=False, options=opts), 5)
    assert len(one) == 32 and all(
        set(j.kwargs) == {"kappa", "alpha", "n_facts", "d", "h", "seed", "quick"} for j in one
    )
    assert one[0].kwargs == dict(kappa=1.1, alpha=0.0, n_facts=256, d=128, h=6, seed=0, quick=False)
    ctx = RunContext(out_dir=tmp_path, quick=False, progress=False, options={**opts, "usability_trainings": "paper"})
    paper = fact_recall_plan.usability_jobs(ctx, 5)
    assert len(paper) == 640 and len({j.key for j in paper}) == 640
    assert {(j.kwargs["lr"], j.kwargs["train_seed"]) for j in paper} == {
        (lr, s) for lr in fact_recall_plan.PAPER_LRS for s in range(4)
    }
    pts = [{"kappa": 1.1, "whiten": 0.0, "fact_adaptive_accuracy": a, "tag": t} for t, a in enumerate((0.5, None, 0.9))]
    pts.append({"kappa": 10.0, "whiten": 0.0, "fact_adaptive_accuracy": None, "tag": 3})
    assert [p["tag"] for p in fact_recall_claims.best_trainings(pts)] == [2, 3]
    bad = RunContext(out_dir=tmp_path, quick=True, progress=False, options={**opts, "usability_trainings": "best"})
    with pytest.raises(ValueError, match="^fact-recall.usability_trainings: got 'best'"):
        fact_recall_report.run(bad)
    # lr and train_seed reach the SSFR training only; the task and both MLPs stay those of `seed`
    seen = {}

    def fake(K, V, facts, kind, seed=0, h=None, **kw):
        seen.setdefault("builds", []).append(seed)
        mlp = FactMLP(K.shape[1], h, activation="silu", gated=True, bias=True, out_bias=True)
        mlp.accuracy = 1.0
        return mlp

    def train(model, task, cfg, checkpoint=None):
        seen["cfg"] = (cfg.lr, cfg.seed)
        return {"steps": 0}

    monkeypatch.setattr(fact_recall_runs, "build_fact_mlp", fake)
    monkeypatch.setattr(fact_recall_runs, "train_ssfr", train)
    fact_recall_search.ssfr_point("gd-swiglu", 8, 32, 16, seed=3, quick=True, lr=2e-5, train_seed=7)
    assert seen == {"builds": [4, 3], "cfg": (2e-5, 7)}
    seen.clear()
    fact_recall_search.ssfr_point("gd-swiglu", 8, 32, 16, seed=3, quick=True)
    assert seen == {"builds": [4, 3], "cfg": (2e-3, 3)}  # the quick config's lr and the point's seed


def test_full_run_orders_ssfr_searches_constructions_first_and_the_longest_gd_last(tmp_path):

    opts = {k: v[0] for k, v in fact_recall_plan.OPTIONS.items()}
    jobs = fact_recall_plan.ssfr_jobs(RunContext(out_dir=tmp_path, quick=False, progress=False, options=opts))
    order = [(j.kwargs["kind"], j.kwargs["n_facts"]) for j in sorted(jobs, key=fact_recall_report._ssfr_order)]
    assert len(order) == 25 and order[:2] == [("bin+gd", 4096), ("bin+jl", 4096)]
    assert order[-2:] == [("gd-relu", 4096), ("gd-swiglu", 4096)]
    kinds = [k for k, _ in order]
    assert kinds.index("ntk") > max(i for i, k in enumerate(kinds) if k.startswith("bin"))
    assert kinds.index("gd-relu") > max(i for i, k in enumerate(kinds) if k == "ntk")


def test_scaling_row_names_kinds_whose_sizes_do_not_grow_with_f():
    """S5.1-scaling prints the minimum sizes by F and names a kind whose sizes fall as F grows (the slope then mixes
    in the search's own variation); the verdict rule is unchanged."""
    from symformer.results import ExperimentResult

    rows = [
        ("bin+gd", 1024, 259824),
        ("bin+gd", 2048, 44970),
        ("bin+gd", 4096, 300000),
        ("bin+gd", 512, None),
        ("bin+jl", 1024, 91732),
        ("bin+jl", 2048, 180396),
        ("bin+jl", 4096, 400000),
    ]
    out = {
        f"k{i}": {"kind": k, "n_facts": n, "min_params": p, "best_fact_adaptive_accuracy": 0.995, "paper_budget": False}
        for i, (k, n, p) in enumerate(rows)
    }
    res = ExperimentResult()
    res = fact_recall_claims.ssfr_claims(out, quick=False)
    row = [c for c in res.claims if c.id == "S5.1-scaling"][0]
    assert "not increasing in F: bin+gd" in row.measured and "bin+jl" not in row.measured.split("not increasing")[1]
    assert "(2048, 44970)" in row.measured


def test_scaling_row_names_trainings_that_ended_above_uniform_loss():
    """A trained point whose final loss is above ln F (worse than a uniform guess among the values) is listed in
    ssfr_diverged_trainings and counted in the S5.1-scaling row; one at the search's largest failing size is named
    as deciding its bracket. Losses at or below ln F and untrained points are not listed; the verdict is unchanged."""
    from symformer.results import ExperimentResult

    def pt(h, loss=None):
        return {
            "kind": "gd-relu",
            "n_facts": 2048,
            "hidden": h,
            "size": h,
            "h_tilde": None,
            **({"train": {"final_loss": loss}} if loss is not None else {}),
        }

    lnf = math.log(2048)
    pts = [pt(16), pt(64, 0.3), pt(40, lnf + 0.01), pt(44, 0.5), pt(42, lnf), pt(43, lnf + 2.0)]
    out = {
        "k": {
            "kind": "gd-relu",
            "n_facts": 2048,
            "min_params": 11436,
            "best_fact_adaptive_accuracy": 0.995,
            "paper_budget": False,
            "max_failing_size": 43,
            "points": pts,
        }
    }
    res = ExperimentResult()
    res = fact_recall_claims.ssfr_claims(out, quick=False)
    rows = res.metrics["ssfr_diverged_trainings"]
    assert [(q["hidden"], q["deciding"]) for q in rows] == [(40, False), (43, True)]
    row = [c for c in res.claims if c.id == "S5.1-scaling"][0]
    assert "2 training(s) ended with loss above ln F" in row.measured
    assert "deciding a bracket: gd-relu F=2048 h=43" in row.measured and row.verdict == "inconclusive"
    out["k"]["max_failing_size"] = 42
    res = ExperimentResult()
    res = fact_recall_claims.ssfr_claims(out, quick=False)
    assert "none deciding a bracket" in [c for c in res.claims if c.id == "S5.1-scaling"][0].measured


@pytest.mark.parametrize(
    "paper_budget,want,want_linear", [(False, "inconclusive", "inconclusive"), (True, "fails", "holds")]
)
def test_scaling_row_decides_only_under_the_paper_budget(paper_budget, want, want_linear):
    """Slopes measured with our shorter SSFR budget neither refute nor support the claim (training longer shrinks
    the sizes, unevenly across F); under the paper's budget a slope out of [0.75, 1.25] fails and one in it holds."""
    from symformer.results import ExperimentResult

    def row(params):
        out = {
            f"k{i}": {
                "kind": "bin+jl",
                "n_facts": n,
                "min_params": p,
                "best_fact_adaptive_accuracy": 0.995,
                "paper_budget": paper_budget,
            }
            for i, (n, p) in enumerate(params)
        }
        res = ExperimentResult()
        res = fact_recall_claims.ssfr_claims(out, quick=False)
        return [c for c in res.claims if c.id == "S5.1-scaling"][0]

    steep = row([(1024, 10_000), (2048, 80_000), (4096, 640_000)])  # slope about 2.7
    assert steep.verdict == want and "paper's" in steep.evidence
    linear = row([(F, 10 * F * math.log(F)) for F in (1024, 2048, 4096)])
    assert linear.verdict == want_linear and "slopes" in linear.measured
