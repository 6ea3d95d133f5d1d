"""Models built from named parts: ViT classifier, causal LM, Informer-style forecaster."""

from __future__ import annotations

from symformer.models.forecaster import Forecaster
from symformer.models.informer import Informer, InformerConfig
from symformer.models.layers import Block, FeedForward, MultiHeadAttention, RMSNorm, SwiGLU
from symformer.models.lm import CausalLM
from symformer.models.transformer import (
    Encoder,
    TransformerConfig,
    attention_layers,
    fold_rotary,
    penalties,
)
from symformer.models.vit import ViTClassifier

__all__ = [
    "TransformerConfig",
    "Encoder",
    "Block",
    "MultiHeadAttention",
    "FeedForward",
    "SwiGLU",
    "RMSNorm",
    "ViTClassifier",
    "CausalLM",
    "Forecaster",
    "Informer",
    "InformerConfig",
    "attention_layers",
    "fold_rotary",
    "penalties",
]
