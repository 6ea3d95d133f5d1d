"""One teleport step (Alg. 1, "Teleportation Training with Sampling Minimal Perturbations"), with candidate
gradient norms in closed form, a brute-force reference, the optimizer state carried along, and the Zhao et al.
gradient-ascent baseline. The schedule, the ratio guard and the log are the Teleporter's (teleporter.py).

At a scheduled step, with the gradient of the current batch present: draw M elements near the identity
(radius alpha), compute ||grad L(g_i theta)|| for each, and if more than M/2 beat ||grad L(theta)|| (eq. (15)-(16),
the majority rule) apply the best one, theta <- g* theta, before the ordinary optimizer step. Since the loss is
invariant and the action linear, grad L(g theta) is a fixed linear image of grad L(theta) (our derivation; Alg. 1
evaluates each candidate's gradient), so all M norms and the new gradient come from the one backward pass the
trainer already did.

The Teleporter adds the ratio guard of App. G (the cumulative ||grad after|| / ||grad before|| over a run of
consecutive teleport steps stays <= 1.05 on small data sets) on top of the majority rule: with U[1-alpha,
1+alpha] diagonal samples nearly every candidate raises the norm (E[u^-2] > 1), so the majority rule alone
almost never refuses a step (our analysis, not the paper's). The guard bounds the sampling methods ("sample",
"brute"); the Zhao et al. ascent is recorded but not bounded.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from symformer._validation import check_choice, check_float, check_int
from symformer.teleport.groups import GroupElement, SymmetryGroup

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
    n = next(x.shape[0] for xs in cands.parts.values() for x in xs if x is not None)
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
    moved: list[float] = []  # the losses of the candidates the invariance check undid
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
            after = _apply_checked(model, group, g, loss_fn, loss_before, loss_dtype)
            if after is None:
                update_optimizer_state(optimizer, group, g, state_policy)
                out.applied, out.best_norm = True, float(norms[i])
                break
            out.skipped_invariance += 1
            moved.append(after)
    if moved:  # one warning per step, not one per candidate
        warnings.warn(
            f"teleport: skipped {len(moved)} element(s) that changed the batch loss from {loss_before:.6g} to "
            f"{', '.join(f'{a:.6g}' for a in moved[:3])}{', ...' if len(moved) > 3 else ''} (tolerance "
            f"{_tolerance(group, loss_dtype):.1e} relative){'' if out.applied else '; nothing teleported'}: the "
            "group is not a symmetry of this loss (a declared layer that is not exact softmax attention, a q/k norm "
            "or gate between the projections, a wrong layout or rotary?)",
            RuntimeWarning,
            stacklevel=2,
        )
    out.seconds = time.perf_counter() - t0
    return out


def _tolerance(group, loss_dtype: torch.dtype | None) -> float:
    """The runtime invariance check's relative tolerance: that of the lower of the parameters' dtype and loss_dtype."""
    dt = group.parameters()[0].dtype
    return max(loss_tolerance(dt), loss_tolerance(loss_dtype or dt))


def _apply_checked(model, group, g, loss_fn, before: float, loss_dtype: torch.dtype | None = None) -> float | None:
    """Apply g, transform .grad, and verify the batch loss did not move (to the tolerance of the lower of the
    parameters' dtype and `loss_dtype`): None when applied, else undo and return the loss g gave (the caller
    warns once per step)."""
    saved = [p.detach().clone() for p in group.parameters()]
    group.apply(model, g)
    with torch.no_grad():
        after = float(loss_fn())
    tol = _tolerance(group, loss_dtype)
    if not math.isfinite(after) or abs(after - before) > tol * max(1.0, abs(before)):
        with torch.no_grad():
            for p, s in zip(group.parameters(), saved, strict=True):
                p.copy_(s)
        return after
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
    return None


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
    # coordinates in each component's Lie algebra (Q/K in the layer's group, V/O in GL(d_v) or the diagonal under an
    # output gate, q/k-norm scalings per block); the MLP, expert and permutation parts stay at the identity
    coefs = {id(c): k.requires_grad_() for c in group.components if (k := c.coefficients()) is not None}
    ref = math.sqrt(grad_sq_norm(model, group))

    def element() -> GroupElement:
        return GroupElement(
            **{
                kind: [c.from_coeffs(coefs[id(c)]) if id(c) in coefs else None for c in group.part(kind)]
                for kind in group.kinds()
            }
        )

    with sdpa_kernel(SDPBackend.MATH):  # the fused CPU/flash kernels have no double backward
        for _ in range(steps):
            _zhao_ascent_step(model, group, loss_fn, lr, names, params, list(coefs.values()), element)
    with torch.no_grad():
        g = element().detach()
        before = float(loss_fn())
    after = _apply_checked(model, group, g, loss_fn, before, loss_dtype)
    ok = after is None
    if ok:
        update_optimizer_state(optimizer, group, g, state_policy)
    else:
        warnings.warn(
            f"teleport: skipped an element that changed the batch loss from {before:.6g} to {after:.6g} "
            f"(tolerance {_tolerance(group, loss_dtype):.1e} relative)",
            RuntimeWarning,
            stacklevel=2,
        )
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
