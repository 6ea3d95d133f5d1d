"""The forecasting verdicts of experiment `plash`: horizon averages with their standard errors, the relative
difference to softmax by the delta method, and a band verdict that carries the seed error."""

from __future__ import annotations

import math

from symformer.experiments.plash.plan import PAPER_FORECAST, ForecastPlan, method_kwargs
from symformer.results import Claim, verdict


def horizon_average(per_h: dict) -> dict:
    """{"mean", "se"} of the average over horizons of per-horizon {"mean", "se"} (seeds independent across
    horizons, so the standard errors add in quadrature)."""
    n = len(per_h)
    return {
        "mean": sum(v["mean"] for v in per_h.values()) / n,
        "se": math.sqrt(sum(v["se"] ** 2 for v in per_h.values())) / n,
    }


def relative_difference(a: dict, b: dict) -> tuple[float, float]:
    """a/b - 1 and its standard error by the delta method (a and b independent)."""
    r = a["mean"] / b["mean"]
    return r - 1, abs(r) * math.sqrt((a["se"] / a["mean"]) ** 2 + (b["se"] / b["mean"]) ** 2)


def band_verdict(rel: float, se: float, bound: float) -> str:
    """holds when rel + 2 se <= bound, fails when rel - 2 se > bound, else inconclusive (se = 0: a point test)."""
    return verdict(True if rel + 2 * se <= bound else False if rel - 2 * se > bound else None)


def plus_minus(x: dict) -> str:
    return f"{x['mean']:.4f}" + (f" ± {x['se']:.4f}" if x["se"] > 0 else "")


def pct(rel: float, se: float) -> str:
    return f"{100 * rel:+.1f}" + (f" ± {100 * se:.1f}%" if se > 0 else "%")


def _setting(plan: ForecastPlan, quick: bool) -> str:
    sz, pk = plan.size, method_kwargs("plash", quick)
    return (
        f"ours: Informer {sz['d_model']} / {sz['n_heads']} heads / {sz['e_layers']}+{sz['d_layers']} layers / "
        f"d_ff {sz['d_ff']}, horizons {list(plan.horizons)}, seeds {list(plan.seeds)}, <= {plan.epochs} epochs, "
        f"patience {plan.patience}, full test set, PLASH M={pk['M']} D_k={pk['D_k']}"
        + (
            f"; quick: {plan.train_windows} random training windows, {plan.val_windows} validation windows"
            if plan.train_windows
            else ""
        )
    )


def forecast_claims(avg: dict, ratios: dict, plan: ForecastPlan, quick: bool) -> list[Claim]:
    """T1-etth1 (PLASH within 5% of softmax) and T1-favor (FAVOR+ at or below softmax), from the horizon averages
    `avg` {method: {"mean", "se"}} and the per-horizon MSE ratios PLASH / softmax."""
    setting, pk = _setting(plan, quick), method_kwargs("plash", quick)
    rule = (
        "1 seed: a point comparison, no error bar"
        if len(plan.seeds) == 1
        else "holds if the relative difference + 2 SE is within the bound, fails if - 2 SE is beyond it, else "
        "inconclusive (SE over seeds per horizon, combined over horizons, delta method for the ratio)"
    )
    rel, se = relative_difference(avg["plash"], avg["softmax"])
    claims = [
        Claim(
            "T1-etth1",
            f"PLASH (M={pk['M']}, D_k={pk['D_k']}) test MSE within 5% of Informer's vanilla attention, "
            "averaged over horizons",
            "Table 1: Vanilla 0.5553, PLASH(64,128) 0.5747 (+3.5%), best 0.4553",
            f"softmax {plus_minus(avg['softmax'])}, plash {plus_minus(avg['plash'])} ({pct(rel, se)}); per "
            "horizon plash/softmax: " + ", ".join(f"{k}: {v:.3f}" for k, v in ratios.items()),
            band_verdict(rel, se, 0.05),
            rule,
            setting,
            PAPER_FORECAST,
        )
    ]
    if "favor" in avg:
        relf, sef = relative_difference(avg["favor"], avg["softmax"])
        claims.append(
            Claim(
                "T1-favor",
                "Performer (FAVOR+) test MSE at or below vanilla attention, averaged over horizons",
                "Table 1: Vanilla 0.5553, Performer 0.5065 (-8.8%)",
                f"softmax {plus_minus(avg['softmax'])}, favor {plus_minus(avg['favor'])} ({pct(relf, sef)})",
                band_verdict(relf, sef, 0.0),
                rule + "; FAVOR+ takes no attention dropout (no attention matrix), its features are drawn per layer",
                setting,
                PAPER_FORECAST,
            )
        )
    return claims
