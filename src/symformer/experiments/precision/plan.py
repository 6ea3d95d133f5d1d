"""The plan of experiment `precision`: the dtypes, routes and goals (fixed before any run), and what one run
checks (seeds, parts, Hugging Face families, training combinations)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from symformer.experiments.precision.hf_checks import HF_PRECISION_FAMILIES
from symformer.experiments.precision.rotation_checks import ADDITIVE_PARTS, rotation_arms
from symformer.experiments.precision.train_checks import train_combinations

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
ROUTES = ("built", "cast", "autocast")
TRAIN_ROUTES = ("autocast", "cast")
ROTATION_GOAL, HF_GOAL, TRAIN_GOAL = 1.0, 1.5, 0.02
GEOMETRIES = {"1d": (1, 8192), "2d": (2, 4096)}  # (coord_dim, positions): token indices 0-8191, a 64 x 64 grid
HF_ROUTES = ("config", "cast")  # _from_config(cfg, dtype=...) as from_pretrained builds it, or .to(dtype)
HF_TOKENS = 2048


@dataclass(frozen=True)
class PrecisionPlan:
    seeds: tuple[int, ...]
    parts: tuple[str, ...]
    families: tuple[str, ...]
    combinations: tuple[tuple[str, str], ...]

    @classmethod
    def for_run(cls, quick: bool, seed: int, parts=None, families=None, combinations=None) -> "PrecisionPlan":
        """Quick: one seed; full: three. Every part, family and combination unless narrowed (the tests)."""
        return cls(
            seeds=(seed,) if quick else tuple(range(seed, seed + 3)),
            parts=tuple(rotation_arms() + ADDITIVE_PARTS if parts is None else parts),
            families=tuple(HF_PRECISION_FAMILIES if families is None else families),
            combinations=tuple(tuple(c) for c in (train_combinations() if combinations is None else combinations)),
        )
