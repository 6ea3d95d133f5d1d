"""What the two ways to drive a Teleporter (teleporter.py) share: `TeleportCallback` (callback.py, the symformer
Trainer) and `PlainLoopTeleport` (plain_loop.py, a user's own loop) each build one Teleporter from the same options,
expose its group and log, and at a scheduled step hand it the model, the optimizer, the step and the batch loss with
the positional penalties added, as the Trainer's loss has them. Each adapter only says where these come from in its
loop."""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import torch
from torch import nn

from symformer.models import penalties
from symformer.teleport.teleporter import Teleporter, deprecated_step


class TeleportAdapter:
    """One Teleporter built from `options` (the Teleporter's; `step` is the deprecated name of start_step, whose
    warning points at the line that built the adapter), its `group` and `log`, and `teleport` for one optimizer
    step."""

    def __init__(self, model: nn.Module | None, start_step: int | None, step: int | None, options: dict):
        # stacklevel 4: deprecated_step, this __init__, the adapter's own __init__, the user's line
        self.teleporter = Teleporter(model, start_step=deprecated_step(step, start_step, stacklevel=4), **options)

    @property
    def group(self):
        """The symmetry group acted on (teleport.SymmetryGroup)."""
        return self.teleporter.group

    @property
    def log(self) -> list[dict]:
        """One record per teleport step (Teleporter.step)."""
        return self.teleporter.log

    def teleport(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        step: int,
        batch_loss: Callable[[], torch.Tensor],
        loss: float | None,
        loss_dtype: torch.dtype | None,
        precision: Callable[[], ContextManager] = contextlib.nullcontext,
    ) -> dict | None:
        """Teleporter.step on `model` with the loss `batch_loss()` + the positional penalties of `model` (invariant:
        they see no Q/K/V/O), both computed under `precision()` (the Trainer's autocast; none in a plain loop)."""

        def loss_fn():
            with precision():
                return batch_loss() + penalties(model)

        return self.teleporter.step(model, optimizer, step, loss_fn, loss=loss, loss_dtype=loss_dtype)


__all__ = ["TeleportAdapter"]
