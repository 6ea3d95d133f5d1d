"""The PLASH section of the `kernels` suite (GPU only; benchmarks/kernels.py calls `plash_rows`).

Rows, in one process, for the fused kernels (PlashAttention(kernel="triton")) and the torch path (kernel="torch"):
- the PLASH core (Table 2 setting of benchmarks/attention_plash: d_model 512, 4 heads, batch 1, float32, M 64,
  D_k 128), non-causal, forward (no_grad) and forward + backward at N 8192 and 16384: seconds, the matmul FLOP count
  (PlashAttention.flops, x3 with the backward) and `frac_matmul_peak`, the fraction of this process's measured
  float32 matmul throughput (attention_plash.matmul_throughput, the same definition as the attention suite's);
- the decoding step at a 4096-token context (batch 8, 4 heads, head dim 128; the state prefilled once, then one
  token per call) against SDPA decoding one token over a 4096-token KV cache (the new key and value written into
  the preallocated cache, then F.scaled_dot_product_attention).
The kernel path is timed eager and under torch.compile(fullgraph=True) (`plash_triton_compiled`: inductor fuses the
launches of Stage II-III on the M summaries, which bound the eager core at these sizes).
Ratios: `plash_core_frac_matmul_peak_8192` (eager kernel path, forward), `..._compiled` (the same compiled),
`plash_core_kernel_vs_torch_8192` (forward seconds, eager kernel over eager torch), `plash_decode_vs_sdpa_4k` (kernel
step over the SDPA step).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from symformer._rng import seeded_generator
from symformer.attention.plash import PlashAttention
from symformer.benchmarks._attention_common import time_core
from symformer.benchmarks.attention_plash import D_MODEL, HEADS, matmul_throughput
from symformer.benchmarks.base import BenchContext, median_seconds

CORE_NS = (8192, 16384)
HEADLINE_N = 8192  # the N of the headline ratios
M, D_K = 64, 128
DECODE_CONTEXT, DECODE_BATCH, DECODE_HEAD_DIM = 4096, 8, 128
COMPILE_BACKEND = "inductor"


def _core_rows(ctx: BenchContext, peak: float, min_run: float) -> tuple[list[dict], dict]:
    rows, fwd = [], {}
    for kern, compiled in (("triton", False), ("torch", False), ("triton", True)):
        core = PlashAttention(D_MODEL // HEADS, HEADS, D_MODEL, M=M, D_k=D_K, kernel=kern).to(ctx.device)
        method = f"plash_{kern}" + ("_compiled" if compiled else "")
        # compiled: inductor fuses Stage II-III's launches
        run = torch.compile(core, fullgraph=True, backend=COMPILE_BACKEND) if compiled else core
        for n in CORE_NS:
            for bwd in (False, True):
                core.train(bwd)
                sec, mem = time_core(run, n, bwd, ctx.device, min_run, D_MODEL, HEADS)
                fl = core.flops(n, n, HEADS) * (3 if bwd else 1)
                row = {"method": method, "part": "core", "pass": "fwd+bwd" if bwd else "fwd", "N": n, "M": M}
                row.update(D_k=D_K, seconds=sec, peak_bytes=mem, flops=fl, frac_matmul_peak=fl / sec / peak)
                rows.append(row)
                if not bwd:
                    fwd[(method, n)] = sec
    n = HEADLINE_N
    frac = {(r["method"], r["N"]): r["frac_matmul_peak"] for r in rows if r["pass"] == "fwd"}
    ratios = {
        "plash_core_frac_matmul_peak_8192": frac[("plash_triton", n)],
        "plash_core_frac_matmul_peak_8192_compiled": frac[("plash_triton_compiled", n)],
        "plash_core_kernel_vs_torch_8192": fwd[("plash_triton", n)] / fwd[("plash_torch", n)],
    }
    return rows, ratios


def _plash_step(kern: str, device: str, g: torch.Generator):
    b, h, dh, n = DECODE_BATCH, HEADS, DECODE_HEAD_DIM, DECODE_CONTEXT
    core = PlashAttention(dh, h, M=M, D_k=D_K, kernel=kern).to(device).eval()
    st = core.init_state()
    with torch.no_grad():
        ctx = [torch.randn(b, h, n, dh, generator=g).to(device) for _ in range(3)]
        core(*ctx, is_causal=True, state=st)  # prefill the 4k context once
    new = [torch.randn(b, h, 1, dh, generator=g).to(device) for _ in range(3)]

    def step():
        with torch.no_grad():
            core(*new, is_causal=True, state=st)

    return step


def _sdpa_step(device: str, g: torch.Generator):
    b, h, dh, n = DECODE_BATCH, HEADS, DECODE_HEAD_DIM, DECODE_CONTEXT
    kc, vc = (torch.randn(b, h, n, dh, generator=g).to(device) for _ in range(2))
    q, k, v = (torch.randn(b, h, 1, dh, generator=g).to(device) for _ in range(3))

    def step():
        with torch.no_grad():
            kc[:, :, -1:].copy_(k)  # the new token's slot of the preallocated cache
            vc[:, :, -1:].copy_(v)
            F.scaled_dot_product_attention(q, kc, vc)

    return step


def plash_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    """The PLASH rows and ratios (module docstring); the caller checks that ctx.device is a CUDA device."""
    min_run = 0.3 if ctx.quick else 1.0
    peak = matmul_throughput(ctx.device)
    rows, ratios = _core_rows(ctx, peak, min_run)
    g = seeded_generator(ctx.seed)
    steps = {f"plash_{k}": _plash_step(k, ctx.device, g) for k in ("triton", "torch")}
    steps["sdpa"] = _sdpa_step(ctx.device, g)
    secs = {name: median_seconds(fn, min_run, ctx.device) for name, fn in steps.items()}
    for name, sec in secs.items():
        rows.append(
            {"method": name, "part": "decode_step", "context": DECODE_CONTEXT, "batch": DECODE_BATCH, "seconds": sec}
        )
    ratios["plash_decode_vs_sdpa_4k"] = secs["plash_triton"] / secs["sdpa"]
    ratios["plash_decode_torch_vs_sdpa_4k"] = secs["plash_torch"] / secs["sdpa"]
    ratios["plash_matmul_peak_flops"] = peak
    return rows, ratios
