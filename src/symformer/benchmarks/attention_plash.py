"""PLASH rows of the `attention` suite (Table 2 setting: d_model 512, 4 heads, batch 1, float32).

Rows: the attention core given (q, k, v) and the whole MultiHeadAttention block (with projections),
forward (no_grad, eval) and, in the full run, forward+backward; peak memory; the matmul FLOP count
and the fraction of this machine's measured float32 matmul throughput it reaches. SDPA, naive softmax
and FAVOR+ (when registered) are timed here in the same process at the N values the ratios need.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from symformer._rng import seed_torch
from symformer.attention.plash import PlashAttention
from symformer.attention.softmax import naive_attention
from symformer.benchmarks._attention_common import contribution, qkv, time_core
from symformer.benchmarks.base import BenchContext, median_seconds, one_call_seconds, peak_memory_bytes
from symformer.models.layers import MultiHeadAttention
from symformer.registry import ATTENTION
from symformer.stats import fit_exponent

NS = (2048, 4096, 8192, 10240, 11264, 16384)
D_MODEL, HEADS = 512, 4


def matmul_throughput(device: str = "cpu", n: int = 2048) -> float:
    """Measured float32 matmul FLOP/s of this process (2 n^3 per product)."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return 2 * n**3 / median_seconds(lambda: a @ b, 0.2, device)


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _one_shot(fn, n: int, device: str) -> float:
    """Mean of 2 calls after one warm-up, the device synchronised around each: for quadratic baselines that take
    seconds per call."""
    q, k, v = qkv(n, D_MODEL, HEADS, device=device)
    with torch.no_grad():
        fn(q, k, v)
        ts = [one_call_seconds(lambda: fn(q, k, v), device) for _ in range(2)]
    return sum(ts) / len(ts)


def _block_time(core_kwargs: dict, n: int, backward: bool, device: str, min_run: float):

    mha = MultiHeadAttention(D_MODEL, HEADS, attention="plash", attention_kwargs=core_kwargs).to(device)
    mha.train(backward)
    x = torch.randn(1, n, D_MODEL, device=device, requires_grad=backward)

    def run():
        if backward:
            mha(x).sum().backward()
        else:
            with torch.no_grad():
                mha(x)

    return median_seconds(run, min_run, device), peak_memory_bytes(run, device)


@contribution
def plash_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    seed_torch(ctx.seed)
    dev, quick = ctx.device, ctx.quick
    configs = [(64, 128), (256, 128)] if quick else [(m, d) for m in (64, 128, 256, 512) for d in (64, 128, 256, 512)]
    min_run = 0.3 if quick else 0.5  # blocked_autorange needs several calls of a ~0.1 s op for a stable median
    peak = matmul_throughput(dev)
    rows: list[dict] = []
    base: dict[int, float] = {}
    for m_, d_ in configs:
        core = PlashAttention(D_MODEL // HEADS, HEADS, D_MODEL, M=m_, D_k=d_).to(dev).eval()
        for n in NS:
            passes = (False,) if quick else (False, True)
            for bwd in passes:
                core.train(bwd)
                sec, mem = time_core(core, n, bwd, dev, min_run, D_MODEL, HEADS)
                fl = core.flops(n, n, HEADS) * (3 if bwd else 1)
                rows.append(
                    {
                        "method": "plash",
                        "part": "core",
                        "pass": "fwd+bwd" if bwd else "fwd",
                        "N": n,
                        "M": m_,
                        "D_k": d_,
                        "seconds": sec,
                        "peak_bytes": mem,
                        "flops": fl,
                        "frac_matmul_peak": fl / sec / peak,
                    }
                )
                if (m_, d_) == (64, 128) and not bwd:
                    base[n] = sec
            if not quick or (m_, d_) == (64, 128) and n == 8192:
                for bwd in (False,) if quick else (False, True):
                    sec, mem = _block_time({"M": m_, "D_k": d_}, n, bwd, dev, min_run)
                    rows.append(
                        {
                            "method": "plash",
                            "part": "block",
                            "pass": "fwd+bwd" if bwd else "fwd",
                            "N": n,
                            "M": m_,
                            "D_k": d_,
                            "seconds": sec,
                            "peak_bytes": mem,
                        }
                    )
    ratios: dict = {"plash_time_exponent": fit_exponent(list(base), list(base.values()))}
    sdpa_ns = (8192, 11264) if quick else NS
    for n in sdpa_ns:
        sec = _one_shot(_sdpa, n, dev)
        rows.append({"method": "sdpa", "part": "core", "pass": "fwd", "N": n, "seconds": sec})
        if n in (8192, 11264):
            ratios[f"plash_core_vs_sdpa_{n}"] = sec / base[n]
    if not quick:
        for n in (2048, 4096, 8192):
            sec = _one_shot(naive_attention, n, dev)
            rows.append({"method": "naive", "part": "core", "pass": "fwd", "N": n, "seconds": sec})
    fav = (
        ATTENTION.build("favor", head_dim=D_MODEL // HEADS, n_heads=HEADS, d_model=D_MODEL, n_features=256)
        .to(dev)
        .eval()
    )
    for n in (8192,) if quick else NS:
        sec, mem = time_core(fav, n, False, dev, min_run, D_MODEL, HEADS)
        rows.append(
            {"method": "favor", "part": "core", "pass": "fwd", "N": n, "m": 256, "seconds": sec, "peak_bytes": mem}
        )
        if n == 8192:
            ratios["plash_vs_favor_8192"] = sec / base[8192]
    ratios["plash_matmul_peak_flops"] = peak
    return rows, ratios
