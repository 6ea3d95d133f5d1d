"""Positional parts: additive (sinusoidal, learned) and rotary (RoPE; STRING and ESPR register here too)."""
from __future__ import annotations

from symformer.positional.absolute import LearnedPE, SinusoidalPE
from symformer.positional.base import AdditivePositional, NoPositional, RotaryPositional, check_positions
from symformer.positional.rope import RoPE, pair_indices, rotate_pairs
from symformer.registry import POSITIONAL

POSITIONAL.register("none")(NoPositional)
POSITIONAL.register("sinusoidal")(SinusoidalPE)
POSITIONAL.register("learned")(LearnedPE)
POSITIONAL.register("rope")(RoPE)

__all__ = ["AdditivePositional", "RotaryPositional", "NoPositional", "SinusoidalPE", "LearnedPE", "RoPE",
           "pair_indices", "rotate_pairs", "check_positions"]
