"""The eager rotation kernels behind `rope.apply_tables`, and their hand-written backwards.

A rotation R(theta) is orthogonal, so the gradient of its input is the inverse rotation of the output's gradient,
R(theta)^T g = R(-theta) g: the same kernel with the sine negated (no saved activations, no autograd graph of the
elementwise ops). Where the angles theta carry a gradient (learned frequencies: RoPE-Mixed, STRING's beta),
d(R x)/d theta_u = J_u R x on pair u (J the 2 x 2 rotation by pi/2, T0.17), so

    dL/d theta_u = <g_u, J R x_u> = <R^T g_u, J x_u> = gx_2 x_1 - gx_1 x_2   (gx = R^T g, J commutes with R_u),

one multiply-subtract per pair on the input gradient already computed, summed over the dimensions theta is
broadcast along (batch, heads): `RotateAngles`. Autograd through the complex product / cos-sin tables instead keeps
a full complex (or two real) gradient tables of x's size and backpropagates them through polar / cos / sin.
"""

from __future__ import annotations

import torch

from symformer._torch_compat import is_compiling
from symformer.positional._fused import fused_applies, fused_half


def _complex_view(x: torch.Tensor) -> torch.Tensor:
    """x (..., Dh) as complex (..., Dh/2): interleaved pairs (2u, 2u+1) are (real, imag)."""
    if is_compiling() or x.stride(-1) != 1 or x.storage_offset() % 2 or any(st % 2 for st in x.stride()[:-1]):
        # (dynamo cannot trace storage_offset; inductor drops the copy where x is already laid out so)
        x = x.contiguous()
    return torch.view_as_complex(x.unflatten(-1, (x.shape[-1] // 2, 2)))  # (..., Dh) -> complex (..., Dh/2)


def _half_kernel(
    x: torch.Tensor, cos2: torch.Tensor, ssin: torch.Tensor, sign: float = 1.0, half: tuple | None = None
) -> torch.Tensor:
    """Half pairing R(theta) x (sign=+1) or R(theta)^T x = R(-theta) x (sign=-1), no autograd:
    R x = [cos, cos] * x + [-sin, sin] * [x2, x1]. Three passes over contiguous memory (copy the swapped
    halves, then two multiplies on full rows in place): ops on the strided halves themselves run 32-wide
    inner loops and cost ~2x per element, and no eager op reads x at the two offsets u, u + Dh/2 at once.
    Large inputs take the compiled one-pass kernel instead (_fused.py) on the (..., Dh/2) tables `half`
    = (cos, sin) (sliced off cos2 / ssin when not given), same values up to float round-off."""
    m = x.shape[-1] // 2
    if fused_applies(x):
        c, s = half if half else (cos2[..., :m].contiguous(), ssin[..., m:].contiguous())
        out = fused_half(x, c, s, sign)
        if out is not None:
            return out
    ssin = ssin if sign > 0 else ssin.neg()
    out = torch.cat((x[..., m:], x[..., :m]), dim=-1)
    out.mul_(ssin)
    return out.addcmul_(x, cos2)


class _RotateHalf(torch.autograd.Function):
    """Half pairing with fixed tables: the backward is the inverse rotation R(theta)^T = R(-theta), the
    same kernel with the sine negated (no saved activations, no autograd graph of five ops)."""

    @staticmethod
    def forward(ctx, x, cos2, ssin, c=None, s=None):
        ctx.save_for_backward(cos2, ssin, c, s)
        return _half_kernel(x, cos2, ssin, 1.0, None if c is None else (c, s))

    @staticmethod
    def backward(ctx, g):
        cos2, ssin, c, s = ctx.saved_tensors
        return _half_kernel(g, cos2, ssin, -1.0, None if c is None else (c, s)), None, None, None, None


def _rotate(x: torch.Tensor, tabs: tuple, half: bool, sign: float) -> torch.Tensor:
    """R(theta) x (sign 1) or R(theta)^T x (sign -1) with detached tables: (rot,) complex for interleaved
    pairs, (cos2, ssin, cos, sin) for half pairs."""
    if half:
        return _half_kernel(x, tabs[0], tabs[1], sign, tabs[2:4])
    rot = tabs[0] if sign > 0 else tabs[0].conj()
    return torch.view_as_real(_complex_view(x) * rot).flatten(-2)  # complex (..., Dh/2) -> (..., Dh)


def _pairs(gx: torch.Tensor, x: torch.Tensor, half: bool) -> tuple:
    """(gx_1, gx_2, x_1, x_2): the two coordinates of every pair of gx and x (..., Dh), as (..., Dh/2) views."""
    m = x.shape[-1] // 2
    if half:
        return gx[..., :m], gx[..., m:], x[..., :m], x[..., m:]
    gp, xp = gx.unflatten(-1, (m, 2)), x.unflatten(-1, (m, 2))  # (..., Dh) -> (..., Dh/2, 2)
    return gp[..., 0], gp[..., 1], xp[..., 0], xp[..., 1]


def angle_grad(gx: torch.Tensor, x: torch.Tensor, half: bool, shape=None) -> torch.Tensor:
    """dL/d theta = gx_2 x_1 - gx_1 x_2 per pair for gx = R(theta)^T dL/d(R x) (module docstring). Angles shared by
    the batch (shape = x.shape[1:] with Dh/2) are accumulated in place over the batch on the CPU in eager mode when
    the per-sample blocks are large: one (H, N, Dh/2) buffer instead of a (B, H, N, Dh/2) temporary and its sum.

    Args:
        gx (..., Dh): the input's gradient R(theta)^T g.
        x (..., Dh): the rotated input.
        half (bool): half pairing (pairs (u, u + Dh/2)); else interleaved ((2u, 2u + 1)).
        shape (torch.Size | None): theta's shape, which the result is summed to (None: not summed).

    Returns:
        grad (..., Dh/2) or `shape`: the angles' gradient.
    """
    m = x.shape[-1] // 2
    if (
        shape is not None
        and x.ndim > 1
        and x.shape[0] > 1
        and x[0].numel() >= 1 << 16  # per-sample blocks large enough that the Python loop costs nothing
        and tuple(shape) == (*x.shape[1:-1], m)
        and x.device.type == "cpu"
        and not is_compiling()
    ):
        acc = angle_grad(gx[0], x[0], half)
        for b in range(1, x.shape[0]):
            g1, g2, x1, x2 = _pairs(gx[b], x[b], half)
            acc.addcmul_(g2, x1).addcmul_(g1, x2, value=-1)
        return acc
    g1, g2, x1, x2 = _pairs(gx, x, half)
    out = torch.addcmul(g2 * x1, g1, x2, value=-1)
    return out if shape is None else out.sum_to_size(shape)


class RotateAngles(torch.autograd.Function):
    """R(theta) x with gradients for x and for the angles theta (..., Dh/2) (broadcast against x's leading dims),
    given tables of theta computed outside (detached): backward R(theta)^T g for x, `angle_grad` summed to theta's
    shape for theta (module docstring). x in the tables' dtype; theta in any float dtype (float64 angles of a
    float32 rotation: the gradient is rounded to theta's dtype)."""

    @staticmethod
    def forward(ctx, x, theta, half, *tabs):
        ctx.half, ctx.theta_shape, ctx.theta_dtype = half, theta.shape, theta.dtype
        ctx.save_for_backward(x, *tabs)
        return _rotate(x, tabs, half, 1.0)

    @staticmethod
    def backward(ctx, g):
        x, *tabs = ctx.saved_tensors
        gx = _rotate(g.contiguous(), tabs, ctx.half, -1.0)
        gth = None
        if ctx.needs_input_grad[1]:
            gth = angle_grad(gx, x, ctx.half, ctx.theta_shape).to(ctx.theta_dtype)
        return (gx if ctx.needs_input_grad[0] else None), gth, None, *(None for _ in tabs)
