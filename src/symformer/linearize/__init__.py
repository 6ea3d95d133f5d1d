"""Linearizing a trained softmax model (layer 5.5: above integrations, below experiments and the CLI): attention
transfer to FAVOR+ (behind a learned per-head map, learned_favor) or PLASH, optionally with STRING in place of RoPE
(transfer), then low-rank adapters on the LM loss (lora); recipe.linearize runs both, with checkpoints and resume,
and recipe.save writes a folder that `hf.from_pretrained` reloads. symformer's own models.CausalLM takes the same
stages (causal: its cores swapped in a rebuilt CausalLM, saved by save_lm in its own file that load_lm reloads).
docs/linearize.md has the recipe.

Importing this package registers the attention core "favor_learned" (ATTENTION, a decoding core)."""

from __future__ import annotations

from symformer.linearize.causal import load_lm, save_lm
from symformer.linearize.learned_favor import LearnedFavorAttention
from symformer.linearize.lora import add_lora, merge_lora
from symformer.linearize.recipe import (
    CORES,
    LinearizeConfig,
    LinearizeResult,
    check_model,
    linearize,
    save,
    student_of,
)
from symformer.linearize.transfer import attention_parameters, capture, transfer_loss, weights_loss

__all__ = [
    "CORES",
    "LearnedFavorAttention",
    "LinearizeConfig",
    "LinearizeResult",
    "add_lora",
    "attention_parameters",
    "capture",
    "check_model",
    "linearize",
    "load_lm",
    "merge_lora",
    "save",
    "save_lm",
    "student_of",
    "transfer_loss",
    "weights_loss",
]
