"""Paired (same seed) comparisons of two arms of experiment `teleport`, and the two-standard-error verdict."""

from __future__ import annotations

import math
import statistics


def paired(base: list[dict], tele: list[dict], key: str = "test_acc") -> tuple[float, float, int]:
    """Mean and standard error of the same-seed differences tele - base (in points), and their number."""
    diffs = [100 * (t[key] - b[key]) for b, t in zip(base, tele, strict=False)]
    if not diffs:
        return float("nan"), float("nan"), 0
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return statistics.fmean(diffs), se, len(diffs)


def two_se_verdict(mean: float, se: float, n: int) -> bool | None:
    """holds / fails when the mean paired difference is more than 2 standard errors above / below 0."""
    if n < 3 or math.isnan(se):
        return None
    return True if mean - 2 * se > 0 else (False if mean + 2 * se < 0 else None)


def paired_speedup(m: dict, a: str, b: str) -> tuple[float, float, int]:
    """Mean and standard error of the same-seed speed-up differences b - a (points of %), over the seeds where
    both arms reached their baselines' final accuracy, and their number."""
    pairs = [
        (x, y)
        for x, y in zip(m["speedup_pct_per_seed"][a], m["speedup_pct_per_seed"][b], strict=False)
        if x is not None and y is not None
    ]
    diffs = [y - x for x, y in pairs]
    if not diffs:
        return float("nan"), float("nan"), 0
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return statistics.fmean(diffs), se, len(diffs)
