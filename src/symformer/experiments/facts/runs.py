"""Experiment `facts`: each point of parts (a)-(f) as a module-level function of plain arguments.

`facts.run` makes every point a `Job`, so `run_jobs` records it (OUT/facts/runs/<key>.json), runs the points
in `--jobs` processes and reuses them on `--resume`. The full protocol (d up to 128, F up to 4096, GD MLPs
trained up to 20k epochs, App. A.1.3) takes many core-hours; a killed run loses only the points in flight.
Each point draws its data from its own seeds (make_fact_set) and every builder seeds its own random part;
each point also seeds the global stream first, so that anything drawing from it draws the same in any process
and order: a point's result depends neither on the order of the points nor on which process runs it.
"""

from __future__ import annotations

import time

import torch

from symformer._rng import seed_torch
from symformer.experiments.facts import laws as facts_laws
from symformer.experiments.facts.methods import METHODS
from symformer.facts.capacity import build_fact_mlp, method_capacity
from symformer.facts.decodability import decodability
from symformer.facts.embeddings import coherence, make_fact_set, random_fact_map, sample_embeddings
from symformer.facts.encoders import two_hot_keys
from symformer.facts.reference import solver_check
from symformer.runner.jobs import JobFunction

# search brackets (lo, hi) of each method's knob in (b), per d (doubling past hi when needed)
BRACKET = {
    "bin+jl": (2, 64),
    "bin+gd": (2, 16),
    "gd+gd": (2, 16),
    "ntk": (64, 2048),
    "ntk-mo": (64, 2048),
    "gd-swiglu": (2, 64),
    "gd-relu": (2, 64),
}
# (a): every construction at a generous decoder width: (a) checks that they store, (b) finds the minimum
CONSTRUCTIONS = tuple(
    METHODS[m] for m in ("bin+jl", "bin-bias+jl", "bin+jl-sign", "cd+jl", "lagrangian+jl", "bin+gd", "gd+gd", "naive")
)


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, round(time.perf_counter() - t, 2)


# ---------------------------------------------------------------- (a)
def construction_point(d: int, quick: bool, seed: int) -> dict:
    """(a) accuracy and parameters of every construction at d, F = d^2/4 (Thm 4.3.1). Decoder width m = 2d
    for the JL methods, m = d/4 for the GD decoders; naive has hidden |K|."""
    seed_torch(seed)  # see the module docstring
    fs = make_fact_set(d * d // 4, d, seed=seed)
    info = decodability(fs.values)
    out = {}
    for method in CONSTRUCTIONS:
        kw = {} if method.decoder is None else {"m": d // 4 if method.decoder == "gd" else 2 * d}
        mlp, sec = _timed(
            build_fact_mlp,
            fs.keys,
            fs.values,
            fs.facts,
            method.name,
            strict=False,
            info=info,
            options=facts_laws.options(quick),
            **kw,
        )
        out[method.name] = {"accuracy": mlp.accuracy, "params": mlp.n_params(), "seconds": sec}
    return out


def two_hot_point(d: int, seed: int) -> dict:
    """(a) two-hot keys (Construction 4.1 gated / B.1 non-gated) have their own key set: |K| = d (d - 1)."""
    seed_torch(seed)  # see the module docstring
    K = two_hot_keys(d)
    V = sample_embeddings(K.shape[0], d, seed=seed + 1)
    f = random_fact_map(K.shape[0], seed=seed + 2)
    info = decodability(V)
    out = {}
    for method in ("two-hot+jl", "two-hot-gated+jl"):
        mlp = build_fact_mlp(K, V, f, method, m=8 * d, strict=False, info=info)
        out[method] = {"accuracy": mlp.accuracy, "params": mlp.n_params()}
    return out


# ---------------------------------------------------------------- (b)
def scaling_point(
    d: int, F: int, method: str, n_seeds: int, quick: bool, seed: int, work_dir: str | None = None
) -> dict:
    """(b) the smallest size of `method` that stores every fact of each of n_seeds fact sets (Fig. 2b/2c).
    With `work_dir` the search's evaluations and GD trainings resume from there after a kill."""
    seed_torch(seed)  # see the module docstring
    fss = [make_fact_set(F, d, seed=seed + 100 * s) for s in range(n_seeds)]
    infos = [decodability(fs.values) for fs in fss]
    lo, hi = BRACKET[method]
    r, sec = _timed(
        method_capacity,
        method,
        fss,
        lo,
        hi,
        max_size=64 * hi,
        options=facts_laws.options(quick),
        infos=infos,
        work_dir=work_dir,
    )
    return {
        "d": d,
        "F": F,
        "method": method,
        "size": r.size,
        "params": r.params,
        "bits_per_param": r.bits_per_param,
        "info_bits": r.info_bits,
        "seconds": sec,
    }


# ---------------------------------------------------------------- (c)
def rho_size_point(
    d: int,
    F: int,
    kappa: float,
    family: str,
    n_seeds: int,
    quick: bool,
    seed: int,
    shift: float | None = None,
    work_dir: str | None = None,
) -> dict:
    """(c) rho, coherence and the Bin+JL and GD sizes on one family of fact sets: "raw", "whitened" (W_1 of
    the raw sets, Fig. 2a) or "offset" (the raw sets shifted by shift * c: rho unchanged, coherence up).
    With `work_dir` the searches resume from there after a kill."""
    seed_torch(seed)  # see the module docstring
    fss = [make_fact_set(F, d, kappa=kappa, seed=seed + 7 + 100 * s) for s in range(n_seeds)]
    if family == "whitened":
        fss = [facts_laws.whitened(fs) for fs in fss]
    elif family == "offset":
        fss = [facts_laws.offset(fs, shift, seed + 11 + s) for s, fs in enumerate(fss)]
    infos = [decodability(fs.values) for fs in fss]
    row = {
        "family": family,
        "kappa": kappa,
        **({"offset": shift} if family == "offset" else {}),
        "rho": min(i.rho for i in infos),
        "coherence": max(coherence(fs.values) for fs in fss),
        "rho_max_gap": max(i.max_gap for i in infos),
    }
    for method in ("bin+jl", "gd-swiglu"):
        lo, hi = facts_laws.BRACKET[method]
        r = method_capacity(
            method, fss, lo, hi, max_size=64 * hi, options=facts_laws.options(quick), infos=infos, work_dir=work_dir
        )
        row[method] = r.params
        # where no size up to the cap stores every fact, the cost is at least the largest size tried (d/Fig2a-pooled)
        row[f"{method}_lower_bound"] = r.params or max((v[1] for v in r.evaluations.values()), default=None)
    return row


# ---------------------------------------------------------------- (d)
def whiten_point(d: int, kappa: float, quick: bool, seed: int, F: int | None = None) -> dict:
    """(d) constructed (Bin+JL) cost on raw and on fully whitened embeddings (Thm B.7.1); F facts (default 4d,
    the quick plan's; the full plan passes the paper's F = d^2/4, App. A.1.1)."""
    seed_torch(seed)  # see the module docstring
    F = 4 * d if F is None else F
    fs = make_fact_set(F, d, kappa=kappa, seed=seed + 7)
    row = {"d": d, "F": F, "kappa": kappa}
    for family, s in (("raw", fs), ("whitened", facts_laws.whitened(fs))):
        info = decodability(s.values)
        r = method_capacity(
            "bin+jl",
            [s],
            *facts_laws.BRACKET["bin+jl"],
            max_size=64 * 64,
            options=facts_laws.options(quick),
            infos=[info],
        )
        row[f"rho_{family}"], row[f"params_{family}"] = info.rho, r.params
        # where the construction stores nothing up to the largest m tried, its cost is at least that
        row[f"params_{family}_lower_bound"] = r.params or max((v[1] for v in r.evaluations.values()), default=None)
    return row


# ---------------------------------------------------------------- (e)
def ntk_point(d: int, F: int, kappa: float, quick: bool, seed: int) -> dict:
    """(e) NTK(V) and NTK(U*) capacity at one kappa (App. A.1.4, Fig. 5) and the gain NTK(V) / NTK(U*) in
    params: exact where both store every fact, a lower bound (V's params at the cap) where only U* does."""
    seed_torch(seed)  # see the module docstring
    fs = make_fact_set(F, d, kappa=kappa, seed=seed + 13)
    info = decodability(fs.values)
    res = {m: facts_laws.ntk_search(fs, info, m, quick) for m in ("ntk", "ntk-mo")}
    row = {
        "kappa": kappa,
        "rho": info.rho,
        "ntk": res["ntk"]["params"],
        "ntk-mo": res["ntk-mo"]["params"],
        "search": res,
        "gain": None,
        "gain_kind": "none",
    }
    if row["ntk"] and row["ntk-mo"]:
        row["gain"], row["gain_kind"] = row["ntk"] / row["ntk-mo"], "exact"
    elif row["ntk-mo"]:
        row["gain"], row["gain_kind"] = res["ntk"]["params_at_cap"] / row["ntk-mo"], "lower bound"
    row["reason"] = "; ".join(f"{m}: {r['reason']}" for m, r in res.items() if "reason" in r) or None
    return row


# ---------------------------------------------------------------- (f)
def solver_point(d: int, kappa: float, F: int, n_anchors: int, seed: int) -> dict:
    """(f) rho_i against cvxpy and the vertex decision against the hull LP on one fact set (the `dev` extra)."""
    seed_torch(seed)  # see the module docstring
    try:
        import cvxpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError:
        return {"skipped": "cvxpy / scipy not installed"}

    V = make_fact_set(F, d, kappa=kappa, seed=seed + 7).values
    info = decodability(V)
    anchors = torch.linspace(0, F - 1, n_anchors).long().tolist()
    return {**solver_check(V, info.rho_i, anchors), "max_gap": info.max_gap}


def recorded(fn) -> JobFunction:
    """A point function under the name its records carry (results/facts/runs): the points lived in
    experiments/facts_runs.py, and --resume matches records by that name."""
    return JobFunction(fn, f"symformer.experiments.facts_runs.{fn.__name__}")
