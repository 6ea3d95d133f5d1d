"""Symmetry teleportation for transformers: the symmetry group of any symformer model (no PE, additive PE,
RoPE in both pairings, STRING, ESPR; ReLU FFNs; head permutations) or of a model whose attention layers the user
declares (AttentionLayer), and Alg. 1 as a Trainer callback and in a plain training loop (PlainLoopTeleport)."""

from __future__ import annotations

from symformer.teleport.declare import AttentionLayer
from symformer.teleport.groups import GroupElement, SymmetryGroup, symmetry_group
from symformer.teleport.plain_loop import PlainLoopTeleport
from symformer.teleport.qk_groups import (
    BlockGroup,
    CommutantGroup,
    DiagonalGroup,
    HGroup,
    QKGroup,
    TrivialGroup,
    commutant_basis,
    diagonal_blocks,
    relative_rotations,
)
from symformer.teleport.teleport import (
    DEFAULT_MAX_CUMULATIVE_RATIO,
    STATE_POLICIES,
    TeleportCallback,
    TeleportOutcome,
    TeleportSchedule,
    brute_force_norms,
    closed_form_norms,
    make_teleport,
    teleport_step,
    update_optimizer_state,
    zhao_teleport,
)

__all__ = [
    "AttentionLayer",
    "PlainLoopTeleport",
    "BlockGroup",
    "CommutantGroup",
    "DiagonalGroup",
    "GroupElement",
    "HGroup",
    "QKGroup",
    "SymmetryGroup",
    "TrivialGroup",
    "commutant_basis",
    "diagonal_blocks",
    "relative_rotations",
    "symmetry_group",
    "DEFAULT_MAX_CUMULATIVE_RATIO",
    "STATE_POLICIES",
    "TeleportCallback",
    "TeleportOutcome",
    "TeleportSchedule",
    "brute_force_norms",
    "closed_form_norms",
    "make_teleport",
    "teleport_step",
    "update_optimizer_state",
    "zhao_teleport",
]
