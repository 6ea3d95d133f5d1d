"""Teleportation in the symformer Trainer: `TeleportCallback` hands the Teleporter (teleporter.py, through the
adapter it shares with the plain loop: adapter.py) what the Trainer holds at each step (its model, optimizer, step,
batch loss and precision) and writes its records to the run's metric history."""

from __future__ import annotations

import contextlib

from torch import nn

from symformer.registry import CALLBACKS
from symformer.teleport.adapter import TeleportAdapter
from symformer.train.callbacks import Callback


class TeleportCallback(TeleportAdapter, Callback):
    """Trainer callback: teleport on the scheduled steps (on_after_backward, before clipping and the step). The options
    are the Teleporter's (alpha, samples, epoch, start_step, every, steps, seed, method, state_policy, ffn, zhao_lr,
    zhao_steps, positions, max_cumulative_ratio (1.05 by default; None: the paper's unguarded Alg. 1), attention, and
    the deprecated step). Every teleport step adds a record to `log` and a row {"step", "teleport": {...}} to the
    trainer's metric history (metrics.jsonl)."""

    def __init__(
        self, model: nn.Module | None = None, start_step: int | None = None, step: int | None = None, **options
    ):
        super().__init__(model, start_step, step, options)

    @property
    def seconds(self) -> float:
        """Time spent teleporting."""
        return self.teleporter.seconds

    def on_train_start(self, trainer) -> None:
        self.teleporter.bind(trainer.raw_model)
        self.teleporter.start(trainer.total_steps, trainer.steps_per_epoch, trainer.cfg.epochs)

    def on_after_backward(self, trainer, idx) -> None:
        step = trainer.state.step
        if self.teleporter.phase(step) is None:
            return
        last = getattr(trainer, "last_loss", None)
        rec = self.teleport(
            trainer.raw_model,
            trainer.optimizer,
            step,
            lambda: trainer.task.loss(trainer.model, trainer.train_data, idx),  # the trainer's batch loss
            loss=None if last is None else float(last),
            loss_dtype=getattr(trainer, "compute_dtype", None),
            precision=getattr(trainer, "autocast", contextlib.nullcontext),  # the trainer's precision (bf16-autocast)
        )
        log_row = getattr(trainer, "_log", None)  # the run's metric history (and metrics.jsonl when it has one)
        if callable(log_row):
            log_row({"step": step, "teleport": {k: v for k, v in rec.items() if k != "step"}})

    def state_dict(self) -> dict:
        return self.teleporter.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.teleporter.load_state_dict(state)


@CALLBACKS.register("teleport")
def make_teleport(model: nn.Module | None = None, **kw) -> TeleportCallback:
    """`symformer train --teleport alpha=0.65,samples=16,epoch=1,steps=4` (guarded at 1.05 by default;
    `max_cumulative_ratio=null` or `=Infinity` for the paper's unguarded Alg. 1)."""
    return TeleportCallback(model=model, **kw)


__all__ = ["TeleportCallback", "make_teleport"]
