"""The Teleporter: Alg. 1 on a schedule, with the ratio guard of App. G and a log, called once per optimizer step
from any training loop (after backward, before the optimizer's step). It knows nothing of a trainer: the Trainer's
callback (callback.TeleportCallback) and a plain loop (plain_loop.PlainLoopTeleport) both hand it the model, the
optimizer, the step and a closure computing the batch loss.

Ratio guard (App. G, "the cumulative ratio of gradient norms (after teleportation / before teleportation) across
consecutive steps should remain below 1.05 for small datasets"): within one run of consecutive teleport steps the
product of the applied steps' ||grad after|| / ||grad before|| is kept at or below `max_cumulative_ratio`; a candidate
that would push it higher is not applied (the next best is tried; if none fits, the step is not teleported).
max_cumulative_ratio=None (or inf) is the paper's unguarded Alg. 1.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from symformer._rng import seeded_generator
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.teleport.groups import SymmetryGroup, symmetry_group
from symformer.teleport.step import STATE_POLICIES, teleport_step, zhao_teleport


@dataclass(frozen=True)
class TeleportSchedule:
    """Runs ("phases") of `consecutive` teleport steps: one starting at the first step of each epoch in `epochs`
    (1-based, as the paper's "teleportation is applied once at epoch 1"), or one starting at global optimizer step
    `step` (0-based: the START of the phase, not a period) and, with `every`, one more every `every` steps after it
    (step, step + every, ...; a phase the run's end cuts short keeps the steps it has)."""

    epochs: tuple[int, ...] = (1,)
    step: int | None = None
    consecutive: int = 4
    every: int | None = None

    def __post_init__(self) -> None:
        check_int("steps", self.consecutive, 1)
        if self.step is not None:
            check_int("start_step", self.step, 0)
        for e in self.epochs:
            check_int("epoch", e, 1)
        if self.every is not None:
            if self.step is None:
                fail("every", self.every, "a period together with start_step (the first phase's step)")
            check_int("every", self.every, self.consecutive)  # phases do not overlap

    def starts(self, steps_per_epoch: int) -> list[int]:
        """The first step of each phase (with `every`: of the first phase only; phase_start places the others)."""
        if self.step is not None:
            return [self.step]
        return [(e - 1) * steps_per_epoch for e in self.epochs]

    def validate(self, total_steps: int, steps_per_epoch: int, n_epochs: int) -> None:
        """A schedule beyond the end of the run is an error, not a silent no-op; so is a run of consecutive
        steps longer than an epoch (App. G: |K| is a few % of an epoch)."""
        if self.consecutive > steps_per_epoch:
            fail(
                "steps",
                self.consecutive,
                f"at most the {steps_per_epoch} steps of one epoch "
                f"({self.consecutive} consecutive teleport steps > {steps_per_epoch} steps per epoch)",
            )
        if self.step is None:
            for e in self.epochs:
                if e > n_epochs:
                    fail("epoch", e, f"an epoch within the run (1..{n_epochs})")
        for s in self.starts(steps_per_epoch):
            if s + self.consecutive > total_steps:
                name = "start_step" if self.step is not None else "steps"
                fail(name, s + self.consecutive, f"teleport steps ending within the run's {total_steps} steps")

    def contains(self, step: int, steps_per_epoch: int) -> bool:
        return self.phase_start(step, steps_per_epoch) is not None

    def phase_start(self, step: int, steps_per_epoch: int) -> int | None:
        """First step of the run of consecutive teleport steps that holds `step` (None: not a teleport step)."""
        if self.every is not None:
            s = self.step + (step - self.step) // self.every * self.every
            return s if self.step <= step < s + self.consecutive else None
        return next((s for s in self.starts(steps_per_epoch) if s <= step < s + self.consecutive), None)


def deprecated_step(step: int | None, start_step: int | None, stacklevel: int = 3) -> int | None:
    """start_step from the old option `step` (read by users as a period, which it never was): a DeprecationWarning
    that says what it means."""
    if step is None:
        return start_step
    if start_step is not None:
        fail("step", step, f"no step= next to start_step={start_step} (step is the old name of start_step)")
    warnings.warn(
        f"teleport option step={step} is deprecated: it means start_step={step}, the 0-based optimizer "
        f"step where the first run of `steps` consecutive teleport steps starts (not a period; every= "
        f"gives one)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return step


def schedule_from(epoch, start_step: int | None, every: int | None, steps: int) -> TeleportSchedule:
    """The schedule of TeleportCallback / PlainLoopTeleport options: every= without start_step starts at step 0."""
    if every is not None and start_step is None:
        start_step = 0
    epochs = () if start_step is not None else ((epoch,) if isinstance(epoch, int) else tuple(epoch or (1,)))
    return TeleportSchedule(epochs=epochs, step=start_step, consecutive=steps, every=every)


DEFAULT_MAX_CUMULATIVE_RATIO = 1.05  # App. G: cumulative ratio below 1.05 on small data sets


def check_max_cumulative_ratio(value: object) -> float:
    """The ratio guard's bound: a number > 1; None, inf or "inf"/"none" give the paper's unguarded Alg. 1."""
    if value is None or (isinstance(value, str) and value.lower() in ("none", "inf", "infinity")):
        return math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf:
        return math.inf
    return check_float("max_cumulative_ratio", value, 1.0, low_open=True)


OPTIONS = (
    "alpha",
    "samples",
    "epoch",
    "start_step",
    "every",
    "steps",
    "seed",
    "method",
    "state_policy",
    "ffn",
    "zhao_lr",
    "zhao_steps",
    "max_cumulative_ratio",
    "attention",
)


class Teleporter:
    """Teleportation over a run (module docstring). model: the model whose group to build now (None: at the first
    step, or give `group`); positions / attention: symmetry_group's. Schedule (TeleportSchedule): `steps` consecutive
    teleport steps from the first step of epoch `epoch`, or from optimizer step `start_step` (0-based) and, with
    `every`, again every `every` steps; `step` is the deprecated name of start_step. method: "sample" (Alg. 1, closed-
    form norms), "brute" (the same with forward + backward per candidate), "zhao" (Zhao et al.'s ascent, unguarded).
    Every teleport step appends a record to `log`: reference norm, chosen norm, candidates beating the reference,
    applied or not, refused by the guard or not, cumulative ratio.

        tele = Teleporter(model, alpha=0.65, samples=16, start_step=10, steps=4)
        tele.start(total_steps=300, steps_per_epoch=100)
        for step, batch in enumerate(batches):
            loss = loss_of(model, batch); loss.backward()
            tele.step(model, optimizer, step, lambda: loss_of(model, batch), loss=loss.item())
            optimizer.step(); optimizer.zero_grad()
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        alpha: float = 0.65,
        samples: int = 16,
        epoch: int | list[int] | None = 1,
        start_step: int | None = None,
        every: int | None = None,
        steps: int = 4,
        seed: int = 0,
        method: str = "sample",
        state_policy: str = "keep",
        ffn: bool = False,
        zhao_lr: float = 1e-4,
        zhao_steps: int = 10,
        positions: torch.Tensor | None = None,
        max_cumulative_ratio: float | None = DEFAULT_MAX_CUMULATIVE_RATIO,
        attention: list | None = None,
        step: int | None = None,
        group: SymmetryGroup | None = None,
        **unknown: object,
    ):
        if unknown:
            fail("teleport option", sorted(unknown), f"options among {', '.join(OPTIONS)}")
        self.alpha = check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)  # radius of B_G(alpha)
        self.samples = check_int("samples", samples, 1)
        self.method = check_choice("method", method, ("sample", "zhao", "brute"))
        self.state_policy = check_choice("state_policy", state_policy, STATE_POLICIES)
        self.max_cumulative_ratio = check_max_cumulative_ratio(max_cumulative_ratio)
        self.ffn = bool(ffn)
        self.zhao_lr, self.zhao_steps = zhao_lr, check_int("zhao_steps", zhao_steps, 1)
        self.schedule = schedule_from(epoch, deprecated_step(step, start_step), every, steps)
        self.seed = check_int("seed", seed, 0)
        self.gen = seeded_generator(seed)
        self.positions, self.attention = positions, attention
        if group is not None and not isinstance(group, SymmetryGroup):
            fail("group", type(group).__name__, "a teleport SymmetryGroup (or None)", TypeError)
        self.group = group
        if model is not None:
            self.bind(model)
        self.log: list[dict] = []
        self.seconds = 0.0
        self.steps_per_epoch: int | None = None
        self._phase: int | None = None  # first step of the current run of consecutive teleport steps
        self._cum = 1.0  # its cumulative ||grad after|| / ||grad before|| so far

    @property
    def guarded(self) -> bool:
        return math.isfinite(self.max_cumulative_ratio)

    def bind(self, model: nn.Module) -> SymmetryGroup:
        """The group acted on: built from `model` the first time (symmetry_group with the positions, ffn and attention
        options), the same afterwards."""
        if self.group is None:
            self.group = symmetry_group(model, self.positions, ffn=self.ffn, attention=self.attention)
        return self.group

    def start(self, total_steps: int, steps_per_epoch: int, epochs: int | None = None) -> None:
        """The run's length: a schedule beyond its end is an error (TeleportSchedule.validate). epochs: default
        ceil(total_steps / steps_per_epoch)."""
        total = check_int("total_steps", total_steps, 1)
        spe = check_int("steps_per_epoch", steps_per_epoch, 1)
        epochs = -(-total // spe) if epochs is None else check_int("epochs", epochs, 1)
        self.schedule.validate(total, spe, epochs)
        self.steps_per_epoch = spe

    def phase(self, step: int) -> int | None:
        """First step of the run of consecutive teleport steps holding `step` (None: not a teleport step)."""
        if self.steps_per_epoch is None:
            fail("Teleporter", "not started", "start(total_steps, steps_per_epoch) before the first step")
        return self.schedule.phase_start(check_int("step", step, 0), self.steps_per_epoch)

    def step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        step: int,
        loss_fn: Callable[[], torch.Tensor],
        loss: float | None = None,
        loss_dtype: torch.dtype | None = None,
    ) -> dict | None:
        """Call with the gradient of the current batch in .grad, before the optimizer steps: on a scheduled step,
        teleport (parameters, .grad and the optimizer state move together) and return the step's record (also
        appended to `log`); None on other steps. loss_fn() computes the batch loss at the current parameters (the
        invariance check and the brute-force norms call it); loss: that loss at theta when the caller has it (saves a
        forward pass); loss_dtype: the dtype loss_fn computes in where lower than the parameters' (autocast)."""
        phase = self.phase(step)
        if phase is None:
            return None
        if phase != self._phase:  # a new run of consecutive steps: the cumulative ratio starts afresh
            self._phase, self._cum = phase, 1.0
        self.bind(model)
        self.group.refresh()
        out = self._teleport(model, optimizer, loss_fn, loss, loss_dtype)
        if out.applied and out.ref_norm > 0:
            self._cum *= out.chosen_norm / out.ref_norm
        self.seconds += out.seconds
        rec = {
            "step": step,
            "phase_start": phase,
            "applied": out.applied,
            "ref_norm": out.ref_norm,
            "chosen_norm": out.chosen_norm,
            "best_norm": out.best_norm,
            "max_norm": out.max_norm,
            "n_better": out.n_better,
            "samples": self.samples,
            "skipped": out.skipped_invariance,
            "skipped_guard": out.skipped_guard,
            "rejected_by_guard": out.rejected_by_guard,
            "cum_ratio": self._cum,
            "seconds": out.seconds,
        }
        self.log.append(rec)
        return rec

    def _teleport(self, model, optimizer, loss_fn, loss, loss_dtype):
        if self.method == "zhao":
            return zhao_teleport(
                model, self.group, loss_fn, self.zhao_lr, self.zhao_steps, optimizer, self.state_policy, loss_dtype
            )
        return teleport_step(  # the per-step bound that keeps the cumulative ratio within max_cumulative_ratio
            model,
            self.group,
            loss_fn,
            self.alpha,
            self.samples,
            self.gen,
            optimizer,
            self.state_policy,
            self.ffn,
            brute_force=self.method == "brute",
            loss_before=loss,
            max_ratio=self.max_cumulative_ratio / self._cum,
            loss_dtype=loss_dtype,
        )

    def state_dict(self) -> dict:
        return {
            "gen": self.gen.get_state(),
            "log": list(self.log),
            "seconds": self.seconds,
            "phase": self._phase,
            "cum": self._cum,
        }

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.log, self.seconds = list(state["log"]), state["seconds"]
        self._phase, self._cum = state.get("phase"), state.get("cum", 1.0)


__all__ = [
    "DEFAULT_MAX_CUMULATIVE_RATIO",
    "TeleportSchedule",
    "Teleporter",
    "check_max_cumulative_ratio",
    "deprecated_step",
    "schedule_from",
]
