"""The fused rotary kernel: R(theta) x from float32 cos / sin tables in one pass, and its torch reference.

What every table-based rotary part applies (positional/rope.py `apply_tables`: RoPE, STRING after its P, partial
rotary, axial and mixed N-D angles, decoding at offset positions: all of them are tables of angles per row):

* x (..., N, Dh) with its last dim contiguous, float32 / bfloat16 / float16; pairs (u, u + rotary_dim / 2)
  ("half", GPT-NeoX / LLaMA) or (2u, 2u + 1) ("interleaved", GPT-J / RoFormer) of the first `rotary_dim`
  coordinates are rotated, the rest pass through (partial rotary);
* cos, sin (..., N, rotary_dim / 2), float32 (the tables RoPE.tables builds: float64 angles rounded once to float32,
  docs/precision.md), broadcast against x's leading dims (shared by batch and heads, per sample, or per head);
* the rotation runs in float32 and is rounded once to the output dtype (x's, or `out_dtype`).

The backward of R(theta) is R(theta)^T = R(-theta): the same kernel with the sine negated (no saved activations).
`rotate_` rotates in place where no gradient is needed. `rotate` and `rotate_` choose the kernel or the torch
reference through `use_kernel("rotary", ..., kernel=...)` (docs/performance.md, "Fused kernels"): inputs the
kernel does not take (`unsupported`) run the reference, with one warning under "auto" and a ValueError naming
`kernel` when the kernel is forced.
"""

from __future__ import annotations

import torch

from symformer._torch_compat import TRITON_OP
from symformer._validation import check_choice, fail
from symformer.kernels._dispatch import kernel_mode, triton_available, use_kernel

PAIRINGS = ("half", "interleaved")
MAX_HEAD_DIM = 512  # one program holds a row's pairs in registers: BLOCK_M = next_pow2(rotary_dim / 2) <= 256
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

if torch.cuda.is_available() and triton_available():  # a GPU machine: build the kernel now, not inside a traced call
    from symformer.kernels import _rotary_triton as _IMPL
else:
    _IMPL = None


def _impl():
    """The Triton module (kernels/_rotary_triton.py), imported at the first launch on a machine without CUDA."""
    global _IMPL
    if _IMPL is None:
        from symformer.kernels import _rotary_triton  # optional dependency: imports triton, only for a kernel run

        _IMPL = _rotary_triton
    return _IMPL


def _rotary_dim(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int | None) -> int:
    rd = x.shape[-1] if rotary_dim is None else rotary_dim  # x's head dim may be symbolic under torch.compile
    if (rotary_dim is not None and not isinstance(rd, int)) or rd < 2 or rd % 2 or rd > x.shape[-1]:
        fail("rotary_dim", rotary_dim, f"an even number of coordinates in [2, {x.shape[-1]}] (x's head dim)")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.shape[-1] != rd // 2:
            fail(name, f"last dim {t.shape[-1]}", f"rotary_dim / 2 = {rd // 2} (one angle per rotary pair)")
    return rd


def unsupported(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> str | None:
    """Why the kernel cannot take these inputs, or None when it can (tensor metadata only: no host sync).

    Args:
        x (..., N, Dh): the tensor to rotate.
        cos (..., N, rotary_dim / 2): cosines, broadcast against x.
        sin (..., N, rotary_dim / 2): sines, same shape.

    Example:
        >>> unsupported(torch.zeros(2, 4, dtype=torch.float64), torch.zeros(2, 2), torch.zeros(2, 2))
        'dtype torch.float64 (float32, bfloat16 and float16 only)'
    """
    if x.dtype not in DTYPES:
        return f"dtype {x.dtype} (float32, bfloat16 and float16 only)"
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        return f"{cos.dtype} / {sin.dtype} tables (float32 only)"
    if x.shape[-1] > MAX_HEAD_DIM:
        return f"head dim {x.shape[-1]} above {MAX_HEAD_DIM}"
    if x.ndim > 4 or x.ndim < 2:
        return f"a {x.ndim}-D tensor (2-D to 4-D: (..., N, Dh))"
    if x.stride(-1) != 1:
        return "a non-contiguous last dim"
    if x.numel() == 0:
        return "an empty tensor"
    if cos.device != x.device or sin.device != x.device:
        return f"tables on {cos.device} for x on {x.device}"
    if x.device.type == "cuda" and not TRITON_OP:
        return f"torch {torch.__version__} (torch.library.triton_op needs torch >= 2.6)"
    return None


def rotate_reference(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pairing: str = "half",
    rotary_dim: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The torch reference of `rotate`: pair u of the first rotary_dim coordinates rotated by its angle, in the
    tables' dtype, rounded once to out_dtype (default x's); the rest passed through.

    Args:
        x (..., N, Dh): the tensor to rotate.
        cos (..., N, rotary_dim / 2): cosines of the pairs' angles, broadcast against x.
        sin (..., N, rotary_dim / 2): sines.
        pairing (str): "half" or "interleaved".
        rotary_dim (int | None): the rotated coordinates (None: all of Dh).
        out_dtype (torch.dtype | None): the result's dtype (None: x's).

    Example:
        >>> x, th = torch.randn(3, 4, dtype=torch.float64), torch.rand(3, 2, dtype=torch.float64)
        >>> y = rotate_reference(x, th.cos(), th.sin())
        >>> torch.allclose(rotate_reference(y, th.cos(), -th.sin()), x)  # R(-theta) R(theta) = I
        True
    """
    rd = _rotary_dim(x, cos, sin, rotary_dim)
    m = rd // 2
    xr = x[..., :rd].to(cos.dtype)
    if check_choice("pairing", pairing, PAIRINGS) == "half":
        x1, x2 = xr[..., :m], xr[..., m:]
        y = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        y = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)  # (..., m, 2) -> (..., rd)
    y = y.to(out_dtype or x.dtype)
    if rd == x.shape[-1]:
        return y
    return torch.cat((y, x[..., rd:].to(y.dtype)), dim=-1)


def _as4d(t: torch.Tensor) -> torch.Tensor:
    return t[(None,) * (4 - t.ndim)] if t.ndim < 4 else t


def _launch(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    sign: int,
    interleaved: bool,
    rotary_dim: int,
    out_dtype: torch.dtype,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The kernel on checked inputs: into a new tensor (pass-through coordinates copied) or into `out` in place."""
    impl = _impl()
    copy_pass = out is None
    if out is None:
        out = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    shape = (*x.shape[:-1], rotary_dim // 2)
    x4, o4 = _as4d(x), _as4d(out)
    c4, s4 = _as4d(cos.broadcast_to(shape)), _as4d(sin.broadcast_to(shape))  # stride 0 where shared
    if x.device.type == "cpu":  # the interpreter (TRITON_INTERPRET=1): tests on a machine without a GPU
        impl.launch(impl.kernel_for(x), x4, c4, s4, o4, sign, interleaved, rotary_dim, copy_pass)
    else:
        impl.OP(x4, c4, s4, o4, sign, interleaved, rotary_dim, copy_pass)
    return out


def _pairs(t: torch.Tensor, rotary_dim: int, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    t = t[..., :rotary_dim].float()
    if interleaved:
        return t[..., 0::2], t[..., 1::2]
    return t[..., : rotary_dim // 2], t[..., rotary_dim // 2 :]


class _Rotary(torch.autograd.Function):
    """R(theta) x by the kernel; the backward is R(-theta) g by the same kernel. Tables that require grad (learned
    frequencies, STRING training) get theirs from torch ops on the saved x: with y1 = x1 c - x2 s and
    y2 = x2 c + x1 s, dL/dc = g1 x1 + g2 x2 and dL/ds = g2 x1 - g1 x2, summed over the dims the table is shared by."""

    @staticmethod
    def forward(ctx, x, cos, sin, interleaved, rotary_dim, out_dtype):
        ctx.save_for_backward(cos, sin, x if cos.requires_grad or sin.requires_grad else None)
        ctx.conf = (interleaved, rotary_dim, x.dtype)
        return _launch(x, cos, sin, 1, interleaved, rotary_dim, out_dtype)

    @staticmethod
    def backward(ctx, g):
        cos, sin, x = ctx.saved_tensors
        interleaved, rotary_dim, x_dtype = ctx.conf
        g = g if g.stride(-1) == 1 else g.contiguous()
        gx = _launch(g, cos, sin, -1, interleaved, rotary_dim, x_dtype) if ctx.needs_input_grad[0] else None
        gc = gs = None
        if x is not None:
            (x1, x2), (g1, g2) = _pairs(x, rotary_dim, interleaved), _pairs(g, rotary_dim, interleaved)
            gc = (g1 * x1 + g2 * x2).sum_to_size(cos.shape) if ctx.needs_input_grad[1] else None
            gs = (g2 * x1 - g1 * x2).sum_to_size(sin.shape) if ctx.needs_input_grad[2] else None
        return gx, gc, gs, None, None, None


def wanted(x: torch.Tensor, kernel: str | None) -> bool:
    """False where `use_kernel` would surely pick the torch path without reading the tables ("torch", or "auto"
    on a tensor off CUDA): callers skip building the kernel's views of their tables (no extra ops on the CPU)."""
    mode = kernel_mode(kernel)
    return not (mode == "torch" or (mode == "auto" and x.device.type != "cuda"))


def rotate(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pairing: str = "half",
    rotary_dim: int | None = None,
    out_dtype: torch.dtype | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """R(theta) x on the first rotary_dim coordinates of x, by the fused kernel or the torch reference.

    Args:
        x (..., N, Dh): queries or keys, e.g. (B, H, N, Dh).
        cos (..., N, rotary_dim / 2): float32 cosines of the pairs' angles, broadcast against x ((N, m) shared,
            (B, 1, N, m) per sample, (B, H, N, m) per head).
        sin (..., N, rotary_dim / 2): float32 sines, cos's shape.
        pairing (str): "half" (pairs (u, u + rotary_dim / 2)) or "interleaved" ((2u, 2u + 1)).
        rotary_dim (int | None): the rotated coordinates, even (None: all of Dh); the rest pass through.
        out_dtype (torch.dtype | None): the result's dtype (None: x's); one rounding from float32.
        kernel (str | None): "auto", "triton" or "torch" (None: SYMFORMER_KERNELS, default "auto").

    Returns:
        out (..., N, Dh): the rotated x; differentiable in x (the backward is R(-theta), the same kernel).

    Example:
        >>> x, th = torch.randn(2, 3, 5, 8), torch.rand(5, 2)
        >>> y = rotate(x, th.cos(), th.sin(), rotary_dim=4, kernel="torch")
        >>> torch.equal(y[..., 4:], x[..., 4:]), torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
        (True, True)
    """
    if use_kernel("rotary", (x, cos, sin), kernel, unsupported(x, cos, sin)):
        return apply_kernel(x, cos, sin, pairing, rotary_dim, out_dtype)
    return rotate_reference(x, cos, sin, pairing, rotary_dim, out_dtype)


def apply_kernel(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pairing: str = "half",
    rotary_dim: int | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The kernel itself, for a caller that has already chosen it with `use_kernel` (`rotate`'s arguments)."""
    rd = _rotary_dim(x, cos, sin, rotary_dim)
    interleaved = check_choice("pairing", pairing, PAIRINGS) == "interleaved"
    od = out_dtype or x.dtype
    if od not in DTYPES:
        fail("out_dtype", od, "float32, bfloat16 or float16 on the kernel path")
    return _Rotary.apply(x, cos, sin, interleaved, rd, od)


def rotate_(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pairing: str = "half",
    rotary_dim: int | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """`rotate` in place, for callers that need no gradient through x (inference, a KV cache's new keys).

    Args:
        x (..., N, Dh): the tensor to rotate, overwritten; not a tensor requiring grad while grad is enabled.
        cos (..., N, rotary_dim / 2): float32 cosines, broadcast against x.
        sin (..., N, rotary_dim / 2): float32 sines.
        pairing (str): "half" or "interleaved".
        rotary_dim (int | None): the rotated coordinates (None: all of Dh); the rest are left as they are.
        kernel (str | None): "auto", "triton" or "torch" (None: SYMFORMER_KERNELS).

    Returns:
        x: the same tensor, rotated.

    Example:
        >>> x, th = torch.randn(4, 6), torch.rand(4, 3)
        >>> ref = rotate(x, th.cos(), th.sin(), kernel="torch")
        >>> rotate_(x, th.cos(), th.sin(), kernel="torch") is x, torch.equal(x, ref)
        (True, True)
    """
    if torch.is_grad_enabled() and x.requires_grad:
        fail("x", "a tensor that requires grad", "one without autograd (rotate_ overwrites it; use rotate)")
    rd = _rotary_dim(x, cos, sin, rotary_dim)
    interleaved = check_choice("pairing", pairing, PAIRINGS) == "interleaved"
    if use_kernel("rotary", (x, cos, sin), kernel, unsupported(x, cos, sin)):
        _launch(x, cos, sin, 1, interleaved, rd, x.dtype, out=x)
        return x
    x[..., :rd] = rotate_reference(x[..., :rd], cos, sin, pairing, rd)
    return x


__all__ = ["MAX_HEAD_DIM", "PAIRINGS", "apply_kernel", "rotate", "rotate_", "rotate_reference", "unsupported", "wanted"]
