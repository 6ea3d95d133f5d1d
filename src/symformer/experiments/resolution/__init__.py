"""Experiment `resolution`: ViTs trained on sklearn digits upsampled to 16 x 16 (a 4 x 4 grid of 4 x 4 patches),
tested on smaller and larger grids (the test images upsampled to each size), for RoPE-Axial and RoPE-Mixed as rope-vit
defines them, STRING, ESPR and learned absolute positions; with the new grid's own positions and with positions
rescaled to the training range. rope-vit's framing (RoPE-Mixed extrapolates best) is the claim checked, paired by
seed. Every (method, seed) is one `Job` (records under runs/, `--resume`, `--jobs`)."""

from __future__ import annotations

from symformer.experiments.resolution.claims import claims, summarize  # noqa: F401
from symformer.experiments.resolution.plan import METHODS, ResolutionConfig, config_for, method_config  # noqa: F401
from symformer.experiments.resolution.report import plot, run  # noqa: F401
from symformer.experiments.resolution.runs import evaluate, rescaled_learned, vit_job  # noqa: F401
