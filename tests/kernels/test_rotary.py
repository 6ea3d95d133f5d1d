"""The fused rotary kernel (kernels/rotary.py) against its torch reference and a float64 reference, on CPU tensors
under the Triton interpreter (TRITON_INTERPRET=1), and through the parts that use it (RoPE, STRING, PartialRotary).

The kernel picks the interpreter per launch (kernels/_rotary_triton.kernel_for), so the `interpret` fixture sets
the variable with monkeypatch for these tests only: the rest of the suite keeps running with it unset.
Bounds: float32 within a few float32 roundings of the float64 reference; float16 within half a unit in the last
place (one rounding); bfloat16 within one unit, because the interpreter casts float32 to bfloat16 by truncation
(numpy has no bfloat16; triton/runtime/interpreter.py `cast_impl` passes no rounding mode), where a GPU rounds to
nearest.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from symformer.kernels import _dispatch, rotary
from symformer.positional import STRING, PartialRotary, RoPE

pytestmark = pytest.mark.skipif(not _dispatch.triton_available(), reason="triton does not import (symformer[triton])")


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("SYMFORMER_KERNELS", raising=False)


def _tables(n: int, m: int, lead: tuple = (), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 angles (*lead, n, m) and their float32 cos / sin, each rounded once (docs/precision.md)."""
    th = 8 * torch.rand(*lead, n, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return th, th.cos().float(), th.sin().float()


def _ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(torch.finfo(dtype).tiny))))


def _within(y: torch.Tensor, ref64: torch.Tensor, x: torch.Tensor) -> float:
    """max |y - ref64| / (ulp(ref64) in y's dtype + 4 eps_32 max|x_row|): the rounding of y (0.5: once; 1.0:
    a truncation) on top of float32 work (the tables' rounding and the float32 products, relative to the row's size
    where a pair's result cancels)."""
    slack = 4 * torch.finfo(torch.float32).eps * x.double().abs().amax(-1, keepdim=True)
    return float(((y.double() - ref64).abs() / (_ulp(ref64, y.dtype) + slack)).max())


BOUND = {torch.float32: 1.0, torch.float16: 0.5 + 1e-3, torch.bfloat16: 1.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_forward_and_backward_match_the_references(interpret, dtype, pairing, rotary_dim):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, 8, generator=g).to(dtype).requires_grad_()
    th, c, s = _tables(5, rotary_dim // 2)
    y = rotary.rotate(x, c, s, pairing, rotary_dim, kernel="triton")
    ref = rotary.rotate_reference(x.detach(), c, s, pairing, rotary_dim)
    x64 = x.detach().double().requires_grad_()
    ref64 = rotary.rotate_reference(x64, th.cos(), th.sin(), pairing, rotary_dim)
    assert y.dtype == dtype and _within(y.detach(), ref64.detach(), x.detach()) <= BOUND[dtype]
    assert (y.detach().float() - ref.float()).abs().max() <= 2 * _ulp(ref.float(), dtype).max()
    assert torch.equal(y.detach()[..., rotary_dim:], x.detach()[..., rotary_dim:])  # pass-through copied exactly
    gy = torch.randn(y.shape, generator=g).to(dtype)
    y.backward(gy)
    ref64.backward(gy.double())  # the backward is R(-theta) g: one rounding of it, like the forward
    assert x.grad.dtype == dtype and _within(x.grad, x64.grad, gy) <= BOUND[dtype]


def test_broadcast_tables_offsets_and_in_place(interpret):
    """Tables shared by batch and heads (N, m), per sample (B, 1, N, m), per head (B, H, N, m); a decoding step (N = 1
    at offset 41: its table row); a strided x (the rotary block of a wider head); in place."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 4, 8, generator=g)
    for lead in ((), (2, 1), (2, 3)):
        th, c, s = _tables(4, 4, lead)
        y = rotary.rotate(x, c, s, kernel="triton")
        assert _within(y, rotary.rotate_reference(x.double(), th.cos(), th.sin()), x) <= 1.0
    th, c, s = _tables(64, 4)
    step = x[:, :, :1]
    ref = rotary.rotate_reference(step.double(), th[41:42].cos(), th[41:42].sin(), "interleaved")
    assert _within(rotary.rotate(step, c[41:42], s[41:42], "interleaved", kernel="triton"), ref, step) <= 1.0
    wide = torch.randn(2, 3, 4, 12, generator=g)[..., 2:10]  # last dim contiguous, rows strided
    ref = rotary.rotate_reference(wide.double(), th[:4].cos(), th[:4].sin())
    assert _within(rotary.rotate(wide, c[:4], s[:4], kernel="triton"), ref, wide) <= 1.0
    xi = x.clone()
    out = rotary.rotate_(xi, c[:4], s[:4], rotary_dim=8, kernel="triton")
    assert out is xi and torch.equal(xi, rotary.rotate(x, c[:4], s[:4], kernel="triton"))
    with pytest.raises(ValueError, match="x.*requires grad"):
        rotary.rotate_(x.clone().requires_grad_(), c[:4], s[:4], kernel="triton")


def test_rope_parts_take_the_kernel(interpret):
    """RoPE (both pairings, 2-D axial and mixed angles, per-sample positions, decoding at an offset), STRING (P, then
    the kernel; learned frequencies and P get their gradients) and PartialRotary: kernel="triton" equals the torch
    path, forward and backward."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, 6, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 6, 8, generator=g, requires_grad=True)
    cases = [
        (RoPE(8, pairing="interleaved"), torch.arange(6)),
        (RoPE(8, 2, mode="axial"), torch.randint(0, 5, (6, 2), generator=g)),
        (RoPE(8, 2, mode="mixed", seed=0), torch.randn(2, 6, 2, generator=g)),  # per-sample positions
        (STRING(8, 2, init_scale=0.3, seed=0), torch.randn(6, 2, generator=g)),
        (PartialRotary(RoPE(4), head_dim=8), torch.arange(6)),
    ]
    for part, pos in cases:
        outs = {}
        for kern in ("torch", "triton"):
            part.kernel = kern
            part.zero_grad()
            q.grad = k.grad = None
            qr, kr = part(q, k, pos)
            (qr.square().sum() + (qr * kr).sum()).backward()
            grads = [t.grad.clone() for t in (q, k)] + [p.grad.clone() for p in part.parameters() if p.grad is not None]
            outs[kern] = (qr.detach(), kr.detach(), grads)
        for a, b in zip(outs["torch"][:2] + tuple(outs["torch"][2]), outs["triton"][:2] + tuple(outs["triton"][2])):
            assert (a - b).abs().max() <= 1e-5 * (1 + a.abs().max()), type(part).__name__
        assert len(outs["torch"][2]) == len(outs["triton"][2])
    rope = RoPE(8, kernel="triton")  # decoding: one query at position 41 against the cached keys' positions
    q1 = torch.randn(1, 2, 1, 8, generator=g)
    ref = RoPE(8, kernel="torch")(q1, k.detach(), torch.tensor([41]), torch.arange(6))
    got = rope(q1, k.detach(), torch.tensor([41]), torch.arange(6))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, ref))


def test_string_fold_then_the_kernel_alone(interpret):
    """STRING.fold merges P into W_Q / W_K; the folded layer then runs the RoPE kernel alone, equal to the unfolded
    layer (float32 here: the kernel's dtype; the float64 equality is tests/positional/test_string.py)."""
    torch.manual_seed(0)
    part = STRING(8, init_scale=0.3, seed=0, kernel="triton")
    wq, wk = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
    x = torch.randn(1, 5, 16)

    def logits():
        q, k = (w(x).view(1, 5, 2, 8).transpose(1, 2) for w in (wq, wk))
        q, k = part(q, k, torch.arange(5))
        return q @ k.transpose(-1, -2)

    with torch.no_grad():
        before = logits()
        part.fold(wq, wk)
        assert part.is_folded and (logits() - before).abs().max() <= 1e-5


def test_unsupported_inputs_fall_back_or_refuse(interpret, monkeypatch):
    th, c, s = _tables(4, 4)
    x64 = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="kernel.*float64"):
        rotary.rotate(x64, c, s, kernel="triton")
    with pytest.raises(ValueError, match="kernel.*non-contiguous last dim"):
        rotary.rotate(torch.randn(1, 1, 8, 4).transpose(-1, -2), c, s, kernel="triton")
    with pytest.raises(ValueError, match="kernel.*head dim 1024 above 512"):
        rotary.rotate(torch.randn(1, 4, 1024), c[:, :1].expand(4, 512), s[:, :1].expand(4, 512), kernel="triton")
    with pytest.raises(ValueError, match="kernel.*float64"):
        RoPE(8, kernel="triton").double()(x64, x64, torch.arange(4))
    with pytest.raises(ValueError, match="rotary_dim"):
        rotary.rotate(torch.randn(4, 8), c, s, rotary_dim=6, kernel="triton")
    # "auto" on CUDA tensors the kernel cannot take: the torch reference, one warning
    monkeypatch.setattr(_dispatch, "_where", lambda tensors: "cuda")
    monkeypatch.setattr(_dispatch, "_WARNED", set())
    with pytest.warns(UserWarning, match="rotary kernel does not take dtype torch.float64"):
        y = rotary.rotate(x64, c, s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(rotary.rotate(x64, c, s), y)
    assert torch.equal(y, rotary.rotate_reference(x64, c, s))


def test_kernel_option_is_validated():
    with pytest.raises(ValueError, match="kernel.*'gpu'"):
        RoPE(8, kernel="gpu")
    assert RoPE(8).kernel is None and STRING(8, kernel="torch").kernel == "torch"


@pytest.mark.slow
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_larger_shapes(interpret, pairing):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 4, 300, 128, generator=g, dtype=torch.bfloat16)
    th, c, s = _tables(300, 48)
    y = rotary.rotate(x, c, s, pairing, rotary_dim=96, kernel="triton")
    assert _within(y, rotary.rotate_reference(x.double(), th.cos(), th.sin(), pairing, 96), x) <= 1.0
