"""A transformer built from named parts (nanoGPT-style: one config dataclass, plain modules)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from symformer._validation import check_choice, check_int, fail
from symformer.models.layers import Block, MultiHeadAttention, make_norm
from symformer.positional.base import RotaryPositional
from symformer.positional.grids import with_prefix
from symformer.registry import ATTENTION, MLP, POSITIONAL


@dataclass(frozen=True)
class TransformerConfig:
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None  # default 4 * d_model
    positional: str = "rope"  # none | sinusoidal | learned | rope | string | espr ...
    positional_kwargs: dict[str, Any] = field(default_factory=dict)
    attention: str = "softmax"  # softmax | naive | favor | plash ...
    attention_kwargs: dict[str, Any] = field(default_factory=dict)
    mlp: str = "gelu"  # gelu | relu | swiglu
    norm: str = "layer"  # layer | rms
    prenorm: bool = True
    dropout: float = 0.0
    coord_dim: int = 1
    max_len: int = 1024  # learned PE table size per axis

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_int("n_heads", self.n_heads, 1)
        check_int("n_layers", self.n_layers, 1)
        check_int("coord_dim", self.coord_dim, 1)
        if self.d_model % self.n_heads:
            fail("n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        check_choice("positional", self.positional, POSITIONAL.names())
        check_choice("attention", self.attention, ATTENTION.names())
        check_choice("mlp", self.mlp, MLP.names())
        check_choice("norm", self.norm, ("layer", "rms"))

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Encoder(nn.Module):
    """Additive PE (if any) + blocks + final norm. Rotary parts live inside each attention layer."""

    def __init__(self, cfg: TransformerConfig, cross: bool = False, n_layers: int | None = None, name: str = "encoder"):
        super().__init__()
        self.cfg = cfg
        self.additive = None
        if getattr(POSITIONAL.get(cfg.positional), "kind", None) == "additive":
            self.additive = POSITIONAL.build(
                cfg.positional,
                d_model=cfg.d_model,
                coord_dim=cfg.coord_dim,
                max_len=cfg.max_len,
                **dict(cfg.positional_kwargs),
            )
        # the per-layer seeds are derived here, once: block i's rotary part and attention core take a given seed as
        # their own (_rng.layer_kwargs: derived_seed("layer<name>.<i>", seed))
        self.blocks = nn.ModuleList(
            Block(cfg, cross=cross, layer=f"{name}.{i}") for i in range(n_layers or cfg.n_layers)
        )
        self.norm = make_norm(cfg.norm, cfg.d_model) if cfg.prenorm else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        context_positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        n_prefix: int = 0,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """attn_mask: a boolean key-padding mask (True = attend), e.g. (B, 1, 1, N) for a padded batch of images.
        n_prefix: x starts with that many class / register tokens that `positions` (patches only) do not cover:
        additive encodings skip them and rotary parts see them at position 0 (R(0) = I but for ESPR: models.vit).
        segment_ids: (B|1, N) packed documents (attention.boundaries), given to every self-attention layer; the
        caller gives `positions` that restart with them (CausalLM.forward derives both)."""
        if self.additive is not None:
            x = (
                torch.cat((x[:, :n_prefix], self.additive(x[:, n_prefix:], positions)), dim=1)
                if n_prefix
                else (self.additive(x, positions))
            )
        if n_prefix:
            positions = with_prefix(positions, n_prefix)
        for blk in self.blocks:
            kw = {} if segment_ids is None else {"segment_ids": segment_ids}
            x = blk(
                x,
                positions,
                is_causal=is_causal,
                context=context,
                context_positions=context_positions,
                attn_mask=attn_mask,
                **kw,
            )
        return self.norm(x)


def attention_layers(model: nn.Module):
    """Every MultiHeadAttention in a model (teleportation and diagnostics walk these)."""

    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def penalties(model: nn.Module) -> torch.Tensor | float:
    """Sum of `penalty()` over every rotary part of a model (ESPR's eps_comm / eta_mix terms, T6'.0); 0.0
    if none has one. The one penalty sum: the Trainer, teleportation's loss and the experiments add it."""
    total: torch.Tensor | float = 0.0
    for m in model.modules():
        if m is not model and isinstance(m, RotaryPositional):
            total = total + m.penalty()
    return total


def fold_rotary(model: nn.Module) -> int:
    """Merge every foldable rotary basis change (STRING's P^T, `RotaryPositional.fold_into`) into its
    layer's W_Q / W_K for inference; logits are unchanged. Returns how many layers were folded."""
    n = 0
    for layer in attention_layers(model):
        if layer.rotary is not None and layer.rotary.can_fold:
            layer.rotary.fold_into(layer.q_proj, layer.k_proj)
            n += 1
    return n
