"""Experiment `facts`, part (d): the whitening gain, raw against whitened Bin+JL cost, per (d, kappa) and in Fig. 2a's
pooled form on (c)'s fact sets (fact-storing-mlps.txt, Fig. 2a). Split from laws.py."""

from __future__ import annotations

from symformer.results import Claim, ExperimentResult, verdict


# ---------------------------------------------------------------- (d) whitening gain per (d, kappa)
def claims_whiten(rows: list[dict], quick: bool) -> ExperimentResult:
    gain, bound, unsolved = {}, {}, []
    for r in rows:
        key = f"d={r['d']},kappa={r['kappa']:g}"
        if not r["params_raw"] and not r["params_raw_lower_bound"]:
            # every raw build raised (a gadget system not solvable at Alg. 3's h~ = ceil(|K|/d), which no
            # decoder width m changes), so these points give no cost at all: listed, never dropped silently
            unsolved.append(key)
        elif r["params_whitened"] and r["params_raw_lower_bound"]:
            g = r["params_raw_lower_bound"] / r["params_whitened"]
            (gain if r["params_raw"] else bound)[key] = round(g, 3)
    vals = list(gain.values()) + list(bound.values())
    gmax = max(vals) if vals else None
    metrics = {
        "whitening_gain_max": gmax,
        "whitening_gain": gain,
        "whitening_gain_lower_bounds": bound,
        "whitening_gain_no_bound": unsolved,
    }
    dims, kap = sorted({r["d"] for r in rows}), sorted({r["kappa"] for r in rows})
    rule = (
        "4d"
        if all(r["F"] == 4 * r["d"] for r in rows)
        else "d^2/4"
        if all(4 * r["F"] == r["d"] ** 2 for r in rows)
        else str(sorted({(r["d"], r["F"]) for r in rows}))
    )
    claims = [
        Claim(
            "d/Fig2a",
            "embedding whitening cuts the constructed cost by up to 32x",
            "up to 32x",
            "n/a"
            if gmax is None
            else f"max {gmax:.3g}x{' (a lower bound)' if bound and gmax == max(bound.values()) else ''}",
            verdict(None if gmax is None else gmax >= 16.0),
            f"gain = raw / whitened Bin+JL parameters per (d, kappa): {gain}; lower bounds (raw fails at every "
            f"m <= 4096): {bound}; no bound (every raw build was an unsolvable gadget system): "
            f"{unsolved or 'none'}; holds if the max reaches >= 16x",
            f"ours: d in {dims}, F = {rule}, kappa in {kap}, 1 seed per (d, kappa)"
            f"{' (quick)' if quick else ''}; Bin+JL only; the paper-form "
            "gain at Fig. 2a's fixed F is row d/Fig2a-pooled",
            "Fig. 2a: d up to 256, F up to 16k, kappa up to ~1e4",
        )
    ]
    return ExperimentResult(metrics=metrics, claims=claims)


def claims_whiten_pooled(rows: list[dict], d: int, F: int, n_seeds: int) -> ExperimentResult:
    """The whitening gain as Fig. 2a shows it: at its fixed F, raw against whitened Bin+JL cost of the same
    fact sets, per kappa of (c)'s sweep (the points the rho law pools). A raw search that stores nothing up to
    its cap gives a lower bound. The GD gain on the same points is a metric only (the claim is constructed)."""
    by = {(r["family"], r["kappa"]): r for r in rows if r["family"] in ("raw", "whitened")}
    out: dict[str, dict] = {"bin+jl": {}, "gd-swiglu": {}}
    bound: set[float] = set()
    unsolved: set[float] = set()  # raw Bin+JL raised at every m: no cost, no bound (see claims_whiten)
    for (fam, k), raw in sorted(by.items()):
        wh = by.get(("whitened", k))
        if fam != "raw" or wh is None:
            continue
        for m in out:
            lb = raw.get(f"{m}_lower_bound", raw[m])
            if m == "bin+jl" and not lb:
                unsolved.add(k)
            elif wh[m] and lb:
                out[m][k] = round(lb / wh[m], 3)
                if m == "bin+jl" and not raw[m]:
                    bound.add(k)
    g = out["bin+jl"]
    gmax = max(g.values()) if g else None
    metrics = {
        "whitening_gain_fig2a": g,
        "whitening_gain_fig2a_max": gmax,
        "whitening_gain_fig2a_gd": out["gd-swiglu"],
        "whitening_gain_fig2a_lower_bounds": sorted(bound),
        "whitening_gain_fig2a_no_bound": sorted(unsolved),
    }
    lb = gmax is not None and any(g[k] == gmax for k in bound)
    claims = [
        Claim(
            "d/Fig2a-pooled",
            "embedding whitening cuts the constructed cost by up to 32x (at Fig. 2a's fixed F, paper's form)",
            "up to 32x",
            "n/a" if gmax is None else f"max {gmax:.3g}x{' (a lower bound)' if lb else ''}",
            verdict(None if gmax is None else gmax >= 16.0),
            f"gain = raw / whitened Bin+JL parameters on the same fact sets, per kappa: {g} (lower bounds where raw "
            f"stores nothing up to its cap: kappa in {sorted(bound)}; no bound, every raw build an unsolvable "
            f"gadget system: kappa in {sorted(unsolved)}); GD on "
            f"the same points: {out['gd-swiglu']}; holds "
            "if the max reaches >= 16x",
            f"ours: d={d}, F={F}{' (= d^2/4)' if 4 * F == d * d else ''}, the kappa sweep "
            f"of (c), {n_seeds} seed(s) (minimum over seeds)",
            "Fig. 2a: fixed F, raw + whitened points, kappa up to ~1e4",
        )
    ]
    return ExperimentResult(metrics=metrics, claims=claims)
