"""Teleportation (Alg. 1, "Teleportation Training with Sampling Minimal Perturbations") as a Trainer callback,
with candidate gradient norms in closed form, a brute-force reference, and the Zhao et al. gradient-ascent
baseline.

At a scheduled step, with the gradient of the current batch present: draw M elements near the identity
(radius alpha), compute ||grad L(g_i theta)|| for each, and if more than M/2 beat ||grad L(theta)|| (eq. (15)-(16),
the majority rule) apply the best one, theta <- g* theta, before the ordinary optimizer step. Since the loss is
invariant and the action linear, grad L(g theta) is a fixed linear image of grad L(theta) (NOTES 4), so all
M norms and the new gradient come from the one backward pass the trainer already did.

The callback adds the ratio guard of App. G (the cumulative ||grad after|| / ||grad before|| over a run of
consecutive teleport steps stays <= 1.05 on small data sets) on top of the majority rule: with U[1-alpha,
1+alpha] diagonal samples nearly every candidate raises the norm (E[u^-2] > 1), so the majority rule alone
almost never refuses a step (NOTES 4). The guard bounds the sampling methods ("sample", "brute"); the Zhao
et al. ascent is recorded but not bounded.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from symformer._validation import check_choice, check_float, check_int, fail
from symformer.models import penalties
from symformer.registry import CALLBACKS
from symformer.teleport.groups import GroupElement, SymmetryGroup, symmetry_group
from symformer.train.callbacks import Callback

STATE_POLICIES = ("keep", "reset", "transform")


# ---------------------------------------------------------------- gradient norms
def criterion_parameters(model: nn.Module, group: SymmetryGroup) -> list[nn.Parameter]:
    """Parameters whose gradient norm the teleport criterion measures (eq. (13)): all trainable ones except
    those the group depends on (see SymmetryGroup.dependent_parameters; none for APE / RoPE)."""
    dep = {id(p) for p in group.dependent_parameters()}
    return [p for p in model.parameters() if p.requires_grad and id(p) not in dep]


def current_grads(model: nn.Module, group: SymmetryGroup) -> dict[int, torch.Tensor]:
    return {id(p): p.grad for p in criterion_parameters(model, group) if p.grad is not None}


def grad_sq_norm(model: nn.Module, group: SymmetryGroup) -> float:
    return float(sum(g.detach().to(torch.float64).pow(2).sum() for g in current_grads(model, group).values()))


def closed_form_norms(model: nn.Module, group: SymmetryGroup, cands: GroupElement) -> torch.Tensor:
    """||grad L(g_i theta)|| for every candidate from the gradient already in .grad (M,)."""
    grads = current_grads(model, group)
    acted = {id(p) for p in group.parameters()}
    rest = sum(float(g.detach().to(torch.float64).pow(2).sum()) for k, g in grads.items() if k not in acted)
    return (group.candidate_sq_norms(grads, cands) + rest).clamp_min(0).sqrt()


def brute_force_norms(
    model: nn.Module, group: SymmetryGroup, cands: GroupElement, loss_fn: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """The paper's way: for each candidate apply it, run forward + backward, read the norm, restore."""
    saved = [p.detach().clone() for p in group.parameters()]
    old = {id(p): p.grad for p in model.parameters()}
    n = cands.qk[0].shape[0] if cands.qk else cands.ffn[0].shape[0]
    out = []
    try:
        for i in range(n):
            group.apply(model, group.pick(cands, i))
            grads = torch.autograd.grad(loss_fn(), criterion_parameters(model, group), allow_unused=True)
            out.append(math.sqrt(sum(float(g.to(torch.float64).pow(2).sum()) for g in grads if g is not None)))
            with torch.no_grad():
                for p, s in zip(group.parameters(), saved, strict=True):
                    p.copy_(s)
    finally:
        for p in model.parameters():
            p.grad = old[id(p)]
    return torch.tensor(out, dtype=torch.float64)


# ---------------------------------------------------------------- optimizer state
def _state_tensors(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], key: str) -> dict[int, torch.Tensor]:
    return {id(p): optimizer.state[p][key] for p in params if p in optimizer.state and key in optimizer.state[p]}


@torch.no_grad()
def update_optimizer_state(
    optimizer: torch.optim.Optimizer | None, group: SymmetryGroup, g: GroupElement, policy: str
) -> None:
    """keep: leave it (the paper); reset: zero the moments of acted-on params; transform: moments that live in
    gradient space (SGD momentum_buffer, Adam exp_avg) move like gradients; Adam's exp_avg_sq moves with the
    squared map, exact for the diagonal / per-pair-scaling elements the sampler draws."""
    check_choice("state_policy", policy, STATE_POLICIES)
    if optimizer is None or policy == "keep":
        return
    params = group.parameters()
    if policy == "reset":
        for p in params:
            for v in optimizer.state.get(p, {}).values():
                if isinstance(v, torch.Tensor) and v.shape == p.shape:
                    v.zero_()
        return
    for key in ("momentum_buffer", "exp_avg"):
        cur = _state_tensors(optimizer, params, key)
        for k, t in group.grad_action(g, cur).items():
            cur[k].copy_(t)
    sq = _state_tensors(optimizer, params, "exp_avg_sq")
    # second moments move with the squared map (A sqrt(v))^2: exact for the diagonal / per-pair-scaling
    # elements the sampler draws, an approximation for general elements; sqrt, action and square in float32 at
    # least, so a 16-bit state is rounded once (grad_action rounds the first moments once itself)
    wide = {k: v.to(torch.promote_types(v.dtype, torch.float32)).sqrt() for k, v in sq.items()}
    for k, t in group.grad_action(g, wide).items():
        sq[k].copy_(t.pow(2))


# ---------------------------------------------------------------- one teleport step
@dataclass
class TeleportOutcome:
    applied: bool
    ref_norm: float
    best_norm: float  # the applied candidate's norm; the largest candidate norm when none was applied
    n_better: int  # candidates whose norm beats the reference (eq. (15))
    skipped_invariance: int = 0
    seconds: float = 0.0
    max_norm: float = 0.0  # the largest candidate norm (the unguarded choice)
    skipped_guard: int = 0  # candidates beating the reference that the ratio guard refused (App. G)

    @property
    def chosen_norm(self) -> float:
        """||grad|| after this step's decision: the applied candidate's norm, else the reference."""
        return self.best_norm if self.applied else self.ref_norm

    @property
    def rejected_by_guard(self) -> bool:
        """The majority rule passed, but every candidate that beat the reference broke the ratio bound."""
        return not self.applied and self.skipped_guard > 0


def loss_tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for 'the loss did not change': sqrt(eps) of the parameter dtype."""
    return math.sqrt(torch.finfo(dtype).eps)


def teleport_step(
    model: nn.Module,
    group: SymmetryGroup,
    loss_fn: Callable[[], torch.Tensor],
    alpha: float,
    samples: int,
    gen: torch.Generator,
    optimizer: torch.optim.Optimizer | None = None,
    state_policy: str = "keep",
    ffn: bool = False,
    brute_force: bool = False,
    loss_before: float | None = None,
    max_ratio: float = math.inf,
    loss_dtype: torch.dtype | None = None,
) -> TeleportOutcome:
    """Alg. 1 lines 3-7 with the gradient of the current batch in .grad; on success the parameters become g* theta
    and .grad becomes grad L(g* theta) (closed form), ready for the optimizer step. loss_before: the batch loss
    at theta when the caller has it (saves one forward pass). max_ratio: the largest ||grad after|| / ||grad
    before|| this step may take (the ratio guard, App. G); candidates above it are refused and the next best
    one is tried; inf is the paper's unguarded Alg. 1. loss_dtype: the dtype loss_fn computes in where it is lower
    than the parameters' (autocast), for the tolerance of the runtime invariance check."""
    t0 = time.perf_counter()
    cands = group.sample(samples, alpha, gen, ffn=ffn)
    ref = math.sqrt(grad_sq_norm(model, group))
    norms = brute_force_norms(model, group, cands, loss_fn) if brute_force else closed_form_norms(model, group, cands)
    better = int((norms > ref).sum())
    out = TeleportOutcome(False, ref, float(norms.max()), better, max_norm=float(norms.max()))
    if better > samples / 2:  # eq. (16): majority rule, on all M candidates as in the paper
        if loss_before is None:
            with torch.no_grad():
                loss_before = float(loss_fn())
        for i in torch.argsort(norms, descending=True).tolist():
            if float(norms[i]) <= ref:
                break
            if float(norms[i]) > max_ratio * ref:  # App. G: would push the cumulative ratio over the bound
                out.skipped_guard += 1
                continue
            g = group.pick(cands, i)
            if _apply_checked(model, group, g, loss_fn, loss_before, loss_dtype):
                update_optimizer_state(optimizer, group, g, state_policy)
                out.applied, out.best_norm = True, float(norms[i])
                break
            out.skipped_invariance += 1
    out.seconds = time.perf_counter() - t0
    return out


def _apply_checked(model, group, g, loss_fn, before: float, loss_dtype: torch.dtype | None = None) -> bool:
    """Apply g, transform .grad, and verify the batch loss did not move (to the tolerance of the lower of the
    parameters' dtype and `loss_dtype`); undo and warn otherwise."""
    saved = [p.detach().clone() for p in group.parameters()]
    group.apply(model, g)
    with torch.no_grad():
        after = float(loss_fn())
    dt = group.parameters()[0].dtype
    tol = max(loss_tolerance(dt), loss_tolerance(loss_dtype or dt))
    if not math.isfinite(after) or abs(after - before) > tol * max(1.0, abs(before)):
        with torch.no_grad():
            for p, s in zip(group.parameters(), saved, strict=True):
                p.copy_(s)
        warnings.warn(
            f"teleport: skipped an element that changed the batch loss from {before:.6g} to {after:.6g} "
            f"(tolerance {tol:.1e} relative)",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    dep = [p for p in group.dependent_parameters() if p.grad is not None]
    if dep:  # gradients of the group-defining parameters are not a linear image: recompute them exactly
        new_dep = torch.autograd.grad(loss_fn(), dep, allow_unused=True)
        for p, gnew in zip(dep, new_dep, strict=True):
            p.grad.copy_(torch.zeros_like(p) if gnew is None else gnew)
    grads = {id(p): p.grad for p in group.parameters() if p.grad is not None}
    with torch.no_grad():
        new = group.grad_action(g, grads)
        for p in group.parameters():
            if id(p) in new:
                p.grad.copy_(new[id(p)])
    return True


# ---------------------------------------------------------------- Zhao et al. baseline
def zhao_teleport(
    model: nn.Module,
    group: SymmetryGroup,
    loss_fn: Callable[[], torch.Tensor],
    lr: float = 1e-4,
    steps: int = 10,
    optimizer: torch.optim.Optimizer | None = None,
    state_policy: str = "keep",
    loss_dtype: torch.dtype | None = None,
) -> TeleportOutcome:
    """Zhao et al. (2023): gradient ascent on g (coefficients in each layer's Lie algebra, from g = id) to
    maximise ||grad L(g theta)||^2, with a double backward each step (hence ~2x memory, App. E)."""
    check_float("lr", lr, 0.0, low_open=True)
    check_int("steps", steps, 1)
    t0 = time.perf_counter()
    names = {id(p): n for n, p in model.named_parameters()}
    params = criterion_parameters(model, group)
    coeffs = [torch.zeros(s.n_heads, s.qk.dimension, dtype=torch.float64, requires_grad=True) for s in group.sites]
    # V/O coefficients in each site's value group (GL(d_v); diagonal under an output gate; none without values)
    vcoef = [
        torch.zeros(s.n_heads, s.value_group.dimension if s.value_dim else 0, dtype=torch.float64, requires_grad=True)
        for s in group.sites
    ]
    # query/key-norm scalings (Qwen3; OLMo 2: per key head), one coefficient per norm block
    ncoef = [torch.zeros(s.n_blocks, dtype=torch.float64, requires_grad=True) for s in group.sites]
    ref = math.sqrt(grad_sq_norm(model, group))

    def element() -> GroupElement:
        return GroupElement(
            [s.qk.from_coeffs(c) for s, c in zip(group.sites, coeffs, strict=True)],
            [
                s.value_group.from_coeffs(c) if s.value_dim else c.view(s.n_heads, 0, 0)
                for s, c in zip(group.sites, vcoef, strict=True)
            ],
            [None] * len(group.sites),
            [torch.ones(f.up.out_features, dtype=torch.float64) for f in group.ffns],
            [None if s.norm_blocks is None else 1 + c for s, c in zip(group.sites, ncoef, strict=True)],
        )

    with sdpa_kernel(SDPBackend.MATH):  # the fused CPU/flash kernels have no double backward
        for _ in range(steps):
            _zhao_ascent_step(model, group, loss_fn, lr, names, params, coeffs + vcoef + ncoef, element)
    with torch.no_grad():
        g = element()
        g = GroupElement(
            [u.detach() for u in g.qk],
            [v.detach() for v in g.vo],
            g.perm,
            g.ffn,
            [None if s is None else s.detach() for s in g.norm],
        )
        before = float(loss_fn())
    ok = _apply_checked(model, group, g, loss_fn, before, loss_dtype)
    if ok:
        update_optimizer_state(optimizer, group, g, state_policy)
    new_norm = math.sqrt(grad_sq_norm(model, group))
    return TeleportOutcome(ok, ref, new_norm, int(new_norm > ref), int(not ok), time.perf_counter() - t0)


def _zhao_ascent_step(model, group, loss_fn, lr, names, params, coefs, element) -> None:
    """One ascent step on ||grad L(g theta)||^2 with respect to g's coefficients."""
    new = group.transformed(element())
    state = {names[id(p)]: new.get(id(p), p) for p in params}
    loss = _call_with(model, state, loss_fn)
    grads = torch.autograd.grad(loss, [state[names[id(p)]] for p in params], create_graph=True, allow_unused=True)
    obj = sum(g.pow(2).sum() for g in grads if g is not None)
    dc = torch.autograd.grad(obj, coefs, allow_unused=True)
    with torch.no_grad():
        for c, d in zip(coefs, dc, strict=True):
            if d is not None:
                c += lr * d


class _LossModule(nn.Module):
    def __init__(self, model: nn.Module, loss_fn: Callable[[], torch.Tensor]):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self) -> torch.Tensor:
        return self.loss_fn()


def _call_with(model: nn.Module, state: dict[str, torch.Tensor], loss_fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Evaluate loss_fn() with the model's parameters replaced by `state` (differentiable in state)."""
    wrapper = _LossModule(model, loss_fn)
    return torch.func.functional_call(wrapper, {f"model.{k}": v for k, v in state.items()}, ())


# ---------------------------------------------------------------- schedule and callback
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


class TeleportCallback(Callback):
    """Trainer callback: teleport on the scheduled steps (on_after_backward, before clipping and the step).

    Ratio guard (App. G, "the cumulative ratio of gradient norms (after teleportation / before teleportation)
    across consecutive steps should remain below 1.05 for small datasets"): within one run of consecutive
    teleport steps the product of the applied steps' ||grad after|| / ||grad before|| is kept at or below
    `max_cumulative_ratio`; a candidate that would push it higher is not applied (the next best is tried; if
    none fits, the step is not teleported). max_cumulative_ratio=None (or inf) is the paper's unguarded
    Alg. 1. Every teleport step adds a record to `log` and a row {"step", "teleport": {...}} to the
    trainer's metric history (metrics.jsonl): reference norm, chosen norm, candidates beating the
    reference, applied or not, refused by the guard or not, cumulative ratio.
    Schedule (TeleportSchedule): `steps` consecutive teleport steps from the first step of epoch `epoch`, or from
    optimizer step `start_step` (0-based) and, with `every`, again every `every` steps; `step` is the deprecated
    name of start_step. attention: declarations of a model's own attention layers (teleport.AttentionLayer)."""

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
        **unknown: object,
    ):
        if unknown:
            fail(
                "teleport option",
                sorted(unknown),
                "options among alpha, samples, epoch, start_step, every, steps, "
                "seed, method, state_policy, ffn, zhao_lr, zhao_steps, max_cumulative_ratio, attention",
            )
        self.alpha = check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)  # radius of B_G(alpha)
        self.samples = check_int("samples", samples, 1)
        self.method = check_choice("method", method, ("sample", "zhao", "brute"))
        self.state_policy = check_choice("state_policy", state_policy, STATE_POLICIES)
        self.max_cumulative_ratio = check_max_cumulative_ratio(max_cumulative_ratio)
        self.ffn = bool(ffn)
        self.zhao_lr, self.zhao_steps = zhao_lr, check_int("zhao_steps", zhao_steps, 1)
        self.schedule = schedule_from(epoch, deprecated_step(step, start_step), every, steps)
        self.seed = check_int("seed", seed, 0)
        self.gen = torch.Generator().manual_seed(seed)
        self.attention = attention
        self.group = None if model is None else symmetry_group(model, positions, ffn=self.ffn, attention=attention)
        self.log: list[dict] = []
        self.seconds = 0.0
        self._phase: int | None = None  # first step of the current run of consecutive teleport steps
        self._cum = 1.0  # its cumulative ||grad after|| / ||grad before|| so far

    @property
    def guarded(self) -> bool:
        return math.isfinite(self.max_cumulative_ratio)

    def on_train_start(self, trainer) -> None:
        if self.group is None:
            self.group = symmetry_group(trainer.raw_model, ffn=self.ffn, attention=self.attention)
        self.schedule.validate(trainer.total_steps, trainer.steps_per_epoch, trainer.cfg.epochs)

    def on_after_backward(self, trainer, idx) -> None:
        step = trainer.state.step
        phase = self.schedule.phase_start(step, trainer.steps_per_epoch)
        if phase is None:
            return
        if phase != self._phase:  # a new run of consecutive steps: the cumulative ratio starts afresh
            self._phase, self._cum = phase, 1.0
        model = trainer.raw_model
        self.group.refresh()

        autocast = getattr(trainer, "autocast", contextlib.nullcontext)  # the trainer's precision (bf16-autocast)
        loss_dtype = getattr(trainer, "compute_dtype", None)

        def loss_fn():  # the trainer's batch loss, positional penalties included (invariant: they see no Q/K/V/O)
            with autocast():
                loss = trainer.task.loss(trainer.model, trainer.train_data, idx)
                return loss + penalties(trainer.raw_model)

        if self.method == "zhao":
            out = zhao_teleport(
                model,
                self.group,
                loss_fn,
                self.zhao_lr,
                self.zhao_steps,
                trainer.optimizer,
                self.state_policy,
                loss_dtype,
            )
        else:  # the per-step bound that keeps the cumulative ratio within max_cumulative_ratio
            out = teleport_step(
                model,
                self.group,
                loss_fn,
                self.alpha,
                self.samples,
                self.gen,
                trainer.optimizer,
                self.state_policy,
                self.ffn,
                brute_force=self.method == "brute",
                loss_before=_last_loss(trainer),
                max_ratio=self.max_cumulative_ratio / self._cum,
                loss_dtype=loss_dtype,
            )
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
        log_row = getattr(trainer, "_log", None)  # the run's metric history (and metrics.jsonl when it has one)
        if callable(log_row):
            log_row({"step": step, "teleport": {k: v for k, v in rec.items() if k != "step"}})

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


def _last_loss(trainer) -> float | None:
    last = getattr(trainer, "last_loss", None)
    return None if last is None else float(last)


@CALLBACKS.register("teleport")
def make_teleport(model: nn.Module | None = None, **kw) -> TeleportCallback:
    """`symformer train --teleport alpha=0.65,samples=16,epoch=1,steps=4` (guarded at 1.05 by default;
    `max_cumulative_ratio=null` or `=Infinity` for the paper's unguarded Alg. 1)."""
    return TeleportCallback(model=model, **kw)
