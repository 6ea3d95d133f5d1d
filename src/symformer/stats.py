"""Small statistics shared by experiments and benchmarks: power-law fits, R^2, means and standard errors.

Everything takes plain Python lists and returns Python floats (or None / NaN where the statistic is
undefined), so results stay JSON-serialisable.
"""

from __future__ import annotations

import math
import statistics

import torch


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x: the exponent k of y ~ c x^k (e.g. time against N, error
    against the number of features m)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    num = sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True))
    den = sum((x - mx) ** 2 for x in lx)
    return num / den


def r2(x: list[float], y: list[float]) -> float | None:
    """R^2 of the least-squares line y = a x + b (None with < 3 points or no spread)."""
    if len(x) < 3:
        return None
    X = torch.tensor(x, dtype=torch.float64)
    Y = torch.tensor(y, dtype=torch.float64)
    A = torch.stack([X, torch.ones_like(X)], 1)
    coef = torch.linalg.lstsq(A, Y[:, None]).solution
    res = Y - (A @ coef).squeeze(1)
    tot = ((Y - Y.mean()) ** 2).sum()
    return float(1 - (res**2).sum() / tot) if tot > 0 else None


def loglog(x: list[float], y: list[float]) -> tuple[float | None, float | None]:
    """(R^2, slope) of log y against log x ((None, None) with < 3 points)."""
    if len(x) < 3:
        return None, None
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    X = torch.tensor(lx, dtype=torch.float64)
    Y = torch.tensor(ly, dtype=torch.float64)
    slope = float(((X - X.mean()) * (Y - Y.mean())).sum() / ((X - X.mean()) ** 2).sum())
    return r2(lx, ly), slope


def mean_se(xs: list[float]) -> dict:
    """{"mean", "se", "n"} over seeds (se = sample std / sqrt(n); 0 for a single run)."""
    n = len(xs)
    m = sum(xs) / n
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else 0.0
    return {"mean": m, "se": se, "n": n}


def mean_std(xs: list[float]) -> tuple[float, float]:
    """(mean, sample std) over the non-NaN values (std 0 for one value; NaN, NaN for none)."""
    ok = [x for x in xs if not math.isnan(x)]
    if not ok:
        return float("nan"), float("nan")
    return statistics.fmean(ok), (statistics.stdev(ok) if len(ok) > 1 else 0.0)


__all__ = ["fit_exponent", "r2", "loglog", "mean_se", "mean_std"]
