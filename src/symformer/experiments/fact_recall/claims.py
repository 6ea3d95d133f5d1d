"""The SSFR and usability claims of experiment `fact-recall` (Sec. 5.1-5.3): each returns its metrics and claims."""

from __future__ import annotations

import math

from symformer.experiments.base import combined
from symformer.experiments.fact_recall.plan import PAPER_SETTING_SSFR
from symformer.experiments.fact_recall.runs import TARGET
from symformer.experiments.fact_recall.search import SIZE_RESOLUTION
from symformer.experiments.facts.methods import METHODS
from symformer.results import Claim, ExperimentResult, verdict


def ssfr_claims(out: dict, quick: bool) -> ExperimentResult:
    res = ExperimentResult()
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
        + ("sizes by doubling" if quick else f"doubling then bisection to 1/{SIZE_RESOLUTION} of the size")
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
            verdict(True if best >= TARGET else (False if paper_budget else None)),
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
        if METHODS[r["kind"]].constructed
        for p in r.get("points", [])
        if p.get("trained")
    ]
    trail = "; ".join(
        f"{p['kind']} F={p['n_facts']} m={p['size']} h~={p['h_tilde']}: Lipschitz {p['lipschitz']:.3g}, "
        f"accuracy {p['fact_adaptive_accuracy']:.4f}"
        for p in res.metrics["ssfr_constructed_points"]
    )
    cons = {
        f"{r['kind']}/F={r['n_facts']}": r["best_fact_adaptive_accuracy"]
        for r in out.values()
        if METHODS[r["kind"]].constructed
    }
    reached = bool(cons) and max(cons.values()) >= TARGET
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
    res = combined(res, _scaling_claim(out, setting, paper_budget))
    return res


def diverged_trainings(out: dict) -> list[dict]:
    """Trained SSFR points whose final training loss is above ln F, the cross-entropy of a uniform guess among
    the F values (the loss is decoded among the values: facts.lm.recall.value_logits). There the training did
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


def _scaling_claim(out: dict, setting: str, paper_budget: bool = False) -> ExperimentResult:
    """S5.1-scaling: log-log slope of the minimum parameters against F log F per kind (>= 3 F values). Sizes
    measured with our shorter SSFR training budget are not the minima: training longer shrinks them, by 10x at
    F = 1024 for bin+gd (docs/fact_recall_protocol.md, "The same budget effect at F = 1024"), and by how much at
    each F is unknown, so their slope neither refutes nor supports the claim: holds / fails only under the
    paper's budget, inconclusive otherwise (the slopes are reported either way)."""
    res = ExperimentResult()
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
    return res


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


def usability_claims(pts: list[dict], trainings: int = 1) -> ExperimentResult:
    res = ExperimentResult()
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
    return res
