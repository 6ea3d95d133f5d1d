"""Teleportation in a user's own training loop (no symformer Trainer): `PlainLoopTeleport` drives the Teleporter
(teleporter.py, through the adapter it shares with the Trainer's callback: adapter.py) from the calls a loop already
has (backward, optimizer step, zero_grad)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from symformer._validation import check_int
from symformer.teleport.adapter import TeleportAdapter


class PlainLoopTeleport(TeleportAdapter):
    """Teleport a model in a plain training loop: a symformer model, one with declared attention layers
    (`attention=[AttentionLayer(...)]`, teleport.declare), or any model whose group is given (`group=`: a Hugging Face
    model's from symformer.integrations.hf.symmetry_group; integrations.hf.HFTeleport does this for the supported
    families):

        tele = PlainLoopTeleport(model, optimizer, loss_fn, total_steps=300, start_step=10, every=100, steps=4)
        for step, batch in enumerate(batches):
            loss = loss_fn(model, batch); loss.backward()
            tele.after_backward(step, batch, loss)  # may teleport: parameters and .grad move together
            optimizer.step(); optimizer.zero_grad()

    Schedule: `steps` consecutive teleport steps starting at optimizer step `start_step` (0-based) and, with
    `every`, again at start_step + every, + 2 every, ...; or from the first step of epoch `epoch` (steps_per_epoch,
    default total_steps, places it). `step=` is the deprecated name of start_step (DeprecationWarning).
    loss_fn(model, batch) -> scalar loss; other options go to the Teleporter (alpha, samples, seed, method,
    state_policy, ffn, max_cumulative_ratio, positions, group, ...). compute_dtype: the dtype loss_fn computes in where
    it is lower than the parameters' (a loss_fn under torch.autocast(dtype=torch.bfloat16) over float32 weights), so
    that the runtime invariance check allows its rounding; a model cast to 16 bits needs none."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss_fn: Callable[[nn.Module, object], torch.Tensor],
        total_steps: int,
        *,
        start_step: int | None = None,
        steps_per_epoch: int | None = None,
        compute_dtype: torch.dtype | None = None,
        step: int | None = None,
        **options,
    ):
        check_int("total_steps", total_steps, 1)
        spe = check_int("steps_per_epoch", steps_per_epoch if steps_per_epoch is not None else total_steps, 1)
        super().__init__(model, start_step, step, options)
        self.teleporter.start(total_steps, spe)
        self.model, self.optimizer, self.loss_fn, self.compute_dtype = model, optimizer, loss_fn, compute_dtype

    def after_backward(self, step: int, batch, loss: torch.Tensor | float | None = None) -> dict | None:
        """Call after loss.backward() and before optimizer.step(); `step` is the loop's 0-based optimizer step, `batch`
        what loss_fn takes, `loss` (optional) this batch's loss. Returns the teleport record (None: not scheduled)."""
        check_int("step", step, 0)
        last = None if loss is None else float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
        model, optimizer = self.model, self.optimizer
        return self.teleport(model, optimizer, step, lambda: self.loss_fn(model, batch), last, self.compute_dtype)


__all__ = ["PlainLoopTeleport"]
