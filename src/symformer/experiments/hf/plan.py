"""The plan of experiment `hf`: the sizes of its character-LM training runs (quick or full), typed. The parity,
FAVOR+ and invariance checks run fixed tiny models (checks.py) in either mode."""

from __future__ import annotations

from dataclasses import dataclass

from symformer.integrations.hf.lm import TinyLlama


@dataclass(frozen=True)
class HfPlan:
    block: int  # characters per training sequence
    max_chars: int | None  # of tiny Shakespeare read (None: all of it)
    spec: TinyLlama  # the Llama trained per positional part
    steps: int
    batch_size: int
    eval_batches: int  # validation batches at each evaluation

    @property
    def eval_every(self) -> int:
        """Three evaluations per run."""
        return max(self.steps // 3, 1)

    @classmethod
    def for_run(cls, quick: bool) -> "HfPlan":
        if quick:
            return cls(
                block=64,
                max_chars=300_000,
                spec=TinyLlama(hidden_size=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=160),
                steps=60,
                batch_size=8,
                eval_batches=4,
            )
        return cls(block=128, max_chars=None, spec=TinyLlama(), steps=600, batch_size=16, eval_batches=32)
