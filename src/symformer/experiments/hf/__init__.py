"""Experiment `hf`: symformer's parts inside Hugging Face models built from configs. families: the tiny model of
every family (views of the family records); checks: parity, FAVOR+ and teleportation invariance; report: the
training runs and the registered run."""

from __future__ import annotations

from symformer.experiments.hf.checks import teleport_invariance  # noqa: F401
from symformer.experiments.hf.families import FAMILY_MODELS, POST_NORM_FAMILIES, QK_NORM_FAMILIES  # noqa: F401
from symformer.experiments.hf.report import run  # noqa: F401
