"""Experiment `fact-recall`: fact-storing MLPs inside transformers (fact-storing-mlps.txt Sec. 5, App. A.2-A.3).

(1) SSFR: smallest MLP with >= 99% fact-adaptive accuracy per MLP kind and F (Sec. 5.1, Fig. 3a);
(2) capacity against usability over whitening alpha x kappa, and the Lipschitz estimate (Sec. 5.2-5.3; full);
(3) the book -> author LM with a fact expert: MLP swap check (Sec. 5.4, Fig. 9b);
(4) editing: MLP swapping against ROME, MEMIT and AlphaEdit (Fig. 4, App. A.3.4).
Quick: SSFR at F = 256 with one kind, the swap check and editing at one split. Runs go through
experiments.jobs (records under runs/, --jobs, --resume).
"""

from __future__ import annotations

import math
import sys

from symformer._validation import check_choice
from symformer.experiments import fact_recall_runs as R
from symformer.experiments.base import RunContext, experiment
from symformer.experiments.jobs import Job, reuse_note, run_jobs
from symformer.experiments.plots import size_vs_facts
from symformer.results import Claim, ExperimentResult, verdict

PAPER_SETTING_SSFR = "d=128, F in 2^8..2^14, 4 seeds (max), AdamW lr 2e-4 for 4.8M sequences, 5 MLP kinds"
START = {"gd-swiglu": 2, "gd-relu": 2, "bin+jl": 16, "bin+gd": 8, "ntk": 256}
OPTIONS = {
    "kinds": (["bin+jl"], "SSFR MLP kinds in quick mode (full: bin+jl, bin+gd, gd-swiglu, gd-relu, ntk)"),
    "full_facts": ([256, 512, 1024, 2048, 4096], "SSFR fact-set sizes F in full mode"),
    "seeds": (1, "seeds per SSFR size in full mode (the paper: 4, max over seeds)"),
    "lm_facts": (1024, "books in the full-mode LM (quick: 128)"),
    "paper_budget": (False, "full mode: train SSFR transformers the paper's way (AdamW 2e-4, 4.8M sequences)"),
    "usability_trainings": (
        "one",
        "SSFR trainings per usability point: 'one' (lr 1e-3, seed 0) or 'paper' (best "
        "of 5 lrs x 4 seeds, App. A.2.4: 640 jobs, 20x the cost)",
    ),
}


def _log(ctx: RunContext, msg: str) -> None:
    if ctx.progress:
        print(f"[fact-recall] {msg}", file=sys.stderr, flush=True)


def _start(kind: str, n_facts: int) -> int:
    """Where a size search begins. Hidden-size kinds (GD, NTK): the F = 256 start scaled with F (their sizes grow
    about like F), since the search halves as well as doubles (fact_recall_runs._smallest) and its answer does
    not depend on the start; it only skips the failing small sizes, each a 20,000-epoch GD build at F = 4096.
    Constructions: the code width m grows like log F, so their start stays."""
    base = START.get(kind, 8)
    return base if R.KNOB[kind] == "m" else base * max(1, n_facts // 256)


def _ssfr_jobs(ctx: RunContext) -> list[Job]:
    kinds = ctx.options["kinds"] if ctx.quick else ["bin+jl", "bin+gd", "gd-swiglu", "gd-relu", "ntk"]
    Fs = [256] if ctx.quick else ctx.options["full_facts"]
    seeds = 1 if ctx.quick else ctx.options["seeds"]
    return [
        Job(
            f"ssfr_{k.replace('+', '-')}_F={F}",
            R.ssfr_search,
            dict(
                kind=k,
                n_facts=F,
                d=128,
                seeds=seeds,
                quick=ctx.quick,
                start=_start(k, F),
                max_size=START.get(k, 8) * 2 ** (4 if ctx.quick else 9),
                bisect=not ctx.quick,
                paper_budget=bool(ctx.options["paper_budget"]) and not ctx.quick,
            ),
            checkpoints=True,  # an F = 4096 search outlasts a session: points and trainings resume mid-job
        )
        for k in kinds
        for F in Fs
    ]


def _ssfr_claims(res: ExperimentResult, out: dict, quick: bool) -> None:
    faa = {f"{r['kind']}/F={r['n_facts']}": r["best_fact_adaptive_accuracy"] for r in out.values()}
    mp = {f"{r['kind']}/F={r['n_facts']}": r["min_params"] for r in out.values()}
    res.metrics["ssfr_fact_adaptive_accuracy"] = faa
    res.metrics["ssfr_min_params_99"] = mp
    paper_budget = all(r.get("paper_budget") for r in out.values())
    train = (
        "AdamW lr 2e-4, <= 4.8M sequences"
        if paper_budget
        else "AdamW lr 2e-3 <= 400 steps x 256 sequences"
        if quick
        else "AdamW lr 1e-3 <= 3000 steps x 256 sequences"
    )
    setting = (
        f"ours: d=128, {'F=256, 1 seed, ' if quick else 'F as listed, '}{train}, junk embeddings trained, "
        + ("sizes by doubling" if quick else f"doubling then bisection to 1/{R.SIZE_RESOLUTION} of the size")
        + "; constructions: m = smallest code width storing f and f', then gadget width h~ searched from "
        "ceil(F/d) (h = m h~)"
    )
    best = max(faa.values())
    res.claims.append(
        Claim(
            "S5.1",
            "a 1-layer transformer with the four changes uses a frozen fact MLP for recall "
            "(>99% fact-adaptive accuracy)",
            "> 99% for constructed and GD MLPs",
            f"best fact-adaptive accuracy per kind/F: {faa}",
            verdict(True if best >= R.TARGET else (False if paper_budget else None)),
            "holds if some MLP kind reaches >= 0.99 after the swap (a miss: 'fails' only under the paper's budget)",
            setting,
            PAPER_SETTING_SSFR,
        )
    )
    # evidence for the gadget-width search: each constructed point's h~, Lipschitz estimate (eq. 8) and accuracy
    res.metrics["ssfr_constructed_points"] = [
        {
            k: p.get(k)
            for k in ("kind", "n_facts", "seed", "size", "h_tilde", "params", "lipschitz", "fact_adaptive_accuracy")
        }
        for r in out.values()
        if r["kind"].startswith("bin")
        for p in r.get("points", [])
        if p.get("trained")
    ]
    trail = "; ".join(
        f"{p['kind']} F={p['n_facts']} m={p['size']} h~={p['h_tilde']}: Lipschitz {p['lipschitz']:.3g}, "
        f"accuracy {p['fact_adaptive_accuracy']:.4f}"
        for p in res.metrics["ssfr_constructed_points"]
    )
    cons = {k: v for k, v in faa.items() if k.startswith("bin")}
    reached = bool(cons) and max(cons.values()) >= R.TARGET
    # a miss is a "fails" only when trained the paper's way; with our shorter budget it cannot decide
    res.claims.append(
        Claim(
            "S5.1-constructed",
            "a constructed (Bin+JL / Bin+GD) MLP is usable: >= 99% fact-adaptive accuracy",
            ">= 99% (Fig. 3a)",
            f"{cons} ({trail})" if cons else "not run",
            verdict(True if reached else (False if cons and paper_budget else None)),
            "holds if a constructed kind reaches 0.99 at some size <= the search cap; a miss is 'fails' only under "
            "the paper's training budget (--set fact-recall.paper_budget=true), else inconclusive",
            setting,
            PAPER_SETTING_SSFR,
        )
    )
    _scaling_claim(res, out, setting, paper_budget)


def diverged_trainings(out: dict) -> list[dict]:
    """Trained SSFR points whose final training loss is above ln F, the cross-entropy of a uniform guess among
    the F values (the loss is decoded among the values: train.fact_recall.value_logits). There the training did
    not fit, so the point's failure may say more about the training than about the MLP's usability. Seen in the
    recorded run: the square gadget systems at h~ = ceil(F/d) (Lipschitz in the thousands, Sec. 5.3), GD-SwiGLU at
    h = 2 and one GD-ReLU training at F = 2048, h = 40 (docs/fact_recall_protocol.md, "A training collapse").
    `deciding`: the point is its search's largest failing size, so the reported minimum rests on it."""
    rows = []
    for r in out.values():
        for p in r.get("points", []):
            loss = (p.get("train") or {}).get("final_loss")
            if loss is not None and loss > math.log(p["n_facts"]):
                rows.append(
                    {
                        "kind": p["kind"],
                        "n_facts": p["n_facts"],
                        "hidden": p["hidden"],
                        "h_tilde": p.get("h_tilde"),
                        "final_loss": loss,
                        "deciding": p["hidden"] == r.get("max_failing_size"),
                    }
                )
    return sorted(rows, key=lambda q: (q["kind"], q["n_facts"], q["hidden"]))


def _diverged_text(rows: list[dict]) -> str:
    if not rows:
        return ""
    name = [
        f"{q['kind']} F={q['n_facts']} h={q['hidden']}" + (f" (h~={q['h_tilde']})" if q["h_tilde"] else "")
        for q in rows
        if q["deciding"]
    ]
    return f"; {len(rows)} training(s) ended with loss above ln F (ssfr_diverged_trainings), " + (
        f"deciding a bracket: {', '.join(name)}" if name else "none deciding a bracket"
    )


def _scaling_claim(res: ExperimentResult, out: dict, setting: str, paper_budget: bool = False) -> None:
    """S5.1-scaling: log-log slope of the minimum parameters against F log F per kind (>= 3 F values). Sizes
    measured with our shorter SSFR training budget are not the minima: training longer shrinks them, by 10x at
    F = 1024 for bin+gd (docs/fact_recall_protocol.md, "The same budget effect at F = 1024"), and by how much at
    each F is unknown, so their slope neither refutes nor supports the claim: holds / fails only under the
    paper's budget, inconclusive otherwise (the slopes are reported either way)."""
    slopes, sizes = {}, {}
    for kind in sorted({r["kind"] for r in out.values()}):
        pts = sorted((r["n_facts"], r["min_params"]) for r in out.values() if r["kind"] == kind and r["min_params"])
        sizes[kind] = pts
        if len(pts) >= 3:
            xs = [math.log(F * math.log(F)) for F, _ in pts]
            ys = [math.log(p) for _, p in pts]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slopes[kind] = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    res.metrics["ssfr_params_vs_FlogF_slope"] = slopes
    # the fit presumes sizes growing with F; a kind whose sizes do not is named (the slope then mixes in the search's
    # own variation: docs/fact_recall_protocol.md, "What the bin+gd searches at small F show")
    unordered = [k for k, pts in sizes.items() if any(b[1] < a[1] for a, b in zip(pts, pts[1:]))]
    ok = None if not slopes else all(0.75 <= s <= 1.25 for k, s in slopes.items() if k != "ntk")
    diverged = diverged_trainings(out)  # reported beside the sizes; the verdict rule is unchanged
    res.metrics["ssfr_diverged_trainings"] = diverged
    res.claims.append(
        Claim(
            "S5.1-scaling",
            "the minimum usable MLP size scales like the F log F optimum (constructed and GD)",
            "log W ~ log F + log log F",
            f"log-log slopes of params against F log F: {slopes or 'need >= 3 F values'}; minimum parameters by F: "
            f"{sizes}"
            + (f"; not increasing in F: {', '.join(unordered)}" if unordered else "")
            + _diverged_text(diverged),
            verdict(ok if paper_budget else None),
            "under the paper's training budget (--set fact-recall.paper_budget=true): holds if every non-NTK slope "
            "is within [0.75, 1.25], else fails; with our shorter budget inconclusive (the sizes are upper bounds "
            "that training longer shrinks, unevenly across F)",
            setting,
            PAPER_SETTING_SSFR,
        )
    )


KAPPAS = (1.1, 10.0, 100.0, 1000.0)
ALPHAS = (0.0, 0.01, 0.022, 0.046, 0.1, 0.22, 0.46, 1.0)
PAPER_LRS = (2e-6, 2e-5, 2e-4, 2e-3, 2e-2)  # App. A.2.4, 4 seeds each, the best transformer kept
PAPER_SEEDS = 4


def _paper_usability(ctx: RunContext) -> bool:
    """Whether usability_trainings asks for the paper's best of 5 lrs x 4 seeds ('paper') or one training ('one');
    any other value is a ValueError naming the option."""
    mode = ctx.options.get("usability_trainings", "one")
    return check_choice("fact-recall.usability_trainings", mode, ("one", "paper")) == "paper"


def _usability_jobs(ctx: RunContext, h_star: int) -> list[Job]:
    """One job per (kappa, alpha); with `usability_trainings=paper` one per (kappa, alpha, lr, training seed)
    (App. A.2.4's 5 lrs x 4 seeds: 20x the cost), the task and MLPs those of ctx.seed."""
    h = max(1, round(1.1 * h_star))  # App. A.2.4: m = 1.1 h*
    base = dict(n_facts=256, d=128, h=h, seed=ctx.seed, quick=False)
    if not _paper_usability(ctx):
        return [
            Job(f"usab_k={k:g}_a={a:g}", R.usability_point, dict(kappa=k, alpha=a, **base), checkpoints=True)
            for k in KAPPAS
            for a in ALPHAS
        ]
    return [
        Job(
            f"usab_k={k:g}_a={a:g}_lr={lr:g}_s={s}",
            R.usability_point,
            dict(kappa=k, alpha=a, **base, lr=lr, train_seed=ctx.seed + s),
            checkpoints=True,
        )
        for k in KAPPAS
        for a in ALPHAS
        for lr in PAPER_LRS
        for s in range(PAPER_SEEDS)
    ]


def best_trainings(pts: list[dict]) -> list[dict]:
    """Per (kappa, alpha) the point whose transformer reached the largest fact-adaptive accuracy (App. A.2.4);
    points untrained (their f' MLP stored < 99%) count as 0. Order: first appearance."""
    best: dict = {}
    for p in pts:
        key = (p["kappa"], p["whiten"])
        if key not in best or (p["fact_adaptive_accuracy"] or 0.0) > (best[key]["fact_adaptive_accuracy"] or 0.0):
            best[key] = p
    return list(best.values())


#: App. A.2.4 keeps, per (kappa, alpha), the best of 5 learning rates x 4 seeds; the recorded run trains once
PAPER_TRAININGS_PER_POINT = 20


def _spearman(x: list, y: list) -> float | None:
    """Rank correlation, None with fewer than 3 points or a constant side (no ranks to correlate)."""
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def _usability_verdict(ok: bool | None, trainings: int) -> str:
    """One SSFR training per point measures usability with its training noise (the paper keeps the best of 20):
    such a run can confirm a claim but not refute it."""
    if ok is None:
        return verdict(None)
    return verdict(True if ok else (False if trainings >= PAPER_TRAININGS_PER_POINT else None))


def _usability_claims(res: ExperimentResult, pts: list[dict], trainings: int = 1) -> None:
    ok = [p for p in pts if p["usability"] is not None]
    alpha = [p["whiten"] for p in ok]
    rho_l = _spearman([p["lipschitz"] for p in ok], [p["usability"] for p in ok])
    rho_c = _spearman(alpha, [p["capacity_new"] for p in ok])
    rho_u = _spearman(alpha, [p["usability"] for p in ok])
    res.metrics["usability_lipschitz_spearman"] = rho_l
    res.metrics["usability_points"] = [
        {k: p[k] for k in ("kappa", "whiten", "capacity_new", "fact_adaptive_accuracy", "usability", "lipschitz")}
        for p in pts
    ]
    caps = sorted({p["capacity_new"] for p in ok})
    flat = f" (capacity {caps[0]:.4f} at every point: no trade-off can show)" if len(caps) == 1 else ""
    how = "best of 5 lrs x 4 seeds" if trainings >= PAPER_TRAININGS_PER_POINT else "lr 1e-3, seed 0"
    setting = (
        f"ours: GD SwiGLU (CE) at 1.1 h*, F=256, d=128, {trainings} SSFR training(s) per point ({how}); "
        f"{len(ok)} points"
    )
    ps = f"SwiGLU: 8 kappas x 8 alphas, 5 lrs x 4 seeds each (best of {PAPER_TRAININGS_PER_POINT} kept)"
    rule = f"; a miss is 'fails' only with the paper's best of {PAPER_TRAININGS_PER_POINT} trainings per point"
    res.claims.append(
        Claim(
            "S5.2",
            "whitening trades usability for capacity: more whitening, more facts stored, less usable",
            "trade-off (Fig. 3b)",
            f"Spearman(alpha, capacity) = {rho_c}{flat}, Spearman(alpha, usability) = {rho_u}",
            _usability_verdict(None if rho_c is None or rho_u is None else (rho_c > 0 and rho_u < 0), trainings),
            "holds if capacity rises and usability falls with alpha; inconclusive where either is constant" + rule,
            setting,
            ps,
        )
    )
    res.claims.append(
        Claim(
            "S5.3",
            "the MLP's Lipschitz constant (eq. 8) predicts its usability (higher Lipschitz, less usable)",
            "negative relation (Fig. 3c)",
            f"Spearman(Lipschitz, usability) = {rho_l}",
            _usability_verdict(None if rho_l is None else rho_l <= -0.5, trainings),
            "holds if the rank correlation is <= -0.5" + rule,
            setting,
            ps,
        )
    )


QUICK_MISS = "; a miss is 'fails' only in full mode (quick: 128 facts, reduced grid -> inconclusive)"


def _miss_verdict(ok: bool, quick: bool) -> str:
    """A quick run is far from the paper's setting: it can confirm a claim but not refute it."""
    return verdict(True if ok else (None if quick else False))


# App. A.3.4 / Fig. 4: 327, 819 and 1638 of 2^14 facts altered; 0.2 is issue 14's second split (not in the
# paper; with preserved = 4 x altered it uses every fact)
LM_FRACTIONS = [0.02, 0.05, 0.1, 0.2]


def _lm_job(ctx: RunContext) -> Job:
    """App. A.3 LM, swap check and editing. Quick: 128 books, d = 64, 300 steps, the 10% split only."""
    F = 128 if ctx.quick else ctx.options["lm_facts"]
    paper = bool(ctx.options["paper_budget"]) and not ctx.quick
    kw = dict(
        n_facts=F,
        d=64 if ctx.quick else 128,
        mlp_hidden=256 if ctx.quick else 1024,
        # App. A.3.2 -> A.2.2: AdamW lr 2e-4 for 4.8M sequences (batch 128: 37,500 steps) under paper_budget
        steps=300 if ctx.quick else (4_800_000 // 128 if paper else 4000),
        fractions=[0.1] if ctx.quick else LM_FRACTIONS,
        seed=ctx.seed,
        quick=ctx.quick,
        lr=2e-4 if paper else 2e-3,
    )
    return Job(f"lm_F={F}", R.lm_run, kw, checkpoints=True)  # training, swap check, each fraction resume


def _top1_job(lm_job: Job) -> Job:
    """The same LM with top-1 (Switch) routing, swap check only: A.3.2 names a 2-expert MoE with an MLP router
    but not how it routes, and the swap result hinges on it (docs/fact_recall_protocol.md (a))."""
    return Job(
        f"{lm_job.key}_top1", R.lm_run, {**lm_job.kwargs, "fractions": [], "router_top1": True}, checkpoints=True
    )


def _swap_text(sw: dict) -> str:
    parts = sw.get("nonfact_ce_parts", {})
    split = "".join(f"; {k.replace('_', ' ')} {b:.4f} -> {a:.4f}" for k, (b, a) in parts.items())
    gate = sw.get("nonfact_fact_gate")
    gate = "" if gate is None else f"; mean fact-expert gate on non-fact targets {gate:.3f}"
    own = sw.get("train_fact_accuracy")
    own = "" if own is None else f"own-fact accuracy before the swap {own:.4f}; "
    return (
        f"{own}new-fact accuracy {sw['new_fact_accuracy']:.4f}; non-fact CE {sw['nonfact_ce_before']:.4f} -> "
        f"{sw['nonfact_ce_after']:.4f} ({sw['nonfact_ce_change_pct']:+.2f}%){split}{gate}"
    )


def _swap_ok(sw: dict) -> bool:
    return sw["new_fact_accuracy"] > R.TARGET and sw["nonfact_ce_change_pct"] <= 5.0


def _swap_refutes(sw: dict) -> bool:
    """A reading refutes the claim only inside its scope: the LM uses the swapped MLP (new-fact accuracy > 99%,
    the usable transformers of Fig. 9a on which Fig. 9b measures the CE change) and the CE change misses. An LM
    that keeps its facts elsewhere (e.g. top-1 routing that rarely picks the fact expert) does not test it."""
    return sw["new_fact_accuracy"] > R.TARGET and sw["nonfact_ce_change_pct"] > 5.0


def _lm_claims(res: ExperimentResult, lm: dict, quick: bool, top1: dict | None = None) -> None:
    """S5.4-swap from the soft-router LM and, when run, the top-1 one: the router is not in the paper, so the
    claim holds if either reading meets it and fails only if both were measured and both refute it
    (`_swap_refutes`; full mode)."""
    sw = lm["swap"]
    res.metrics["lm_swap_new_fact_accuracy"] = sw["new_fact_accuracy"]
    res.metrics["lm_swap_nonfact_ce_change_pct"] = sw["nonfact_ce_change_pct"]
    readings = {"soft": sw} if top1 is None else {"soft": sw, "top1": top1["swap"]}
    res.metrics["lm_swap_by_router"] = {
        k: {"new_fact_accuracy": v["new_fact_accuracy"], "nonfact_ce_change_pct": v["nonfact_ce_change_pct"]}
        for k, v in readings.items()
    }
    ok = any(_swap_ok(v) for v in readings.values())
    refuted = not quick and top1 is not None and all(_swap_refutes(v) for v in readings.values())
    swap_verdict = verdict(True) if ok else verdict(False) if refuted else verdict(None)
    steps = lm["train"]["steps"]
    setting = (
        f"ours: {lm['n_facts']} books, d={lm['d']}, MSE SwiGLU fact MLP at a fixed h={lm['mlp_hidden']} (not the "
        f"smallest usable size), 16 templates (2 from App. A.3.1, 14 ours), single-token titles and names from a "
        f"seeded generator, AdamW lr {lm.get('lr', 2e-3):g} for {steps} steps x 128 sequences "
        f"({steps * 128 / 1e6:.2g}M), 1 seed; soft 2-expert router (editing) and rank-32 language expert behind "
        "the frozen sphere norm like the fact expert; the new MLP is MSE-trained from another seed; "
        "see docs/fact_recall_protocol.md"
    )
    lm_paper = (
        "Goodreads books/authors, 16 rephrases; d=256; SwiGLU MSE fact MLP at the smallest size with >= 99% "
        "usability (binary search, 4 seeds, Fig. 9a); AdamW lr 2e-4 for 4.8M sequences (A.2.2)"
    )
    res.claims.append(
        Claim(
            "S5.4-swap",
            "after swapping in an MLP storing other facts the LM outputs the new facts (> 99%) and its "
            "non-fact cross-entropy rises only ~3%",
            "> 99%; ~3%",
            " | ".join(f"{k} router: {_swap_text(v)}" for k, v in readings.items()),
            swap_verdict,
            "holds if accuracy > 0.99 and the CE change is <= 5% under either router reading; fails only if the "
            "soft and the top-1 LM were both measured and each uses the new MLP (accuracy > 0.99, the usable "
            "transformers of Fig. 9) with a CE change > 5%" + QUICK_MISS,
            setting + ("; top-1 LM: the same but Switch routing, swap check only" if top1 is not None else ""),
            lm_paper,
        )
    )
    scores, ratios = {}, {}
    for frac, e in lm["edits"].items():
        m = e["methods"]
        for name, r in m.items():
            scores[f"{name}/{frac}"] = r["score"]
        base = max(m[k]["score"] for k in ("rome", "memit", "alphaedit"))
        ratios[frac] = m["swap"]["score"] / base if base > 0 else None
    res.metrics["edit_score"] = scores
    res.metrics["edit_score_swap_vs_best_baseline"] = ratios
    res.metrics["edit_details"] = {
        f: {
            k: {kk: v[kk] for kk in ("efficacy", "paraphrase", "specificity", "score", "config") if kk in v}
            for k, v in e["methods"].items()
        }
        for f, e in lm["edits"].items()
    }
    measured, fig4 = _fig4_verdict(ratios, lm["edits"].get("0.1"), quick)
    res.claims.append(
        Claim(
            "Fig4",
            "MLP swapping doubles the editing score of the best of ROME, MEMIT and AlphaEdit at 10% altered",
            "~2x",
            measured,
            fig4,
            "holds if the ratio at 10% is >= 1.5 (harmonic-mean score); inconclusive where no editor could reach "
            "it (best baseline > 1/1.5: scores are at most 1)" + QUICK_MISS,
            setting
            + "; splits (preserved, altered): "
            + ", ".join(f"{e.get('n_preserved')}/{e.get('n_altered')}" for e in lm["edits"].values())
            + ("; quick grid: 25 steps, lr 0.5" if quick else "; App. A.3.4 grids"),
            lm_paper + "; editing: 16,384 facts, (preserved, altered) = (6554, 1638), (3277, 819), (1311, 327); "
            "grids of App. A.3.4",
        )
    )


def _fig4_verdict(ratios: dict, edit10: dict | None, quick: bool) -> tuple[str, str]:
    """(measured text, verdict) of Fig4. Scores are at most 1, so where the best baseline scores above 1/1.5 no
    editor can reach the 1.5x threshold: the comparison has no power at that operating point (the paper's
    baselines edit 1638 of 16,384 facts; with few facts they can be near perfect), which is inconclusive, not
    a failure of the paper's claim."""
    r10 = ratios.get("0.1")
    text = f"swap / best baseline per altered fraction: {ratios}"
    if r10 is None or edit10 is None:
        return text, verdict(None)
    base = max(edit10["methods"][k]["score"] for k in ("rome", "memit", "alphaedit"))
    text += f"; best baseline at 10%: {base:.4f}"
    if base * 1.5 > 1.0 and r10 < 1.5:
        return text + " (above 1/1.5: a 1.5x ratio is out of reach for any editor at this scale)", verdict(None)
    return text, _miss_verdict(r10 >= 1.5, quick)


def _ssfr_order(job: Job) -> tuple:
    """Constructions first (largest F first: S5.1's F = 4096 number early), then NTK, then GD smallest F first,
    so the two longest jobs (GD-SwiGLU and GD-ReLU at F = 4096, whose failing sizes are 20,000-epoch builds)
    run last, side by side, and no worker idles through a long final job. The order changes no result."""
    kind, F = job.kwargs["kind"], job.kwargs["n_facts"]
    if kind.startswith("gd-"):
        return (2, F, kind)
    return (1 if kind == "ntk" else 0, -F, kind)


def _run_plan(ctx: RunContext, lm_job: Job, runs, stats: dict) -> tuple[dict, dict, list[dict] | None, dict | None]:
    """(LM result, SSFR results by job key, usability points, top-1 LM result; the last two None in quick mode).
    The jobs are independent except that usability needs h* from the GD-SwiGLU F = 256 search. Full mode runs
    that search beside the LM job, then the top-1 LM and every other SSFR search (`_ssfr_order`) together with
    the usability points in one batch: no worker waits for a phase to drain. Quick: one batch, the LM job
    first."""
    ssfr_jobs = _ssfr_jobs(ctx)
    if ctx.quick:
        out = run_jobs([lm_job, *ssfr_jobs], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
        return out[lm_job.key], {j.key: out[j.key] for j in ssfr_jobs}, None, None
    star = [j for j in ssfr_jobs if j.kwargs["kind"] == "gd-swiglu" and j.kwargs["n_facts"] == 256]
    first = run_jobs([lm_job, *star], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
    h = first[star[0].key]["min_size"] if star else None
    rest = sorted((j for j in ssfr_jobs if j not in star), key=_ssfr_order)
    usab = _usability_jobs(ctx, h or 64)
    top1 = _top1_job(lm_job)
    second = run_jobs([top1, *rest, *usab], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
    done = {**first, **second}
    return (first[lm_job.key], {j.key: done[j.key] for j in ssfr_jobs}, [second[j.key] for j in usab], second[top1.key])


def _size_figure(ctx: RunContext, ssfr: dict) -> str:
    """Item 3 / Fig. 3a: the smallest usable MLP (>= 99% fact-adaptive accuracy) against F, per kind, beside the
    F log F optimum (a kind whose search found no size at some F has no point there)."""
    series: dict[str, list] = {}
    for r in ssfr.values():
        series.setdefault(r["kind"], []).append((r["n_facts"], r["min_params"]))
    size_vs_facts(
        ctx.out_dir / "ssfr_size_vs_facts.png",
        series,
        "parameters, smallest MLP with >= 99% fact-adaptive acc.",
        "SSFR: usable MLP size against F (Fig. 3a style, d = 128)",
    )
    return "ssfr_size_vs_facts.png"


@experiment(
    "fact-recall",
    "fact MLPs inside transformers: SSFR recall, MLP swapping, editing vs ROME/MEMIT/AlphaEdit",
    options=OPTIONS,
)
def run(ctx: RunContext) -> ExperimentResult:
    # every training run goes through run_jobs, which runs it on one intra-op thread whatever --jobs is
    res = ExperimentResult()
    # checked before any training: the usability jobs start hours into a full run
    paper_usability = _paper_usability(ctx)
    stats: dict = {}
    runs = ctx.out_dir / "runs"
    lm_job = _lm_job(ctx)
    lm, ssfr, pts, top1 = _run_plan(ctx, lm_job, runs, stats)
    for r in ssfr.values():
        _log(
            ctx,
            f"SSFR {r['kind']} F={r['n_facts']}: min size {r['min_size']} (largest failing "
            f"{r.get('max_failing_size')}) params {r['min_params']} "
            f"best acc {r['best_fact_adaptive_accuracy']:.4f}",
        )
    _ssfr_claims(res, ssfr, ctx.quick)
    res.figures.append(_size_figure(ctx, ssfr))
    if pts is not None:
        _usability_claims(res, best_trainings(pts), PAPER_TRAININGS_PER_POINT if paper_usability else 1)
    _log(ctx, f"LM swap: {lm['swap']}")
    _lm_claims(res, lm, ctx.quick, top1)
    res.config = {"quick": ctx.quick, "options": ctx.options, "lm": lm_job.kwargs, "ssfr_jobs": sorted(ssfr)}
    res.notes.append(reuse_note("fact-recall", stats))
    res.notes.append(
        "Readings (ours): SSFR predictions are decoded among the value tokens (eq. 1); the read-out has a "
        "learnable temperature; names and titles are single tokens from a seeded generator; editing "
        "keys' second moment C is taken over the preserved facts' sequences; ROME targets are computed "
        "once on the unedited model; targets v* per fact as ROME's compute_v / MEMIT's compute_z (train_steps s = "
        "s - 1 updates, early stopping per fact, only where the grid names it: ROME); the facts in neither edit "
        "split keep their authors unscored; score = harmonic mean (the text; Fig. 4's caption says geometric)."
    )
    return res
