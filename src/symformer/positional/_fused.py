"""One-pass half-pairing rotation for large tensors, compiled with torch.compile once per head dim and mode.

Eager PyTorch has no op that reads x at the two offsets u and u + Dh/2 at once, so the eager half kernel
(rope._half_kernel) makes three passes over memory (swapped-halves copy, then two multiplies), where the
interleaved pairing makes one complex multiply. Written as cat(x1 cos - x2 sin, x2 cos + x1 sin) on the
contiguous (..., Dh/2) tables, the rotation is one elementwise expression that inductor fuses into a
single loop (one read of x and the half-size tables, one write of out); the (..., Dh/2) tables are half the
memory of the full (..., Dh) ones. The backward R^T = R(-theta) is the same kernel with the sine times -1 (`sign`).

Used only at or above FUSED_MIN_NUMEL elements, where the saved passes outweigh one compile per key (its cost is
on the docs' performance page). Every dim but the head dim is marked dynamic, so new batch sizes and sequence
lengths reuse the kernel instead of spending a compile and a key on each shape. A key is what
dynamo guards on beyond the dynamic sizes: the head dim, which dims are 1 (dynamo specialises those),
layout, dtype, device, inference tensors, grad and inference mode, and the sign. Each key gets its own compiled copy of
the kernel (a fresh code object): dynamo counts recompiles per code object, so one shared function would
fall back to eager after torch._dynamo's recompile_limit (8) keys, which a program mixing dtypes, modes and
head dims reaches quickly.
At most MAX_KEYS keys per process are compiled (compile time and memory); beyond, the eager kernel runs.
Any compile failure (no C++ compiler, unsupported device) is reported once with a warning and the eager
kernel is used from then on. SYMFORMER_FUSED_ROPE=0 turns the path off."""

from __future__ import annotations

import os
import types
import warnings

import torch

FUSED_MIN_NUMEL = 1 << 20
MAX_KEYS = 32  # each key costs one compile and its generated code
_STATE: dict = {"fns": {}, "failed": set()}


def rotate_half_pairs(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """[x1 cos - x2 sin, x2 cos + x1 sin] on (..., Dh/2) tables: the half-pairing rotation as one elementwise
    expression (what inductor fuses; rope.rotate_pairs' half branch too)."""
    m = x.shape[-1] // 2
    x1, x2 = x[..., :m], x[..., m:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _rotate_half(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float) -> torch.Tensor:
    """rotate_half_pairs with sin times sign (-1: R^T)."""
    return rotate_half_pairs(x, c, s * sign)


def _tensor_key(t: torch.Tensor) -> tuple:
    """What dynamo guards on for an input tensor whose leading dims are dynamic (its dispatch keys differ
    for inference tensors). No requires_grad: the compiled function only ever sees detached aliases."""
    return (
        t.dim(),
        t.shape[-1],
        tuple(n == 1 for n in t.shape[:-1]),
        t.is_contiguous(),
        t.dtype,
        t.device,
        t.is_inference(),
    )


def _dynamic_leading(t: torch.Tensor) -> torch.Tensor:
    """An alias of t (the caller's tensor keeps no dynamo marks) with every dim of size > 1 except the head
    dim marked dynamic. maybe_mark_dynamic, not mark_dynamic: x's sequence dim equals the tables' first dim,
    and a dim that mark_dynamic declares free but the graph ties to another is a ConstraintViolationError on
    torch 2.6 (later releases accept it), which would turn the fused path off."""
    t = t.detach()
    for d, n in enumerate(t.shape[:-1]):
        if n > 1:
            torch._dynamo.maybe_mark_dynamic(t, d)
    return t


def _compile_copy():
    """torch.compile of a fresh copy of the kernel: a new code object has its own dynamo cache and
    recompile count, so keys never compete for one function's recompile_limit."""
    f = _rotate_half
    copy = types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    return torch.compile(copy, dynamic=False)


def enabled() -> bool:
    return os.environ.get("SYMFORMER_FUSED_ROPE", "1") != "0"


def fused_applies(x: torch.Tensor) -> bool:
    """Whether `fused_half` may run for x (large enough, on, on a device where compiling worked, not inside
    a user's torch.compile, where the outer graph fuses the eager kernel itself: no nested compile)."""
    return (
        x.numel() >= FUSED_MIN_NUMEL
        and x.device.type not in _STATE["failed"]
        and enabled()
        and not getattr(torch.compiler, "is_compiling", lambda: False)()
    )


def fused_half(x: torch.Tensor, c: torch.Tensor, s: torch.Tensor, sign: float = 1.0) -> torch.Tensor | None:
    """R(theta) x (sign 1) or R(theta)^T x (sign -1) from the compiled one-pass kernel, with c = cos, s = sin
    (..., Dh/2), or None where it does not apply (`fused_applies`, too many keys, or compilation failed on
    this device type): the caller then runs eagerly."""
    if not fused_applies(x):
        return None
    # what dynamo's guards distinguish here (a new key is a recompile): head dim, which dims are 1, layout,
    # dtype, device, inference tensors, grad and inference mode, the sign (sizes of the other dims are dynamic)
    key = (
        *(_tensor_key(t) for t in (x, c, s)),
        float(sign),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
    )
    fn = _STATE["fns"].get(key)
    try:
        if fn is not None:  # compiled with dynamic leading dims: plain tensors match its guards (no marks,
            return fn(x.detach(), c.detach(), s.detach(), float(sign))  # which cost ~20 us a call)
        if len(_STATE["fns"]) >= MAX_KEYS:
            return None
        fn = _STATE["fns"][key] = _compile_copy()
        return fn(*(_dynamic_leading(t) for t in (x, c, s)), float(sign))
    except Exception as err:  # noqa: BLE001 - a speed path only: any compiler failure falls back to eager
        _STATE["failed"].add(x.device.type)
        warnings.warn(
            f"symformer: fused half-pairing RoPE unavailable on {x.device.type} "
            f"({type(err).__name__}); using the eager kernel",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
