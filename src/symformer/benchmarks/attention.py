"""`attention` suite: exact SDPA, naive softmax, FAVOR+ and performer-pytorch's FastAttention side by side.

Setting of PLASH's Table 2: d_model 512, 4 heads (Dh = 128), batch 1, float32, N in
{1024, ..., 16384}; FAVOR+ and performer-pytorch use the same m = 256 features (the same projection matrix).
Rows: forward (no_grad) and forward+backward (gradients w.r.t. q, k, v) median seconds and peak memory.
Ratios are measured in this process: FAVOR+ / performer-pytorch and FAVOR+ / SDPA at N = 8192, and the fitted
exponent of FAVOR+ forward time against N over 2048 ... 16384. Other systems append their rows through
`_attention_common.CONTRIBUTIONS` (PLASH's rows); they run after ours, in the same process.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from symformer._rng import seed_torch, seeded_generator
from symformer.attention.favor import FavorAttention
from symformer.attention.softmax import naive_attention
from symformer.benchmarks import _attention_common as common
from symformer.benchmarks._precision import CORE_SHAPES, attention_bf16_rows, bf16_note, bf16_ratios
from symformer.benchmarks.base import (
    BenchContext,
    BenchResult,
    fix_malloc_thresholds,
    one_call_seconds,
    suite,
)
from symformer.stats import fit_exponent

D_MODEL, HEADS, M = 512, 4, 256
NS = (1024, 2048, 4096, 8192, 16384)
EXPONENT_NS = (2048, 4096, 8192, 16384)
NAIVE_MAX_N = 8192  # naive softmax materialises H N^2 floats (4.3 GB per matrix at N = 16384)


def _methods(device: str) -> dict[str, Callable]:
    """name -> core(q, k, v); FAVOR+ and performer-pytorch share one projection matrix."""
    fav = FavorAttention(D_MODEL // HEADS, n_features=M).to(device).eval()
    out: dict[str, Callable] = {
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "naive": naive_attention,
        "favor": fav,
        "favor_causal": lambda q, k, v: fav(q, k, v, is_causal=True),
    }
    try:
        from performer_pytorch import FastAttention
    except ImportError:  # optional [bench] extra
        return out
    fa = FastAttention(D_MODEL // HEADS, nb_features=M).to(device).eval()
    fav.set_features(fa.projection_matrix)
    out["performer_pytorch"] = fa
    return out


def _plan(quick: bool, names: list[str]) -> list[tuple[str, str, int]]:
    """(method, pass, N) to time. Quick: the N the ratios need, quadratic methods only up to 8192 forward."""
    plan = []
    for name in names:
        for bwd in (False, True):
            ns = list(NS)
            if name == "naive":
                ns = [n for n in ns if n <= (4096 if quick else NAIVE_MAX_N)]
            if quick:
                if name in ("favor", "performer_pytorch"):
                    ns = list(EXPONENT_NS) if not bwd else [8192]
                elif name == "sdpa":
                    ns = [1024, 2048, 4096, 8192] if not bwd else [2048]
                elif name == "favor_causal":
                    ns = [8192] if not bwd else []
                else:
                    ns = [n for n in ns if n <= 2048] if bwd else ns
            plan += [(name, "fwd+bwd" if bwd else "fwd", n) for n in ns]
    return plan


@suite("attention", "SDPA, naive softmax, FAVOR+ and performer-pytorch at d_model 512, 4 heads, N up to 16384")
def run(ctx: BenchContext) -> BenchResult:
    seed_torch(ctx.seed)
    methods = _methods(ctx.device)
    min_run = 0.2 if ctx.quick else 0.5
    rows: list[dict] = []
    times: dict[tuple[str, str, int], float] = {}
    for name, pas, n in _plan(ctx.quick, list(methods)):
        sec, mem = common.time_core(methods[name], n, pas == "fwd+bwd", ctx.device, min_run, D_MODEL, HEADS)
        times[(name, pas, n)] = sec
        rows.append(
            {
                "method": name,
                "pass": pas,
                "N": n,
                "m": M if "favor" in name or "performer" in name else None,
                "seconds": sec,
                "peak_bytes": mem,
            }
        )
    ratios = _ratios(times)
    if "performer_pytorch" in methods:  # the headline ratio again, from interleaved calls (robust to load drift)
        reps = 5 if ctx.quick else 15
        ratios["favor_vs_performer_pytorch_8192_interleaved"] = _interleaved_ratio(
            methods["favor"], methods["performer_pytorch"], 8192, reps, ctx.device
        )
    floor = _gemm_floor(8192, ctx.device, 5 if ctx.quick else 15)
    for name in ("favor", "performer_pytorch"):
        if (name, "fwd", 8192) in times:
            ratios[f"{name}_vs_gemm_floor_8192"] = times[(name, "fwd", 8192)] / floor
    notes = [
        f"naive softmax is skipped above N = {NAIVE_MAX_N} (O(H N^2) memory)",
        "*_vs_gemm_floor_8192: forward time over that of the four GEMMs every FAVOR+ forward needs "
        "(key and query projections, phi(K)^T [V, 1], phi(Q) [.]; performer-pytorch makes the same four), "
        "so no ratio of the two methods can go below about floor / performer",
        "FAVOR+ and performer-pytorch use the same projection matrix; ours without performer's 1e-4 feature "
        "epsilon (an unbiased estimator), see attention/favor.py",
        "plash_core_vs_sdpa_* and plash_vs_favor_8192 are speed-ups: the other method's time over PLASH's "
        "(above 1: PLASH is faster); the *_vs_* ratios of FAVOR+ are ours over theirs (below 1: ours is faster)",
    ]
    if "performer_pytorch" not in methods:
        notes.append("performer-pytorch is not installed (pip install symformer[bench]): its rows are missing")
    for fn in common.CONTRIBUTIONS:  # e.g. the PLASH rows, measured in this same process
        extra_rows, extra_ratios = fn(ctx)
        rows += extra_rows
        ratios.update(extra_ratios)

    bf16 = attention_bf16_rows(ctx, min_run)  # softmax, FAVOR+, PLASH cast to bfloat16, with err_vs_bound
    rows += bf16
    ratios.update(bf16_ratios(bf16))
    notes.append(bf16_note("core", "q, k, v", f"of shape {CORE_SHAPES[ctx.quick]}", "max|v|"))
    if "performer_pytorch" in methods and ctx.device == "cpu" and fix_malloc_thresholds():
        # last, since it changes the allocator for the rest of the process: the same headline ratio
        # without page-fault noise (see benchmarks.base.fix_malloc_thresholds)
        ratios["favor_vs_performer_pytorch_8192_fixed_malloc"] = _interleaved_ratio(
            methods["favor"], methods["performer_pytorch"], 8192, 5 if ctx.quick else 15, ctx.device
        )
        notes.append(
            "favor_vs_performer_pytorch_8192_fixed_malloc: the interleaved ratio after pinning glibc's "
            "mmap threshold; the other rows use the allocator's default (what users get)"
        )
    return BenchResult(
        rows=rows,
        ratios=ratios,
        notes=notes,
        config={
            "d_model": D_MODEL,
            "heads": HEADS,
            "batch": 1,
            "dtype": "float32",
            "m": M,
            "N": list(NS),
            "quick": ctx.quick,
            "threads": torch.get_num_threads(),
        },
    )


def _gemm_floor(n: int, device: str, reps: int) -> float:
    """min seconds of the four GEMMs of a FAVOR+ forward at N = n (d = Dh + 1 for the norm column, m
    features, Dv + 1 for the denominator column): the arithmetic no FAVOR+ implementation can skip."""
    dh, h = D_MODEL // HEADS, HEADS
    g = seeded_generator(0)
    x, w = torch.randn(h * n, dh + 1, generator=g).to(device), torch.randn(dh + 1, M, generator=g).to(device)
    f, v = torch.randn(h, n, M, generator=g).to(device), torch.randn(h, n, dh + 1, generator=g).to(device)
    kv = torch.randn(h, M, dh + 1, generator=g).to(device)

    def four():
        return x @ w, f.transpose(-1, -2) @ v, x[:, :dh] @ w[:dh], f @ kv

    with torch.no_grad():
        four()  # warm-up
        return min(one_call_seconds(four, device) for _ in range(reps))


def _interleaved_ratio(a: Callable, b: Callable, n: int, reps: int, device: str) -> float:
    """min time of a / min time of b over `reps` alternating forward calls on the same inputs."""
    q, k, v = common.qkv(n, D_MODEL, HEADS, device=device)
    ta, tb = [], []
    with torch.no_grad():
        a(q, k, v), b(q, k, v)  # warm-up
        for _ in range(reps):
            ta.append(one_call_seconds(lambda: a(q, k, v), device))
            tb.append(one_call_seconds(lambda: b(q, k, v), device))
    return min(ta) / min(tb)


def _ratios(times: dict[tuple[str, str, int], float]) -> dict:
    r: dict = {}
    fav = {n: times[("favor", "fwd", n)] for n in EXPONENT_NS if ("favor", "fwd", n) in times}
    if len(fav) >= 2:
        r["favor_time_exponent"] = fit_exponent(list(fav), list(fav.values()))
    for other, key in (("performer_pytorch", "favor_vs_performer_pytorch_8192"), ("sdpa", "favor_vs_sdpa_8192")):
        for pas, suffix in (("fwd", ""), ("fwd+bwd", "_fwd_bwd")):
            a, b = times.get(("favor", pas, 8192)), times.get((other, pas, 8192))
            if a is not None and b is not None:
                r[key + suffix] = a / b
    return r
