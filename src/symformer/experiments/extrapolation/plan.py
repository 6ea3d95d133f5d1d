"""The plan of experiment `extrapolation`: which parts, seeds, model and budget (a typed, validated config)."""

from __future__ import annotations

from dataclasses import dataclass, field

import symformer.positional  # noqa: F401  (registers the parts)
from symformer._validation import check_float, check_int, fail
from symformer.positional import rotary_parts
from symformer.registry import POSITIONAL


def every_part() -> tuple[str, ...]:
    """The baselines without a rotation (none, sinusoidal, learned), then every registered rotary part
    (positional.rotary_parts(), registration order), read when called."""
    return ("none", "sinusoidal", "learned", *rotary_parts())


PARTS = every_part()  # the parts registered with symformer.positional
DATA = "tinyshakespeare.txt"
PAPER_SETTING = "none: no paper in this project makes a length-extrapolation claim (our own measurement)"


@dataclass(frozen=True)
class ExtrapolationConfig:
    parts: tuple[str, ...] = field(default_factory=every_part)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 2000
    batch: int = 32
    lr: float = 3e-3
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    train_context: int = 64
    eval_contexts: tuple[int, ...] = (64, 128, 256, 512)
    eval_chars: int | None = None  # cap on the validation characters scored (None: the whole split)

    def __post_init__(self) -> None:
        for name in ("parts", "seeds", "eval_contexts"):
            if not isinstance(getattr(self, name), tuple) or not getattr(self, name):
                fail(name, getattr(self, name), "a non-empty tuple")
        for p in self.parts:
            if p not in POSITIONAL.names():
                fail("parts", p, f"positional parts among {', '.join(POSITIONAL.names())}")
        for s in self.seeds:
            check_int("seeds", s, 0)
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_int("train_context", self.train_context, 2)
        for c in self.eval_contexts:
            check_length("eval_contexts", c)
        if self.eval_chars is not None:
            check_int("eval_chars", self.eval_chars, max(self.eval_contexts) + 1)

    def run_key(self, part: str, seed: int) -> str:
        """The record name of one (part, seed) run: runs/lm_<part>_s<seed>_t<steps>.json."""
        return f"lm_{part}_s{seed}_t{self.steps}"

    @classmethod
    def from_dict(cls, d: dict) -> "ExtrapolationConfig":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def check_length(name: str, v) -> int:
    """A context length: a positive integer (a float, a bool or a string is a ValueError too)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        fail(name, v, "a positive integer number of tokens")
    return v


def config_for(quick: bool, seed: int = 0) -> ExtrapolationConfig:
    """Quick (a smoke run): rope and string, 1 seed, a small model and budget, 16k validation characters.
    Full: every part, 3 seeds, the same budget for each. The seeds start at `seed` (the run's --seed)."""
    check_int("seed", seed, 0)
    if quick:
        return ExtrapolationConfig(
            parts=("rope", "string"), seeds=(seed,), steps=600, batch=16, d_model=32, n_heads=2, eval_chars=16384
        )
    return ExtrapolationConfig(seeds=tuple(seed + s for s in ExtrapolationConfig.seeds))
