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
from symformer.positional.grids import grid_positions, with_prefix
from symformer.positional.partial import PartialRotary, partial_rotary
from symformer.positional.rope import RoPE, apply_rotation, pair_indices, rotate_pairs
from symformer.positional.string import STRING, CirculantSTRING
from symformer.positional.vision import from_rope_vit, from_timm_state_dict, rope_vit_axial, timm_axial
from symformer.registry import POSITIONAL

POSITIONAL.register("none")(NoPositional)
POSITIONAL.register("sinusoidal")(SinusoidalPE)
POSITIONAL.register("learned")(LearnedPE)
POSITIONAL.register("rope")(RoPE)
POSITIONAL.register("string")(STRING)
POSITIONAL.register("circulant_string")(CirculantSTRING)
POSITIONAL.register("espr")(ESPR)
POSITIONAL.register("partial")(partial_rotary)


def rotary_parts() -> dict[str, type]:
    """name -> class of every registered rotary part (POSITIONAL entries subclassing RotaryPositional), in
    registration order: what every host that runs "all rotary parts" reads (the HF patch, the precision checks, the
    benchmarks), so a new part registered here runs there with no other edit.

    Returns:
        parts (dict[str, type]): registered name -> RotaryPositional subclass.

    Examples:
        >>> from symformer.positional import RoPE, RotaryPositional, rotary_parts
        >>> parts = rotary_parts()
        >>> parts["rope"] is RoPE, "sinusoidal" in parts  # additive parts are not rotary
        (True, False)
        >>> all(issubclass(cls, RotaryPositional) for cls in parts.values())
        True
    """
    out = {}
    for name in POSITIONAL.registered():
        obj = POSITIONAL.get(name)
        if isinstance(obj, type) and issubclass(obj, RotaryPositional):
            out[name] = obj
    return out


__all__ = [
    "rotary_parts",
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
    "grid_positions",
    "with_prefix",
    "from_timm_state_dict",
    "from_rope_vit",
    "timm_axial",
    "rope_vit_axial",
]
