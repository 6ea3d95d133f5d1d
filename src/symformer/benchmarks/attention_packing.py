"""Packed against padded rows in the `attention` suite (issue 61): one causal forward+backward of the same documents,
packed in one row with their boundaries (cu_seqlens) or padded on the right to the longest in a batch (a
key-padding mask), for FAVOR+ (m = 128) and PLASH (M = 32, width 64, causal_block 128), d_model 256, 4 heads.

The documents: lengths drawn from a lognormal (median 200 tokens, sigma 1, clipped to 8..1024; fixed seed) until
they hold DOC_TOKENS tokens, the last one cut to fit. The padded batch computes on its padding; the packed row does
not, so `packed_vs_padded_train_step[<core>]` (packed seconds over padded seconds, interleaved rounds in this
process) is below 1 by about the padding fraction, less the packed form's own overhead.
"""

from __future__ import annotations

import math

import torch

from symformer._rng import seeded_generator
from symformer.attention.favor import FavorAttention
from symformer.attention.plash import PlashAttention
from symformer.benchmarks._attention_common import contribution
from symformer.benchmarks.base import BenchContext, one_call_seconds

DOC_TOKENS, D_MODEL, HEADS = 8192, 256, 4
MEDIAN, SIGMA, SHORTEST, LONGEST = 200, 1.0, 8, 1024


def document_lengths(total: int = DOC_TOKENS, seed: int = 0) -> list[int]:
    """Lognormal document lengths (module doc) summing to `total`.

    Args:
        total (int): tokens in all.
        seed (int): the draw's seed.

    Returns:
        lengths (list[int]): one per document.

    Example:
        >>> sum(document_lengths(1000, seed=0))
        1000
    """
    g = seeded_generator(seed)
    out: list[int] = []
    while sum(out) < total:
        x = math.exp(math.log(MEDIAN) + SIGMA * float(torch.randn((), generator=g, dtype=torch.float64)))
        out.append(min(LONGEST, max(SHORTEST, round(x))))
    out[-1] -= sum(out) - total
    return [n for n in out if n > 0]


def _cores(device: str) -> dict:
    dh = D_MODEL // HEADS
    return {
        "favor": FavorAttention(dh, n_features=128, seed=0).to(device),
        "plash": PlashAttention(dh, M=32, D_k=64, width=64, mixer_heads=4, causal_block=128, seed=0).to(device),
    }


def _calls(core, lengths: list[int], device: str):
    """(packed step, padded step): each a forward+backward of the same documents' q, k, v."""
    dh, g = D_MODEL // HEADS, seeded_generator(1)
    docs = [torch.randn(3, HEADS, n, dh, generator=g).to(device) for n in lengths]
    packed = torch.cat(docs, 2)[:, None].requires_grad_()  # (3, 1, H, N, dh)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    longest = max(lengths)
    padded = torch.zeros(3, len(lengths), HEADS, longest, dh, device=device)
    for i, d in enumerate(docs):
        padded[:, i, :, : d.shape[-2]] = d
    padded.requires_grad_()
    keep = (torch.arange(longest, device=device) < torch.tensor(lengths, device=device)[:, None])[:, None, None]

    def run_packed():
        core(*packed, is_causal=True, cu_seqlens=cu).sum().backward()

    def run_padded():
        core(*padded, attn_mask=keep, is_causal=True).sum().backward()

    return run_packed, run_padded, len(lengths) * longest


@contribution
def packing_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    """Rows and `packed_vs_padded_train_step[<core>]` ratios (module doc), interleaved rounds."""
    lengths = document_lengths(DOC_TOKENS, seed=ctx.seed)
    rounds = 3 if ctx.quick else 7
    rows, ratios = [], {}
    for name, core in _cores(ctx.device).items():
        run_packed, run_padded, padded_tokens = _calls(core, lengths, ctx.device)
        run_packed(), run_padded()  # warm-up
        tp, tq = [], []
        for _ in range(rounds):  # interleaved: both sides see the same machine state
            tp.append(one_call_seconds(run_packed, ctx.device))
            tq.append(one_call_seconds(run_padded, ctx.device))
        med_p, med_q = sorted(tp)[rounds // 2], sorted(tq)[rounds // 2]
        for layout, sec, tokens in (("packed", med_p, DOC_TOKENS), ("padded", med_q, padded_tokens)):
            rows.append(
                {
                    "method": f"{name}_{layout}",
                    "pass": "fwd+bwd",
                    "N": tokens,
                    "documents": len(lengths),
                    "seconds": sec,
                    "peak_bytes": None,
                }
            )
        ratios[f"packed_vs_padded_train_step[{name}]"] = med_p / med_q
    return rows, ratios
