"""The FAVOR+ rows of the `kernels` suite (GPU only; benchmarks/kernels.py calls `favor_rows`).

Causal forward + backward at N = 8192, bf16 q, k, v (B 1, H 8, Dh 64, m 256 features, the FAVOR+ defaults), timed
interleaved in one process (one call of every method per round, the median over rounds):
- favor_layer_kernel / favor_layer_torch: FavorAttention(kernel="triton" / "torch"), the whole layer (feature maps,
  16-bit inputs computed in float32, the quotient);
- favor_features_kernel / fla_chunk / fla_fused_chunk: the same bf16 features of our maps (phi(q^), phi(k^): the
  feature GEMMs and exps are in every row) into our chunked kernel (kernels.favor.favor_causal_kernel) or into
  flash-linear-attention's `chunk_linear_attn` / `fused_chunk_linear_attn` (normalize=True, scale 1), where FLA
  imports (the `bench` extra);
- sdpa_flash: softmax attention, SDPA's flash backend, causal.
Ratio favor_causal_kernel_vs_fla_chunk_8192 = favor_features_kernel / fla_chunk (goal <= 1.0: else depend on FLA).

Decoding at a 4k context (B 1, H 8, Dh 64, bf16): one FAVOR+ step (FavorAttention.forward with a prefilled state,
kernel "triton" and "torch"; and the fused `decode_step` alone) against one SDPA call over a 4096-token KV cache.
Ratio favor_decode_vs_sdpa_4k = the layer step with the kernel / SDPA (goal <= 0.5).

Nothing GPU-only is imported at module level: FLA and the kernels load inside the functions.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
from typing import Callable

import torch
import torch.nn.functional as F

from symformer._rng import seeded_generator
from symformer._validation import fail
from symformer.attention import FavorAttention
from symformer.attention.favor_ops import _key_features, _query_features
from symformer.benchmarks.base import BenchContext, synced_clock

N, H, DH, M, CONTEXT = 8192, 8, 64, 256, 4096


def _median_interleaved(fns: dict[str, Callable[[], object]], rounds: int, inner: int, device: str) -> dict:
    """Median seconds per call of each fn: every round calls each fn `inner` times between two device syncs, in
    turn, so drifts in clocks or load hit all of them alike."""
    for fn in fns.values():  # warm-up: compilation, autotuning, allocations
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = synced_clock(device)
            for _ in range(inner):
                fn()
            times[name].append((synced_clock(device) - t0) / inner)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _fwd_bwd(f: Callable, *xs: torch.Tensor) -> Callable[[], None]:
    def run():
        out = f(*xs)
        out.backward(torch.ones_like(out))
        for x in xs:
            x.grad = None

    return run


def fla_available() -> bool:
    """Whether flash-linear-attention's kernels import (fla-core, the `fla` extra)."""
    return importlib.util.find_spec("fla") is not None


def _causal_methods(device: str, seed: int) -> dict[str, Callable[[], None]]:
    g = seeded_generator(seed, device)
    q, k, v = (
        (0.5 * torch.randn(1, H, N, DH, generator=g, device=device)).bfloat16().requires_grad_() for _ in range(3)
    )
    cores = {kind: FavorAttention(DH, M, seed=seed, kernel=kind).to(device) for kind in ("triton", "torch")}
    w, scale = cores["torch"].features, 1.0 / math.sqrt(DH)

    def features(q, k):  # our stabilised maps (favor_ops), in bf16 for the chunked products
        return _query_features(q.float(), w, scale, 0.0).bfloat16(), _key_features(k.float(), w, scale, 0.0).bfloat16()

    from symformer.kernels.favor import favor_causal_kernel  # registers the Triton ops (optional dependency)

    methods = {
        "favor_layer_kernel": _fwd_bwd(lambda q, k, v: cores["triton"](q, k, v, is_causal=True), q, k, v),
        "favor_layer_torch": _fwd_bwd(lambda q, k, v: cores["torch"](q, k, v, is_causal=True), q, k, v),
        "favor_features_kernel": _fwd_bwd(lambda q, k, v: favor_causal_kernel(*features(q, k), v), q, k, v),
        "sdpa_flash": _fwd_bwd(_flash, q, k, v),
    }
    if fla_available():
        from fla.ops.linear_attn import chunk_linear_attn, fused_chunk_linear_attn  # optional (the bench extra)

        for name, fla in (("fla_chunk", chunk_linear_attn), ("fla_fused_chunk", fused_chunk_linear_attn)):

            def run(q, k, v, fla=fla):
                qf, kf = features(q, k)  # FLA's layout is (B, N, H, .)
                o, _ = fla(qf.transpose(1, 2), kf.transpose(1, 2), v.transpose(1, 2), scale=1.0, normalize=True)
                return o.transpose(1, 2)

            methods[name] = _fwd_bwd(run, q, k, v)
    return methods


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _decode_methods(device: str, seed: int) -> dict[str, Callable[[], object]]:
    from symformer.kernels.favor import decode_step  # registers the Triton ops (optional dependency)

    g = seeded_generator(seed, device)
    ctx_qkv = [(0.5 * torch.randn(1, H, CONTEXT, DH, generator=g, device=device)).bfloat16() for _ in range(3)]
    one = [(0.5 * torch.randn(1, H, 1, DH, generator=g, device=device)).bfloat16() for _ in range(3)]
    methods: dict[str, Callable[[], object]] = {}
    with torch.no_grad():
        for kind in ("triton", "torch"):
            core = FavorAttention(DH, M, seed=seed, kernel=kind).to(device)
            st = core.init_state()
            core(*ctx_qkv, is_causal=True, state=st)  # the 4k prefill
            methods[f"favor_decode_{kind}"] = lambda core=core, st=st: core(*one, is_causal=True, state=st)
            if kind == "triton":
                ws_t = st.proj[1]
                methods["favor_decode_step_only"] = lambda st=st, ws_t=ws_t: decode_step(
                    *one, ws_t, st.kvs, st.c, 1.0 / math.sqrt(DH)
                )
    kc, vc = ctx_qkv[1], ctx_qkv[2]  # a full 4k KV cache
    methods["sdpa_decode"] = lambda: F.scaled_dot_product_attention(one[0], kc, vc)
    return methods


def favor_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    """(rows, ratios) of the FAVOR+ kernels (module doc): causal forward + backward at N = 8192 and decoding at 4k.

    Args:
        ctx: the suite's context; its device must be "cuda".
    """
    if ctx.device != "cuda" or not torch.cuda.is_available():
        fail("device", ctx.device, "cuda: the FAVOR+ kernel rows time Triton kernels on a GPU")
    rounds = 5 if ctx.quick else 15
    rows: list[dict] = []
    causal = _median_interleaved(_causal_methods(ctx.device, ctx.seed), rounds, 1, ctx.device)
    for name, sec in causal.items():
        rows.append(
            {"method": name, "pass": "fwd+bwd", "N": N, "heads": H, "m": M, "dtype": "bfloat16", "seconds": sec}
        )
    with torch.no_grad():
        decode = _median_interleaved(_decode_methods(ctx.device, ctx.seed), rounds, 50, ctx.device)
    for name, sec in decode.items():
        rows.append(
            {"method": name, "pass": "decode", "N": CONTEXT, "heads": H, "m": M, "dtype": "bfloat16", "seconds": sec}
        )
    ratios = {
        "favor_causal_kernel_vs_torch_8192": causal["favor_layer_kernel"] / causal["favor_layer_torch"],
        "favor_causal_kernel_vs_sdpa_flash_8192": causal["favor_features_kernel"] / causal["sdpa_flash"],
        "favor_decode_vs_sdpa_4k": decode["favor_decode_triton"] / decode["sdpa_decode"],
        "favor_decode_step_only_vs_sdpa_4k": decode["favor_decode_step_only"] / decode["sdpa_decode"],
    }
    if "fla_chunk" in causal:
        ratios["favor_causal_kernel_vs_fla_chunk_8192"] = causal["favor_features_kernel"] / causal["fla_chunk"]
        ratios["favor_causal_kernel_vs_fla_fused_chunk_8192"] = (
            causal["favor_features_kernel"] / causal["fla_fused_chunk"]
        )
    return rows, ratios
