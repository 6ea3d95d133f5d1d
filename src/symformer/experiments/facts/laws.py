"""Experiment `facts`, parts (c)-(f): helpers and claim rows (each point is a job of runs.py). The
rho-size law as fact-storing-mlps.txt states it (Sec. 4.1, 4.4, Fig. 2a: cost scales inversely with rho, raw
and whitened points pooled), coherence separated from rho,
the whitening gain per (d, kappa), the margin-optimal NTK gain across kappa (Fig. 5), and the decodability
solver against cvxpy / the hull LP (issue #11).

Regressor change (issue #11): the earlier report fitted size against rho^-2 F log F, which is the BOUND of
Construction B.6.1, not the paper's claim. The claim is a power law in rho at fixed F; we fit
log(params) = a + b log(rho) and report R^2 and the exponent b. The bound fit stays as its own row.
"""

from __future__ import annotations

import math

import torch

from symformer._rng import seeded_generator
from symformer.facts.capacity import BuildOptions, method_capacity
from symformer.facts.embeddings import FactSet, whitening_matrix
from symformer.results import Claim, ExperimentResult, verdict
from symformer.stats import loglog, r2

# gd-swiglu starts at hi = 8: a GD evaluation costs ~ h, and the search doubles hi where 8 does not store
BRACKET = {"bin+jl": (2, 64), "gd-swiglu": (2, 8), "ntk": (64, 2048), "ntk-mo": (64, 2048)}


def options(quick: bool, **kw) -> BuildOptions:
    # quick: GD MLPs get lr 1e-2 and 2000 epochs instead of 1e-3 and 20k (App. A.1.3); GD codecs 300 steps
    # full: the GD decoder runs all its 1000 steps as the appendix does (quick keeps the early stop once every
    # value decodes)
    base = (
        dict(train_epochs=2000, train_lr=1e-2, decoder_steps=300, encoder_steps=300)
        if quick
        else dict(decoder_early_stop=False)
    )
    return BuildOptions(**{**base, **kw})


def whitened(fs: FactSet) -> FactSet:
    """Fully whitened keys and values (W_1, App. A.1.3): the 'whitened' points of Fig. 2a."""
    K, V = fs.keys.double(), fs.values.double()
    return FactSet(K @ whitening_matrix(K, 1.0), V @ whitening_matrix(V, 1.0), fs.facts)


def offset(fs: FactSet, t: float, seed: int) -> FactSet:
    """All keys and values shifted by t * c (|c| = mean row norm): rho is unchanged (it depends on differences
    only), coherence rises towards 1 with t. A coherence-only family (issue #11 item 3)."""
    g = seeded_generator(seed)
    c = torch.randn(fs.values.shape[1], generator=g, dtype=torch.float64)
    c = c / c.norm() * fs.values.double().norm(dim=1).mean()
    return FactSet(fs.keys.double() + t * c, fs.values.double() + t * c, fs.facts)


def claims_rho_size(rows: list[dict], d: int, F: int, n_seeds: int) -> ExperimentResult:
    """Metrics and claim rows for (c): the log-log slope (the paper's claim), the B.6.1 bound, coherence."""
    metrics: dict = {}
    setting = (
        f"ours: d={d}, F={F}, kappa in {sorted({r['kappa'] for r in rows})} (the paper's grid is not in its "
        f"text), raw + whitened (W_1 of the second moment, App. A.1.3) pooled, {n_seeds} seed(s) per point"
    )
    paper_setting = "Fig. 2a: d up to 256, F up to 16k, raw + whitened embeddings pooled, several seeds"
    claims = []
    pts = [r for r in rows if r["family"] != "offset"]
    for method, key in (("bin+jl", "constructed"), ("gd-swiglu", "gd")):
        ok = [r for r in pts if r[method] and r["rho"] > 0]
        r2_ll, slope = loglog([r["rho"] for r in ok], [r[method] for r in ok])
        metrics[f"rho_size_loglog_r2_{key}"], metrics[f"rho_size_exponent_{key}"] = r2_ll, slope
        # "cost scales inversely with rho" (Sec. 3.1) read literally: params linear in 1/rho
        inv = r2([1 / r["rho"] for r in ok], [r[method] for r in ok])
        metrics[f"rho_size_inv_r2_{key}"] = inv
        bound = r2([r["rho"] ** -2 * F * math.log(F) for r in ok], [r[method] for r in ok])
        metrics[f"rho_size_r2_{key}"] = bound
        claims.append(
            Claim(
                f"c/Fig2a-{key}",
                f"{key} MLP size scales inversely with rho at fixed F (log-log fit)",
                "R^2 > 0.97, size ~ rho^-b",
                "n/a" if r2_ll is None else f"R^2 = {r2_ll:.3f}, exponent b = {-slope:.2f}",
                verdict(None if r2_ll is None else r2_ll > 0.97),
                f"{len(ok)} points (log params against log rho); holds if R^2 > 0.97; the same "
                f"points fitted linearly on 1/rho (the other reading of Sec. 3.1's 'inversely'): R^2 = {_f(inv)}",
                setting,
                paper_setting,
            )
        )
        if key == "constructed":
            # a bound size = O(rho^-2 F log F): at fixed F its rho-dependence must not be steeper than rho^-2
            claims.append(
                Claim(
                    "c/B.6.1-bound",
                    "ours: constructed MLP size is O(rho^-2 F log F) (the bound of Construction B.6.1, "
                    "not the paper's fitted law)",
                    "a bound: size grows no faster than rho^-2 at fixed F",
                    "n/a"
                    if bound is None
                    else f"linear fit on rho^-2 F log F: R^2 = {bound:.3f}; exponent b = {-slope:.2f}",
                    verdict(None if slope is None else -slope <= 2.0),
                    "holds if the log-log exponent b <= 2; the R^2 of the linear fit (the old regressor) is shown for "
                    "reference only. Sec. 4.4 says the cost scales 'at a rate "
                    "matching the prediction from Construction "
                    "B.6.1', i.e. reads b = 2 as the rate; this row tests it as a bound",
                    f"ours (our fit): {setting[6:]}",
                    "Construction B.6.1 (bound, any d, F); Sec. 4.4",
                )
            )
    return ExperimentResult(metrics=metrics, claims=claims)


def claims_coherence(rows: list[dict], setting: str) -> ExperimentResult:
    """Coherence against rho as predictors of size on the same points, the offset family included."""
    metrics: dict = {}
    claims, ev = [], []
    pts = [r for r in rows if r["family"] != "offset"]
    for method, key in (("bin+jl", "constructed"), ("gd-swiglu", "gd")):
        ok = [r for r in pts if r[method]]
        metrics[f"coherence_size_r2_{key}"] = r2([r["coherence"] for r in ok], [r[method] for r in ok])
        dec = [r for r in rows if r[method] and r["rho"] > 0]
        c2, _ = loglog([r["coherence"] for r in dec], [r[method] for r in dec])
        p2, _ = loglog([r["rho"] for r in dec], [r[method] for r in dec])
        metrics[f"coherence_size_r2_decoupled_{key}"] = c2
        metrics[f"rho_size_loglog_r2_decoupled_{key}"] = p2
        ev.append((key, c2, p2, len(dec)))
    ok = None if any(c is None or p is None for _, c, p, _ in ev) else all(c < p for _, c, p, _ in ev)
    claims.append(
        Claim(
            "c/Fig6",
            "coherence predicts size worse than rho",
            "R^2 0.10 (GD) / 0.44 (constructed) vs 0.97",
            "; ".join(f"{k}: R^2 coherence {_f(c)} vs rho {_f(p)}" for k, c, p, _ in ev),
            verdict(ok),
            "log-log fits on the same points: the kappa sweep (raw + whitened) plus a coherence-only family "
            "(a common offset t*c added to every key and value: rho unchanged, coherence up); points per fit "
            f"{[n for *_, n in ev]}; holds if coherence's R^2 is below rho's for both",
            setting,
            "Fig. 6: kappa sweep, d up to 256",
        )
    )
    return ExperimentResult(metrics=metrics, claims=claims)


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


# ---------------------------------------------------------------- (e) margin-optimal NTK across kappa
# The capacity search doubles h from the bracket up to this cap. Measured at d=16, F=64 (quick), NTK accuracy
# stops growing with h well before it: kappa 10 raw 0.22 -> 0.25 and U* 0.34 -> 0.34 from h = 2^14 to 2^18,
# kappa 30 and 100 about 0.02 throughout, while kappa 1 and 3 store every fact from h ~ 4k. A kappa where no
# h <= cap stores every fact is the breakdown of Fig. 5 ("still breaks down once the condition number exceeds
# a moderate threshold"); the row then says so and gives the best accuracy reached, never a bare None.
NTK_H_CAP = 1 << 17


def ntk_search(fs: FactSet, info, method: str, quick: bool) -> dict:
    """Smallest h (<= NTK_H_CAP) storing every fact, with its parameters, or the reason there is none."""
    r = method_capacity(method, [fs], *BRACKET[method], max_size=NTK_H_CAP, options=options(quick), infos=[info])
    out = {"h": r.size, "params": r.params}
    if r.params is None:
        h_best, (acc, params) = max(r.evaluations.items(), key=lambda kv: (kv[1][0], kv[0]))
        h_max = max(r.evaluations)
        out.update(
            {
                "params_at_cap": r.evaluations[h_max][1],
                "best_accuracy": acc,
                "best_h": h_best,
                "reason": f"no h <= {NTK_H_CAP} stores every fact (best accuracy {acc:.3f} at h={h_best})",
            }
        )
    return out


def claims_ntk(rows: list[dict], d: int, F: int) -> ExperimentResult:
    gains = {r["kappa"]: r["gain"] for r in rows}
    got = [(r["gain"], r["gain_kind"]) for r in rows if r["gain"]]
    gmax, kind = max(got) if got else (None, "none")
    metrics = {
        "ntk_mo_gain": gains,
        "ntk_mo_gain_max": gmax,
        "ntk_mo_gain_kind": {r["kappa"]: r["gain_kind"] for r in rows},
        "ntk_mo_breakdown": {r["kappa"]: r["reason"] for r in rows if r["reason"]},
    }
    per = "; ".join(
        f"kappa={r['kappa']:g}: "
        + (f"{r['gain']:.3g}x" + (" (lower bound)" if r["gain_kind"] == "lower bound" else "") if r["gain"] else "none")
        for r in rows
    )
    broke = "; ".join(f"kappa={r['kappa']:g}: {r['reason']}" for r in rows if r["reason"])
    claims = [
        Claim(
            "A.1.4/Fig5-kappa",
            "margin-optimal targets U* improve NTK MLPs 2-4x (across a kappa sweep)",
            "2-4x",
            "n/a" if gmax is None else f"max {gmax:.3g}x{' (a lower bound)' if kind == 'lower bound' else ''}; {per}",
            verdict(None if gmax is None else gmax >= 2.0),
            "gain = NTK(V) / NTK(U*) parameters at the smallest hidden size storing every fact (h searched by "
            f"doubling up to {NTK_H_CAP}); holds if the max >= 2. Where no h <= {NTK_H_CAP} stores every fact the "
            "construction has broken down (its accuracy no longer grows with h; Fig. 5 sees the same beyond a "
            f"moderate condition number): {broke or 'none'}",
            f"ours: d={d}, F={F}{' (= d^2/4)' if F * 4 == d * d else ''}, tied sphere embeddings, kappa in "
            f"{sorted(gains)}, 1 seed, Swish gate, "
            "Hermite degree 2",
            "Fig. 5: kappa sweep, d up to 256, F = d^2/4 by default (App. A.1.1)",
        )
    ]
    return ExperimentResult(metrics=metrics, claims=claims)
