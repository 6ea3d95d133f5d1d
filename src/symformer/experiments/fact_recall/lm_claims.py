"""The LM claims of experiment `fact-recall` (Sec. 5.4, Fig. 4, App. A.3): the MLP swap check and editing."""

from __future__ import annotations

from symformer.experiments.fact_recall.runs import TARGET
from symformer.results import Claim, ExperimentResult, verdict

QUICK_MISS = "; a miss is 'fails' only in full mode (quick: 128 facts, reduced grid -> inconclusive)"


def _miss_verdict(ok: bool, quick: bool) -> str:
    """A quick run is far from the paper's setting: it can confirm a claim but not refute it."""
    return verdict(True if ok else (None if quick else False))


# App. A.3.4 / Fig. 4: 327, 819 and 1638 of 2^14 facts altered; 0.2 is issue 14's second split (not in the
# paper; with preserved = 4 x altered it uses every fact)
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
    return sw["new_fact_accuracy"] > TARGET and sw["nonfact_ce_change_pct"] <= 5.0


def _swap_refutes(sw: dict) -> bool:
    """A reading refutes the claim only inside its scope: the LM uses the swapped MLP (new-fact accuracy > 99%,
    the usable transformers of Fig. 9a on which Fig. 9b measures the CE change) and the CE change misses. An LM
    that keeps its facts elsewhere (e.g. top-1 routing that rarely picks the fact expert) does not test it."""
    return sw["new_fact_accuracy"] > TARGET and sw["nonfact_ce_change_pct"] > 5.0


def lm_claims(lm: dict, quick: bool, top1: dict | None = None) -> ExperimentResult:
    """S5.4-swap from the soft-router LM and, when run, the top-1 one: the router is not in the paper, so the
    claim holds if either reading meets it and fails only if both were measured and both refute it
    (`_swap_refutes`; full mode)."""
    res = ExperimentResult()
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
    return res


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
