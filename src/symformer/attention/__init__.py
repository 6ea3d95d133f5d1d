"""Attention cores with the SDPA call shape `forward(q, k, v, attn_mask=None, is_causal=False, scale=None)`."""

from __future__ import annotations

from symformer.attention.softmax import (
    AttentionCore,
    NaiveAttention,
    SoftmaxAttention,
    naive_attention,
)
from symformer.registry import ATTENTION

ATTENTION.register("softmax")(SoftmaxAttention)
ATTENTION.register("naive")(NaiveAttention)
# Informer's "vanilla" FullAttention (ProbSparse off): exact softmax with attention dropout
ATTENTION.register("full")(SoftmaxAttention)

from symformer.attention.plash import PlashAttention  # noqa: E402

ATTENTION.register("plash")(PlashAttention)

from symformer.attention.favor import FavorAttention  # noqa: E402

ATTENTION.register("favor")(FavorAttention)

from symformer.attention.decoding import DecodingCore, DecodingState, decoding_cores  # noqa: E402

__all__ = [
    "DecodingCore",
    "DecodingState",
    "decoding_cores",
    "FavorAttention",
    "AttentionCore",
    "SoftmaxAttention",
    "NaiveAttention",
    "naive_attention",
    "PlashAttention",
]
