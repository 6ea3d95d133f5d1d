"""Teleportation in the symformer Trainer: `TeleportCallback` hands the Teleporter (teleporter.py) what the Trainer
holds at each step (its model, optimizer, step, batch loss and precision) and writes its records to the run's
metric history."""

from __future__ import annotations

import contextlib

from torch import nn

from symformer.models import penalties
from symformer.registry import CALLBACKS
from symformer.teleport.teleporter import Teleporter, deprecated_step
from symformer.train.callbacks import Callback


class TeleportCallback(Callback):
    """Trainer callback: teleport on the scheduled steps (on_after_backward, before clipping and the step). The options
    are the Teleporter's (alpha, samples, epoch, start_step, every, steps, seed, method, state_policy, ffn, zhao_lr,
    zhao_steps, positions, max_cumulative_ratio (1.05 by default; None: the paper's unguarded Alg. 1), attention, and
    the deprecated step). Every teleport step adds a record to `log` and a row {"step", "teleport": {...}} to the
    trainer's metric history (metrics.jsonl)."""

    def __init__(
        self, model: nn.Module | None = None, start_step: int | None = None, step: int | None = None, **options
    ):
        self.teleporter = Teleporter(model, start_step=deprecated_step(step, start_step), **options)

    @property
    def group(self):
        """The symmetry group acted on (teleport.SymmetryGroup)."""
        return self.teleporter.group

    @property
    def log(self) -> list[dict]:
        """One record per teleport step (Teleporter.step)."""
        return self.teleporter.log

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
        autocast = getattr(trainer, "autocast", contextlib.nullcontext)  # the trainer's precision (bf16-autocast)

        def loss_fn():  # the trainer's batch loss, positional penalties included (invariant: they see no Q/K/V/O)
            with autocast():
                loss = trainer.task.loss(trainer.model, trainer.train_data, idx)
                return loss + penalties(trainer.raw_model)

        last = getattr(trainer, "last_loss", None)
        rec = self.teleporter.step(
            trainer.raw_model,
            trainer.optimizer,
            step,
            loss_fn,
            loss=None if last is None else float(last),
            loss_dtype=getattr(trainer, "compute_dtype", None),
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
