"""Experiment `teleport`: symmetry groups of attention for every positional encoding, and teleportation at the
paper's operating point. plan: the typed plan and the arms; exactness: (a), (b) in float64; runs: the recorded
training functions; training: the operating point, lr selection and ViT arms as jobs; metrics, claims, figures and
report: what a run reports."""

from __future__ import annotations

from symformer.experiments.teleport.exactness import closed_form_checks, invariance_checks  # noqa: F401
from symformer.experiments.teleport.plan import TeleportPlan  # noqa: F401
from symformer.experiments.teleport.report import run  # noqa: F401
from symformer.experiments.teleport.runs import (  # noqa: F401
    choose_alpha,
    epochs_to_reach,
    speedup_pct,
)
