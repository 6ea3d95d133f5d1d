"""The Triton side of the rotary kernel (kernels/rotary.py is the API and the torch reference).

Imported only where a kernel runs (rotary.py imports it at the first launch, or at its own import on a machine with
CUDA and Triton): importing Triton costs ~0.4 s that the CPU path never needs. Without Triton this module still
imports (`AVAILABLE` False), so tools that walk every module keep working.

One program rotates BLOCK_N rows of one (batch, head) pair: it reads both halves of every rotary pair (u, u + M)
for half pairing or (2u, 2u + 1) for interleaved, the float32 cos / sin of the pairs' angles at those rows (read
through their strides: a table broadcast over heads or batch has stride 0 there, the complex table of interleaved
pairing is read as its strided real / imaginary parts, no copy), rotates in float32 and rounds once to the output's
dtype (docs/precision.md). SIGN = -1 rotates by -theta: R(theta)^T, the backward. COPY_PASS copies the coordinates
[ROT, DH) that partial rotary leaves unrotated (not needed in place).

The kernel is built twice from one Python function: as a compiled `JITFunction` for CUDA tensors and as an
`InterpretedFunction` for CPU tensors under TRITON_INTERPRET=1. `triton.jit` reads TRITON_INTERPRET when it
decorates (at import), so a test that sets the variable later would still get the compiled kernel; choosing per
call (`kernel_for`) makes the interpreter follow the variable at launch time.
"""

from __future__ import annotations

import torch

from symformer._torch_compat import TRITON_OP
from symformer.kernels._dispatch import interpreting

try:
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    AVAILABLE = True
except ImportError:  # pragma: no cover - the triton extra is not installed
    AVAILABLE = False


def _rotary_fwd(
    X,
    C,
    S,
    OUT,
    H,
    N,
    sxb,
    sxh,
    sxn,
    scb,
    sch,
    scn,
    scu,
    ssb,
    ssh,
    ssn,
    ssu,
    sob,
    soh,
    son,
    SIGN: tl.constexpr,
    M: tl.constexpr,
    ROT: tl.constexpr,
    DH: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    COPY_PASS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    g = tl.program_id(0)
    b = (g // H).to(tl.int64)
    h = (g % H).to(tl.int64)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ru = tl.arange(0, BLOCK_M)
    rows = rn.to(tl.int64)[:, None]
    mask = (rn[:, None] < N) & (ru[None, :] < M)
    c = tl.load(C + b * scb + h * sch + rows * scn + ru[None, :] * scu, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(S + b * ssb + h * ssh + rows * ssn + ru[None, :] * ssu, mask=mask, other=0.0).to(tl.float32)
    if SIGN < 0:
        s = -s
    if INTERLEAVED:
        i1 = 2 * ru
        i2 = 2 * ru + 1
    else:
        i1 = ru
        i2 = ru + M
    xrow = X + b * sxb + h * sxh + rows * sxn
    orow = OUT + b * sob + h * soh + rows * son
    x1 = tl.load(xrow + i1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(xrow + i2[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(orow + i1[None, :], (x1 * c - x2 * s).to(OUT.dtype.element_ty), mask=mask)
    tl.store(orow + i2[None, :], (x2 * c + x1 * s).to(OUT.dtype.element_ty), mask=mask)
    if COPY_PASS:
        rp = ROT + tl.arange(0, BLOCK_P)
        pmask = (rn[:, None] < N) & (rp[None, :] < DH)
        xp = tl.load(xrow + rp[None, :], mask=pmask, other=0.0)
        tl.store(orow + rp[None, :], xp.to(OUT.dtype.element_ty), mask=pmask)


if AVAILABLE:
    _COMPILED = JITFunction(_rotary_fwd)
    _INTERPRETED = InterpretedFunction(_rotary_fwd)
else:  # pragma: no cover
    _COMPILED = _INTERPRETED = None


def kernel_for(x: torch.Tensor):
    """The compiled kernel for CUDA tensors, the interpreted one for CPU tensors (TRITON_INTERPRET=1)."""
    return _INTERPRETED if x.device.type == "cpu" and interpreting() else _COMPILED


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def launch(kern, x4, c4, s4, out4, sign: int, interleaved: bool, rotary_dim: int, copy_pass: bool) -> None:
    """Launch `kern` (a JITFunction, InterpretedFunction or its torch.library.wrap_triton) on 4-D views
    x4, out4 (B, H, N, Dh) and tables c4, s4 (B, H, N, rotary_dim / 2) (stride 0 where broadcast)."""
    bsz, heads, n, dh = x4.shape
    m = rotary_dim // 2
    block_m = _next_pow2(m)
    block_n = max(1, min(_next_pow2(n), 4096 // block_m))
    grid = (bsz * heads, triton.cdiv(n, block_n))
    kern[grid](
        x4,
        c4,
        s4,
        out4,
        heads,
        n,
        x4.stride(0),
        x4.stride(1),
        x4.stride(2),
        *c4.stride(),
        *s4.stride(),
        out4.stride(0),
        out4.stride(1),
        out4.stride(2),
        SIGN=sign,
        M=m,
        ROT=rotary_dim,
        DH=dh,
        INTERLEAVED=interleaved,
        COPY_PASS=copy_pass and rotary_dim < dh,
        BLOCK_N=block_n,
        BLOCK_M=block_m,
        BLOCK_P=_next_pow2(max(1, dh - rotary_dim)),
    )


if AVAILABLE and TRITON_OP and torch.cuda.is_available():
    # torch.compile(fullgraph=True) sees through a triton_op: inductor traces the launch and schedules the kernel.
    # Registered where CUDA is (the op launches the compiled kernel only): triton_op imports torch._inductor (~5 s),
    # which the interpreter's tests on a CPU machine do not need
    @torch.library.triton_op("symformer::rotary", mutates_args={"out"})
    def _rotary_op(
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        out: torch.Tensor,
        sign: int,
        interleaved: bool,
        rotary_dim: int,
        copy_pass: bool,
    ) -> None:
        launch(torch.library.wrap_triton(_COMPILED), x, cos, sin, out, sign, interleaved, rotary_dim, copy_pass)

    OP = torch.ops.symformer.rotary
else:
    OP = None
