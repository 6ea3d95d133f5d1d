"""Positional parts: additive (sinusoidal, learned) and rotary (RoPE, STRING, circulant-STRING, ESPR)."""

from __future__ import annotations

from symformer.positional.absolute import LearnedPE, SinusoidalPE
from symformer.positional.base import (
    AdditivePositional,
    NoPositional,
    QKSymmetry,
    RotaryPositional,
    check_positions,
    default_positions,
)
from symformer.positional.cayley import cayley, check_skew, inverse_cayley, skew
from symformer.positional.espr import ESPR
from symformer.positional.partial import PartialRotary, partial_rotary
from symformer.positional.rope import RoPE, apply_rotation, pair_indices, rotate_pairs
from symformer.positional.string import STRING, CirculantSTRING
from symformer.registry import POSITIONAL

POSITIONAL.register("none")(NoPositional)
POSITIONAL.register("sinusoidal")(SinusoidalPE)
POSITIONAL.register("learned")(LearnedPE)
POSITIONAL.register("rope")(RoPE)
POSITIONAL.register("string")(STRING)
POSITIONAL.register("circulant_string")(CirculantSTRING)
POSITIONAL.register("espr")(ESPR)
POSITIONAL.register("partial")(partial_rotary)

__all__ = [
    "AdditivePositional",
    "RotaryPositional",
    "NoPositional",
    "QKSymmetry",
    "SinusoidalPE",
    "LearnedPE",
    "RoPE",
    "STRING",
    "CirculantSTRING",
    "ESPR",
    "PartialRotary",
    "cayley",
    "inverse_cayley",
    "skew",
    "check_skew",
    "apply_rotation",
    "pair_indices",
    "rotate_pairs",
    "check_positions",
    "default_positions",
]
