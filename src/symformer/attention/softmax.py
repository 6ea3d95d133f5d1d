"""Exact softmax attention: PyTorch SDPA, and a naive explicit reference."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from symformer._validation import check_attention_inputs, fail


class AttentionCore(nn.Module):
    """Interface of every attention variant: the call shape of F.scaled_dot_product_attention."""

    supports_causal = True
    #: computes softmax(q k^T * scale) v exactly: the only cores whose output is invariant under GL(d_h) acting
    #: on q, k (teleportation paper Sec. 3); approximations (FAVOR+, PLASH) are not
    exact_softmax = False

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, scale: float | None = None) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


class SoftmaxAttention(AttentionCore):
    """F.scaled_dot_product_attention (fused kernels where available)."""

    exact_softmax = True

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = dropout

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None):
        check_attention_inputs(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                              dropout_p=self.dropout if self.training else 0.0)


def naive_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if is_causal:
        nq, nk = q.shape[-2], k.shape[-2]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.softmax(s, dim=-1) @ v


class NaiveAttention(AttentionCore):
    """softmax(q k^T * scale) v written out: the reference the other variants are tested against."""

    exact_softmax = True

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        if dropout != 0.0:  # the reference is deterministic: reject the option rather than ignore it
            fail("dropout", dropout, "0.0 (the naive reference has no dropout; use attention='softmax')")

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None):
        check_attention_inputs(q, k, v)
        return naive_attention(q, k, v, attn_mask, is_causal, scale)
