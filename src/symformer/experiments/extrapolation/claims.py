"""The metrics and claims of experiment `extrapolation`: bpc by context per part, and whether the longest context
beats the training context (paired by seed)."""

from __future__ import annotations

import math

from symformer.experiments.extrapolation.plan import PAPER_SETTING, ExtrapolationConfig
from symformer.results import Claim, verdict


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return m, se


def summarize(runs: dict[str, list[dict]], contexts: tuple[int, ...]) -> tuple[dict, dict]:
    """(extrapolation_bpc, extrapolation_ratio_512): per part and length the mean bpc over seeds and its standard
    error ({"mean": None, "se": None, "na": reason} where the part cannot go); per part the mean over seeds of
    bpc(512) / bpc(train context) (None where 512 is N/A or not evaluated)."""
    table, ratio = {}, {}
    base = str(min(contexts))
    for part, rs in runs.items():
        row = {}
        for c in map(str, contexts):
            vals = [r["bpc"][c] for r in rs]
            if any(v is None for v in vals):
                row[c] = {"mean": None, "se": None, "na": next(r["na"][c] for r in rs if c in r["na"])}
            else:
                m, se = _mean_se(vals)
                row[c] = {"mean": m, "se": se}
        table[part] = row
        ok = "512" in row and row["512"]["mean"] is not None
        ratio[part] = _mean_se([r["bpc"]["512"] / r["bpc"][base] for r in rs])[0] if ok else None
    return table, ratio


def claims(runs: dict[str, list[dict]], cfg: ExtrapolationConfig) -> list[Claim]:
    """One row per part: is bpc at the longest context lower than at the training context? Paired by seed;
    holds / fails when the mean difference is more than 2 standard errors below / above 0."""
    lo, hi = str(cfg.train_context), str(max(cfg.eval_contexts))
    st = (
        f"ours: char LM d={cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, trained at context "
        f"{cfg.train_context} for {cfg.steps} AdamW steps of {cfg.batch}; {len(cfg.seeds)} seed(s); tiny Shakespeare "
        "validation split"
    )
    out = []
    for part, rs in runs.items():
        if any(r["bpc"].get(hi) is None or r["bpc"].get(lo) is None for r in rs):
            reason = next((r["na"][hi] for r in rs if hi in r["na"]), f"context {hi} or {lo} not evaluated")
            meas, ok = f"N/A: {reason}", None
        else:
            diffs = [r["bpc"][hi] - r["bpc"][lo] for r in rs]
            m, se = _mean_se(diffs)
            ok = None if not math.isfinite(se) else (True if m < -2 * se else False if m > 2 * se else None)
            meas = (
                f"bpc {hi} - bpc {lo} = {m:+.4f} (SE {se:.4f}, {len(diffs)} seed(s)); ratio "
                f"{sum(r['bpc'][hi] / r['bpc'][lo] for r in rs) / len(rs):.3f}"
            )
        out.append(
            Claim(
                f"EXT.{part}",
                f"{part}: bpc at context {hi} is lower than at the training context {lo}",
                "none (our own measurement)",
                meas,
                verdict(ok),
                "paired by seed; inconclusive within 2 SE or with one seed",
                st,
                PAPER_SETTING,
            )
        )
    return out
