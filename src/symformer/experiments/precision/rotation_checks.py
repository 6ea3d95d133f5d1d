"""Precision checks of the positional parts and of patched Hugging Face models in bfloat16 / float16.

The bound: a 16-bit result is as good as it can be when max|rotated q - float64 rotation of the same q| stays
within 2 eps(dtype) max|q|, eps(bfloat16) = 2^-7, eps(float16) = 2^-10 (one rounding of the exact result costs
at most eps/2 of each entry; the second eps leaves room for the float32 arithmetic before it). The float64
reference is the same part built under a float32 default dtype (its float32 master values), cast with .double(),
applied to the 16-bit q upcast: a part built in 16 bits, cast with .to() or run under autocast is held to the part
a float32 user builds, so rounding its frequencies to 16 bits counts as error. Additive parts (x + PE) are held to
2 eps(dtype) max|x + PE| (the encoding is of order 1 whatever x is).

Routes: "built" (constructed while torch's default dtype is the 16-bit one), "cast" (built in float32, then
.to(dtype)), "autocast" (float32 part and float32 q, k holding the same values, run under torch.autocast at dtype:
the part keeps its input dtype, float32, so the bound holds with room).

Pure functions: no file I/O; the Hugging Face models are tiny and built from configs."""

from __future__ import annotations

import copy
import math

import torch

from symformer import positional as pos
from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_choice, check_int, fail
from symformer.positional import rotary_parts
from symformer.registry import POSITIONAL

EPS = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}
#: more arms of a registered rotary part: RoPE in its other pair layout and in mixed (learned 2-D) mode
VARIANTS = {"rope": ("rope_interleaved", "rope_mixed")}
#: an arm that is no registered part class: a rotary part on half of each head (positional.partial_rotary)
WRAPPERS = ("partial",)


def rotation_arms() -> tuple[str, ...]:
    """Every registered rotary part (positional.rotary_parts(), in registration order) followed by its VARIANTS,
    then WRAPPERS: the rotations the checks hold to the bound, read from the registry when called."""
    return tuple(a for name in rotary_parts() for a in (name, *VARIANTS.get(name, ()))) + WRAPPERS


ROTATION_PARTS = rotation_arms()  # the arms of the parts registered with symformer.positional
ADDITIVE_PARTS = ("sinusoidal", "learned")
ROUTES = ("built", "cast", "autocast")
HEAD_DIM = 16


def check_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in EPS:
        fail("dtype", dtype, "torch.bfloat16 or torch.float16", TypeError)
    return dtype


def recorded_mode(coord_dim: int) -> str | None:
    """The initial frequencies of the recorded runs: the random-direction init for C > 1 ("mixed_random"; "mixed",
    the parts' default there, is rope-vit's RoPE-Mixed since issue 62), the parts' default (axial) for C = 1."""
    return "mixed_random" if coord_dim > 1 else None


def build_part(part: str, coord_dim: int = 1, head_dim: int = HEAD_DIM, seed: int = 0, n: int = 8192):
    """The part `part` (rotation_arms() or ADDITIVE_PARTS) in torch's current default dtype, with parameters away
    from their trivial values (STRING's P != I, ESPR's non-commuting generators and post-rotation); a registered
    rotary part without a configuration here is built by the registry with its defaults."""
    if part == "rope":
        return pos.RoPE(head_dim, coord_dim, pairing="half")
    if part == "rope_interleaved":
        return pos.RoPE(head_dim, coord_dim, pairing="interleaved")
    if part == "rope_mixed":
        # the recorded runs' random-direction init ("mixed" is rope-vit's RoPE-Mixed since issue 62)
        return pos.RoPE(head_dim, coord_dim, pairing="half", mode="mixed_random", learnable=True)
    if part == "string":
        # the recorded runs' pairing (the parts default to "half")
        return pos.STRING(
            head_dim, coord_dim, init_scale=0.1, seed=seed, pairing="interleaved", mode=recorded_mode(coord_dim)
        )
    if part == "circulant_string":
        return pos.CirculantSTRING(head_dim, coord_dim, seed=seed)
    if part == "espr":
        m = pos.ESPR(
            head_dim,
            coord_dim,
            commuting_init=False,
            init_scale=0.02,
            seed=seed,
            pairing="interleaved",
            mode=recorded_mode(coord_dim),
        )
        with torch.no_grad():
            g = seeded_generator(seed + 1)
            m.skew_param.copy_(0.05 * torch.randn(m.skew_param.shape, generator=g, dtype=torch.float64))
        return m
    if part == "partial":
        return pos.partial_rotary(head_dim, rotary_dim=head_dim // 2, inner="rope", coord_dim=coord_dim)
    if part == "sinusoidal":
        return pos.SinusoidalPE(head_dim, coord_dim)
    if part == "learned":
        return pos.LearnedPE(head_dim, coord_dim, max_len=n)
    if part in rotary_parts():
        return POSITIONAL.build(part, head_dim=head_dim, coord_dim=coord_dim)
    fail("part", part, f"one of {rotation_arms() + ADDITIVE_PARTS}")
    raise AssertionError


def _built_in(dtype: torch.dtype, part: str, coord_dim: int, seed: int, n: int):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        seed_torch(seed)
        return build_part(part, coord_dim, seed=seed, n=n)
    finally:
        torch.set_default_dtype(old)


def grid_positions(n: int, coord_dim: int) -> torch.Tensor:
    """int64 positions (n, C): tokens 0..n-1 for C = 1, a side x side grid (side = floor(sqrt(n))) for C = 2."""
    if coord_dim == 1:
        return torch.arange(n)[:, None]
    if coord_dim == 2:
        side = math.isqrt(n)
        g = torch.arange(side)
        return torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    fail("coord_dim", coord_dim, "1 (token positions) or 2 (a grid)")
    raise AssertionError


def route_part(part: str, dtype: torch.dtype, route: str, coord_dim: int = 1, seed: int = 0, n: int = 8192):
    """(module to run, float64 reference module): the part made 16-bit by `route`, and its float32 build in
    float64."""
    check_dtype(dtype)
    check_choice("route", route, ROUTES)
    seed_torch(seed)
    base = _built_in(torch.float32, part, coord_dim, seed, n)
    ref = copy.deepcopy(base).double()
    if route == "built":
        return _built_in(dtype, part, coord_dim, seed, n), ref
    return (base.to(dtype) if route == "cast" else base), ref


def _run(module, inputs: tuple, positions: torch.Tensor, dtype: torch.dtype, autocast: bool):
    if autocast:
        with torch.autocast(positions.device.type, dtype=dtype):
            return module(*inputs, positions)
    return module(*inputs, positions)


def rotation_errors(
    part: str,
    dtype: torch.dtype,
    route: str,
    n: int = 8192,
    coord_dim: int = 1,
    seed: int = 0,
    backward: bool = False,
    device: str = "cpu",
    batch: int = 1,
    heads: int = 2,
) -> dict:
    """Errors / bound of a part (rotation_arms(): q and k; ADDITIVE_PARTS: x + PE) on `n` positions against the float64
    reference: {"forward", "out_dtype_ok"} and, with backward, "grad_input" (the gradient of the fixed functional
    sum(w_q . q~ + w_k . k~), bound 2 eps max|w|) and "grad_param" (the parameters' gradients, bound 2 eps times the
    reference's largest entry; 0 when no parameter trains)."""
    check_int("n", n, 1)
    module, ref = route_part(part, dtype, route, coord_dim, seed, n)
    module, ref = module.to(device), ref.to(device)
    autocast = route == "autocast"
    in_dtype = torch.float32 if autocast else dtype
    pos = grid_positions(n, coord_dim).to(device)
    g = seeded_generator(seed + 7)
    additive = part in ADDITIVE_PARTS
    shapes = [(batch, pos.shape[0], HEAD_DIM)] if additive else [(batch, heads, pos.shape[0], HEAD_DIM)] * 2
    xs16 = [torch.randn(s, generator=g).to(dtype) for s in shapes]  # 16-bit values: exact in every dtype
    ws = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype).double().to(device) for s in shapes]
    xs = [x.to(device=device, dtype=in_dtype).clone().requires_grad_(backward) for x in xs16]
    xs64 = [x.to(device=device, dtype=torch.float64).requires_grad_(backward) for x in xs16]
    out = _run(module, tuple(xs), pos, dtype, autocast)
    out64 = ref(*xs64, pos.double())
    out, out64 = (out,) if additive else out, (out64,) if additive else out64
    eps = EPS[dtype]
    scale = max(float(o.detach().abs().max()) for o in out64) if additive else max(float(x.abs().max()) for x in xs16)
    err = max(float((o.detach().double() - r.detach()).abs().max()) for o, r in zip(out, out64))
    res = {"forward": err / (2 * eps * scale), "out_dtype_ok": all(o.dtype == x.dtype for o, x in zip(out, xs))}
    if backward:
        res.update(_backward_errors(module, ref, out, out64, xs, xs64, ws, eps))
    return res


def _backward_errors(module, ref, out, out64, xs, xs64, ws, eps: float) -> dict:
    """The gradients of sum(w . out) w.r.t. the inputs and the trainable parameters, against the reference's."""
    sum(((o.double() * w).sum() for o, w in zip(out, ws))).backward()
    sum(((o * w).sum() for o, w in zip(out64, ws))).backward()
    wmax = max(float(w.abs().max()) for w in ws)
    grad_in = max(float((x.grad.double() - x64.grad).abs().max()) for x, x64 in zip(xs, xs64)) / (2 * eps * wmax)
    grad_param = 0.0
    for p, p64 in zip(module.parameters(), ref.parameters()):
        if p.requires_grad and p64.grad is not None:
            top = float(p64.grad.abs().max())
            if p.grad is None or not bool(torch.isfinite(p.grad).all()):
                return {"grad_input": grad_in, "grad_param": math.inf}
            if top > 0:
                grad_param = max(grad_param, float((p.grad.double() - p64.grad).abs().max()) / (2 * eps * top))
    return {"grad_input": grad_in, "grad_param": grad_param}


def rotation_err_vs_bound(
    part: str, dtype: torch.dtype, route: str, n: int = 8192, coord_dim: int = 1, seed: int = 0
) -> float:
    """max|rotated q, k - float64 rotation| / (2 eps(dtype) max|q|) for part in rotation_arms() (goal <= 1)."""
    check_choice("part", part, rotation_arms())
    return rotation_errors(part, dtype, route, n, coord_dim, seed)["forward"]
