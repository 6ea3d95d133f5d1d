"""Benchmark suite `facts`: Bin+JL construction time and peak memory, the rho solve, our solver vs cvxpy."""

from __future__ import annotations

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer.benchmarks.base import BenchContext, BenchResult, maxrss_bytes, median_seconds, suite, timed_call
from symformer.facts.capacity import build_fact_mlp
from symformer.facts.decodability import decodability, rho_reference_cvxpy
from symformer.facts.dot_ce import dot_product_cross_entropy
from symformer.facts.embeddings import make_fact_set, sentence_like_embeddings
from symformer.facts.mlp import FactMLP


def _once(fn) -> tuple[float, object]:
    return timed_call(fn)  # the facts solvers run on the CPU


def _binjl_row(d: int, F: int, m: int, seed: int) -> tuple[dict, object]:
    """One full Bin+JL construction, timed in its two phases (the rho / U* solve, then decoder + gadgets +
    the accuracy check); memory = the whole process's high-water RSS after it (python and torch
    included, so an upper bound; one run only)."""
    fs = make_fact_set(F, d, seed=seed)
    t_rho, info = _once(lambda: decodability(fs.values))
    t_build, mlp = _once(
        lambda: build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=m, seed=seed, strict=False, info=info)
    )
    peak = maxrss_bytes()  # the process's high-water mark after the run: an upper bound
    return (
        {
            "method": "bin+jl",
            "d": d,
            "F": F,
            "m": m,
            "seconds": t_rho + t_build,
            "rho_seconds": t_rho,
            "gadget_seconds": t_build,
            "process_peak_rss_bytes": peak,
            "params": mlp.n_params(),
            "accuracy": mlp.accuracy,
        },
        info,
    )


def _gd_epoch_rows(F: int, d: int, h: int, seed: int, min_run_time: float = 1.0) -> list[dict]:
    """One full-batch epoch of a GD SwiGLU fact MLP (App. A.1.3: forward, CE on g(K) V^T, backward, Adam) on one
    thread, as the fact-recall jobs run it: the fused blocked loss (facts.dot_ce) against autograd's
    F.cross_entropy(g(K) @ V.T), the same MLP and data."""

    g = seeded_generator(seed)
    K, V = torch.randn(F, d, generator=g), torch.randn(F, d, generator=g)
    f = torch.randperm(F, generator=g)
    losses = {
        "fused": lambda out: dot_product_cross_entropy(out, V, f)[0],
        "autograd": lambda out: torch.nn.functional.cross_entropy(out @ V.T, f),
    }
    rows, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, loss_fn in losses.items():
            seed_torch(seed)
            mlp = FactMLP(d, h, activation="silu", gated=True, bias=True, out_bias=True, dtype=torch.float32)
            opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)

            def epoch(mlp=mlp, opt=opt, loss_fn=loss_fn):
                opt.zero_grad()
                loss_fn(mlp.down(mlp.hidden(K))).backward()
                opt.step()

            epoch()
            rows.append(
                {
                    "method": f"gd-epoch-{name}",
                    "F": F,
                    "d": d,
                    "h": h,
                    "threads": 1,
                    "seconds": median_seconds(epoch, min_run_time=min_run_time),
                }
            )
    finally:
        torch.set_num_threads(threads)
    return rows


@suite("facts", "fact-storing MLPs: Bin+JL construction, rho solver, solver vs cvxpy, GD epoch (fused loss)")
def run(ctx: BenchContext) -> BenchResult:
    res = BenchResult()
    fused, auto = _gd_epoch_rows(4096, 128, 64, ctx.seed)
    res.rows += [fused, auto]
    res.ratios["gd_epoch_f4096_seconds"] = fused["seconds"]
    res.ratios["gd_epoch_fused_vs_autograd"] = fused["seconds"] / auto["seconds"]
    # decoder widths that store every fact at these sizes (capacity search: m^ = 37 at d = 64, F = 1024)
    row, info64 = _binjl_row(64, 1024, 96, ctx.seed)
    res.rows.append(row)
    row, _ = _binjl_row(128, 4096, 128, ctx.seed)
    res.rows.append(row)
    res.ratios["binjl_d128_f4096_seconds"] = row["seconds"]
    res.ratios["binjl_d128_f4096_rho_seconds"] = row["rho_seconds"]
    res.ratios["binjl_d128_f4096_peak_gb"] = row["process_peak_rss_bytes"] / 2**30
    res.ratios["binjl_d128_f4096_accuracy"] = row["accuracy"]
    res.rows.append({"method": "rho-solver", "d": 128, "F": 4096, "seconds": row["rho_seconds"]})
    # issue #11: real widths, anisotropic like sentence-model embeddings (kappa 15 after centring)
    for d in (384, 768):
        V = sentence_like_embeddings(4096, d, seed=ctx.seed)
        t, info = _once(lambda V=V: decodability(V))
        res.rows.append(
            {
                "method": "rho-solver",
                "d": d,
                "F": 4096,
                "seconds": t,
                "rho": info.rho,
                "max_gap": info.max_gap,
                "embeddings": "sentence-like (gaussian, kappa 15 centred)",
            }
        )
        res.ratios[f"rho_d{d}_f4096_seconds"] = t
    ours = next(r for r in res.rows if r["method"] == "bin+jl")["rho_seconds"]
    res.rows.append({"method": "rho-solver", "d": 64, "F": 1024, "seconds": ours, "rho": info64.rho})
    try:
        import cvxpy  # noqa: F401
    except ImportError:
        res.notes.append("cvxpy not installed: solver-vs-cvxpy row skipped")
        return res
    V = make_fact_set(1024, 64, seed=ctx.seed).values
    n_anchor = 32 if ctx.quick else 128
    anchors = list(range(n_anchor))
    cv, ref = _once(lambda: rho_reference_cvxpy(V, anchors))
    cv_full = cv * V.shape[0] / n_anchor
    err = float(((info64.rho_i[anchors] - ref).abs() / ref.abs()).max())
    res.rows.append(
        {
            "method": "cvxpy",
            "d": 64,
            "F": 1024,
            "seconds": cv_full,
            "anchors_timed": n_anchor,
            "max_rel_err_vs_ours": err,
        }
    )
    res.ratios["rho_solver_vs_cvxpy_speedup"] = cv_full / ours
    res.ratios["rho_solver_vs_cvxpy_max_rel_err"] = err
    res.notes.append(f"cvxpy timed on {n_anchor} of 1024 anchors (one QP each, default solver) and scaled to 1024.")
    res.notes.append("peak memory: the process's max RSS after the construction (interpreter and torch included).")
    return res
