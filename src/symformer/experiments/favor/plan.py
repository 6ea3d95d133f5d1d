"""The plan of experiment `favor`: the Monte Carlo grid, the error-vs-m sizes and the char-LM budgets, typed."""

from __future__ import annotations

import math
from dataclasses import dataclass

PAPER = "ESPR derivation, Tier 7"
Z_MAX = 4.5  # goal: max |z| <= 4.5 over the grid
VAR_TOL = 0.15  # goal: variance relative error <= 0.15
ESTIMABLE_SE = 0.03  # a point is estimable when the predicted relative s.e. of its sample variance is <= 3%
ROUNDING = 1e-12  # relative floating-point floor of the Monte Carlo mean (float64 sums of 1e5-1e6 terms)
INPUT_STD = 0.4  # q, k entries of the error-vs-m inputs: |q^|^2 = INPUT_STD^2 sqrt(Dh) = 1.28 for Dh = 64
N_FEATURES = 64  # random features per layer of the char LM
REDRAW_EVERY = 100  # optimizer steps between feature redraws (performer-pytorch's feature_redraw_interval: 1000)
BPC_GAP = 0.1  # ours: favor bpc <= softmax bpc + 0.1 at the larger budget


@dataclass(frozen=True)
class FavorPlan:
    """What one run of `favor` computes; `for_run(quick, seed)` gives the registered quick and full plans."""

    seed: int = 0
    quick: bool = True
    mc_dim: int = 16
    mc_draws: int = 100_000
    mc_norms: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5)
    mc_angles: tuple[float, ...] = (0.0, math.pi / 3, math.pi / 2, 2 * math.pi / 3, math.pi)
    error_ms: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    error_tokens: int = 128
    error_seeds: int = 6
    error_head_dim: int = 64
    lm_epochs: tuple[int, int] = (1, 2)  # the smaller and the larger training budget
    lm_max_chars: int | None = 200_000

    @property
    def n_rf(self) -> tuple[int, int]:
        """Features per mean in the variance check: one draw, and one whole orthogonal block."""
        return (1, self.mc_dim)

    @classmethod
    def for_run(cls, quick: bool, seed: int) -> "FavorPlan":
        if quick:
            return cls(seed=seed, quick=True)
        return cls(
            seed=seed,
            quick=False,
            mc_draws=1_000_000,
            error_tokens=512,
            error_seeds=20,
            lm_epochs=(3, 6),
            lm_max_chars=None,
        )
