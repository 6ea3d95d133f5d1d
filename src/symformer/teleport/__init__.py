"""Symmetry teleportation for transformers: the symmetry group of any symformer model (no PE, additive PE,
RoPE in both pairings, STRING, ESPR; ReLU FFNs; head permutations) or of a model whose attention layers the user
declares (AttentionLayer), as a product of components (one per kind of symmetry), and Alg. 1 as a Teleporter driven
by a Trainer callback or a plain training loop (PlainLoopTeleport)."""

from __future__ import annotations

from symformer.teleport.attention_parts import HeadPermutation, NormScaling, QKFactor, VOFactor, attention_parts
from symformer.teleport.callback import TeleportCallback, make_teleport
from symformer.teleport.component import AttentionSite, Component
from symformer.teleport.declare import AttentionLayer
from symformer.teleport.groups import (
    GroupElement,
    SymmetryGroup,
    group_builders,
    register_group_builder,
    symmetry_group,
)
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
from symformer.teleport.step import (
    STATE_POLICIES,
    TeleportOutcome,
    brute_force_norms,
    closed_form_norms,
    teleport_step,
    update_optimizer_state,
    zhao_teleport,
)
from symformer.teleport.teleporter import DEFAULT_MAX_CUMULATIVE_RATIO, Teleporter, TeleportSchedule
from symformer.teleport.weight_parts import ExpertScaling, FusedRows, MLPScaling

__all__ = [
    "AttentionLayer",
    "AttentionSite",
    "Component",
    "ExpertScaling",
    "FusedRows",
    "HeadPermutation",
    "MLPScaling",
    "NormScaling",
    "PlainLoopTeleport",
    "QKFactor",
    "VOFactor",
    "attention_parts",
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
    "group_builders",
    "register_group_builder",
    "relative_rotations",
    "symmetry_group",
    "DEFAULT_MAX_CUMULATIVE_RATIO",
    "STATE_POLICIES",
    "TeleportCallback",
    "TeleportOutcome",
    "TeleportSchedule",
    "Teleporter",
    "brute_force_norms",
    "closed_form_norms",
    "make_teleport",
    "teleport_step",
    "update_optimizer_state",
    "zhao_teleport",
]
