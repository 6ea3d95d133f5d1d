"""The fast RoPE path (complex multiply, cached tables) against the reference cos/sin arithmetic."""

from __future__ import annotations

import warnings

import pytest
import torch

from symformer.positional import RoPE, apply_rotation, rotate_pairs
from symformer.positional.rope import generators_from_beta


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])
def test_apply_rotation_matches_rotate_pairs(pairing, dtype, grad):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=dtype).requires_grad_(grad)
    th = torch.randn(5, 4, generator=g, dtype=dtype)
    ref = rotate_pairs(x, th.cos(), th.sin(), pairing)
    out = apply_rotation(x, torch.polar(torch.ones_like(th), th), pairing)
    tol = 1e-14 if dtype == torch.float64 else 1e-6
    assert (out - ref).abs().max() <= tol
    assert out.requires_grad == grad


def test_apply_rotation_non_contiguous_and_low_precision():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(2, 5, 3, 9, generator=g, dtype=torch.float64)
    x = base[..., 1:].transpose(1, 2)  # odd storage offset, non-contiguous
    th = torch.randn(5, 4, generator=g, dtype=torch.float64)
    rot = torch.polar(torch.ones_like(th), th)
    ref = rotate_pairs(x, th.cos(), th.sin(), "interleaved")
    assert (apply_rotation(x, rot, "interleaved") - ref).abs().max() <= 1e-14
    xb = x.to(torch.bfloat16)
    out = apply_rotation(xb, rot, "half")
    assert out.dtype == torch.bfloat16


def test_generators_exponentiate_to_matrix():
    for pairing in ("interleaved", "half"):
        rope = RoPE(8, 2, pairing=pairing, mode="mixed").double()
        pos = torch.randn(6, 2, dtype=torch.float64)
        a = torch.einsum("nc,cij->nij", pos, rope.generators())
        assert (torch.linalg.matrix_exp(a) - rope.matrix(pos)).abs().max() <= 1e-13


def test_cache_hit_and_invalidation():
    rope = RoPE(8, 1).double()
    pos = torch.arange(6, dtype=torch.float64)[:, None]
    r1 = rope.rotation(pos)
    assert rope.rotation(pos.clone()) is r1  # same values: cached table reused
    r2 = rope.rotation(pos + 1)
    assert r2 is not r1 and not torch.equal(r2, r1)
    with torch.no_grad():
        rope.beta.mul_(2)  # in-place change of beta bumps its version: the cache must not be reused
    r3 = rope.rotation(pos + 1)
    assert not torch.equal(r3, r2)
    th = (pos + 1) @ rope.beta.T
    assert (r3 - torch.polar(torch.ones_like(th), th)).abs().max() <= 1e-15


def test_learnable_rope_gets_gradients_not_cache():
    rope = RoPE(8, 1, learnable=True).double()
    pos = torch.arange(4, dtype=torch.float64)[:, None]
    q = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    for _ in range(2):
        qr, kr = rope(q, q, pos + 0.5)
        (qr @ kr.mT).sum().backward()
    assert rope.beta.grad is not None and rope.beta.grad.abs().sum() > 0


def test_generators_from_beta_skew():
    beta = torch.randn(4, 3, dtype=torch.float64)
    L = generators_from_beta(beta, 8, "half")
    assert (L + L.mT).abs().max() == 0


def test_half_tables_path_matches_reference_and_gradcheck():
    """Half pairing with cached [cos, cos]/sin tables and the hand-written backward R^T = R(-theta)."""
    from symformer.positional.rope import _RotateHalf, apply_tables, half_tables

    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    th = torch.randn(5, 4, generator=g, dtype=torch.float64)
    tab = half_tables(th, torch.float64)
    ref = rotate_pairs(x, th.cos(), th.sin(), "half")
    out = apply_tables(x, tab, "half")
    assert (out - ref).abs().max() <= 1e-14
    gout = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, gout)
    (gref,) = torch.autograd.grad(ref, x, gout)
    assert (gx - gref).abs().max() <= 1e-14
    assert torch.autograd.gradcheck(lambda t: _RotateHalf.apply(t, tab[1], tab[2]), (x,))
    with torch.no_grad():
        assert (apply_tables(x, tab, "half") - ref).abs().max() <= 1e-14


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_bfloat16_matches_float64_reference(pairing):
    rope = RoPE(16, 1, pairing=pairing)
    pos = torch.arange(7, dtype=torch.float32)[:, None]
    x = torch.randn(2, 2, 7, 16, dtype=torch.float64)
    ref = rope.double().rotate(x, pos.double())
    out = rope.float().rotate(x.to(torch.bfloat16), pos)
    assert out.dtype == torch.bfloat16
    assert (out.double() - ref).abs().max() <= 0.05  # bf16 has 8 significant bits


def test_value_cache_works_in_inference_mode_for_learnable_beta():
    rope = RoPE(8, 1, pairing="half", learnable=True).double()
    pos = torch.arange(5, dtype=torch.float64)[:, None]
    with torch.inference_mode():
        t1 = rope.tables(pos, torch.float64)
        assert rope.tables(pos.clone(), torch.float64) is t1  # learnable beta, yet cached in inference
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        t2 = rope.tables(pos, torch.float64)
    assert t2 is not t1 and not t2[1].is_inference()  # inference tensors are never handed to autograd code
    rope.rotate(x, pos).sum().backward()  # training after inference: gradients reach beta
    assert rope.beta.grad is not None and rope.beta.grad.abs().sum() > 0
    assert "_tables_cache" not in rope.state_dict()


def _fresh_fused(monkeypatch, compiler=None) -> None:
    """The fused path for every input size, with no compiled keys yet; `compiler` stands in for the compiled
    kernel (None: the real torch.compile)."""
    from symformer.positional import _fused

    monkeypatch.setattr(_fused, "FUSED_MIN_NUMEL", 0)
    monkeypatch.setattr(_fused, "_STATE", {"fns": {}, "failed": set()})
    if compiler is not None:
        monkeypatch.setattr(_fused, "_compile_copy", lambda: compiler)


def test_fused_half_kernel_matches_eager_and_gradcheck(monkeypatch):
    """The compiled one-pass half rotation (_fused.py, used for large inputs) against the eager three-pass
    kernel and the reference arithmetic, forward, backward (R^T) and in inference mode, float64 and float32."""
    from symformer.positional import _fused
    from symformer.positional.rope import _half_kernel, _RotateHalf, half_tables

    g = torch.Generator().manual_seed(3)
    th = torch.randn(5, 4, generator=g, dtype=torch.float64)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    tab = half_tables(th, torch.float64)
    ref = rotate_pairs(x, th.cos(), th.sin(), "half")
    eager = _half_kernel(x.detach(), tab[1], tab[2])
    assert _fused.fused_half(x.detach(), tab[3], tab[4]) is None  # below FUSED_MIN_NUMEL: eager
    _fresh_fused(monkeypatch)
    fused = _fused.fused_half(x.detach(), tab[3], tab[4])
    assert fused is not None and (fused - eager).abs().max() <= 1e-15 and (fused - ref).abs().max() <= 1e-14
    back = _fused.fused_half(x.detach(), tab[3], tab[4], -1.0)  # R^T = R(-theta), the backward
    assert (back - rotate_pairs(x, th.cos(), -th.sin(), "half")).abs().max() <= 1e-14
    assert (_half_kernel(x.detach(), tab[1], tab[2], -1.0) - back).abs().max() <= 1e-15  # halves sliced off
    with torch.inference_mode():
        assert (_half_kernel(x.detach(), tab[1], tab[2]) - ref).abs().max() <= 1e-14
    assert torch.autograd.gradcheck(lambda t: _RotateHalf.apply(t, tab[1], tab[2]), (x,))
    assert torch.autograd.gradcheck(lambda t: _RotateHalf.apply(t, *tab[1:5]), (x,))
    x32, t32 = x.detach().float(), half_tables(th, torch.float32)
    assert (_half_kernel(x32, t32[1], t32[2]) - ref).abs().max() <= 1e-6
    assert len(_fused._STATE["failed"]) == 0


def test_fused_half_kernel_falls_back_when_compile_fails(monkeypatch):
    from symformer.positional import _fused
    from symformer.positional.rope import _half_kernel, half_tables

    def broken(*args):
        raise RuntimeError("no compiler")

    _fresh_fused(monkeypatch, broken)
    th = torch.randn(5, 4, dtype=torch.float64)
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    tab = half_tables(th, torch.float64)
    with pytest.warns(RuntimeWarning, match="fused half-pairing RoPE unavailable"):
        out = _half_kernel(x, tab[1], tab[2])
    assert (out - rotate_pairs(x, th.cos(), th.sin(), "half")).abs().max() <= 1e-14
    assert _fused._STATE["failed"] == {"cpu"}
    monkeypatch.setenv("SYMFORMER_FUSED_ROPE", "0")
    _fresh_fused(monkeypatch, broken)
    assert _fused.fused_half(x, tab[3], tab[4]) is None  # switched off: the compiler is never called


def test_fused_half_kernel_steps_aside_inside_a_users_compile(monkeypatch):
    """Under an outer torch.compile the eager kernel is traced into the user's graph: no nested compile."""
    from symformer.positional import _fused

    def never(*args):
        raise AssertionError("nested compile")

    _fresh_fused(monkeypatch, never)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the compile-failure fallback warns: it must not be what ran
        ones = torch.ones(5, 4, dtype=torch.float64)
        assert _fused.fused_half(x, ones, ones - 1) is None
    assert _fused._STATE["failed"] == set()


def test_fused_half_kernel_reuses_one_key_across_sequence_lengths(monkeypatch):
    """Batch and sequence dims are dynamic: new lengths reuse the compiled kernel (one key, same values)."""
    from symformer.positional import _fused
    from symformer.positional.rope import half_tables

    _fresh_fused(monkeypatch)
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    g = torch.Generator().manual_seed(4)
    for n in (5, 7, 11):
        th = torch.randn(n, 4, generator=g, dtype=torch.float64)
        x = torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64)
        tab = half_tables(th, torch.float64)
        out = _fused.fused_half(x, tab[3], tab[4])
        assert out is not None and (out - rotate_pairs(x, th.cos(), th.sin(), "half")).abs().max() <= 1e-14
        assert not hasattr(x, "_dynamo_dynamic_indices")  # the caller's tensor carries no dynamo marks
    assert len(_fused._STATE["fns"]) == 1 and not _fused._STATE["failed"]
    assert counters["stats"]["unique_graphs"] - before == 1  # later calls, unmarked, match the dynamic graph


def test_fused_half_kernel_compiles_past_dynamos_recompile_limit(monkeypatch):
    """Nine keys (more than torch._dynamo's recompile_limit of 8 per code object): every one runs a
    compiled graph of its own, not dynamo's eager fallback (each key compiles its own copy of the kernel)."""
    from torch._dynamo.utils import counters

    from symformer.positional import _fused
    from symformer.positional.rope import half_tables

    _fresh_fused(monkeypatch)
    g = torch.Generator().manual_seed(5)
    before = counters["stats"]["unique_graphs"]
    for dh in range(2, 20, 2):  # nine head dims, nine keys
        th = torch.randn(3, dh // 2, generator=g, dtype=torch.float64)
        x = torch.randn(2, 3, dh, generator=g, dtype=torch.float64)
        tab = half_tables(th, torch.float64)
        out = _fused.fused_half(x, tab[3], tab[4])
        assert out is not None and (out - rotate_pairs(x, th.cos(), th.sin(), "half")).abs().max() <= 1e-14
    assert len(_fused._STATE["fns"]) == 9 and not _fused._STATE["failed"]
    assert counters["stats"]["unique_graphs"] - before == 9


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("theta_shape", [(3, 5, 4), (2, 1, 5, 4), (5, 4)])
def test_rotate_angles_gradcheck(half, theta_shape):
    """_rotate.RotateAngles (learned angles: backward R^T g for x, gx_2 x_1 - gx_1 x_2 summed to theta's shape):
    gradcheck in float64 for per-head, batched and shared angles, both pairings."""
    from symformer.positional._rotate import RotateAngles
    from symformer.positional.rope import half_tables

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    th = torch.randn(*theta_shape, generator=g, dtype=torch.float64, requires_grad=True)

    def rot(x, th):
        with torch.no_grad():
            tabs = half_tables(th, torch.float64)[1:] if half else (torch.polar(torch.ones_like(th), th),)
        return RotateAngles.apply(x, th, half, *tabs)

    assert torch.autograd.gradcheck(rot, (x, th))
    ref = rotate_pairs(x, th.cos(), th.sin(), "half" if half else "interleaved")
    assert (rot(x, th) - ref).abs().max() <= 1e-14


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_learned_frequencies_gradients_match_autograd(pairing, dtype):
    """RoPE-Mixed with learned per-head beta: forward and gradients (x and beta) through the hand-written backward
    equal autograd through rotate_pairs on the same float64 angles, to the dtype's rounding."""
    torch.manual_seed(0)
    rope = RoPE(8, 2, pairing=pairing, mode="mixed", n_heads=3, seed=0)
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64).to(dtype).requires_grad_()
    pos = torch.randint(0, 5, (6, 2))
    out = rope.rotate(x, pos)
    gout = torch.randn_like(out)
    gx, gb = torch.autograd.grad(out, (x, rope.beta), gout)
    beta = rope.beta.detach().double().requires_grad_()
    th = pos.double().unsqueeze(-3) @ beta.transpose(-1, -2)
    xd = x.detach().double().requires_grad_()
    ref = rotate_pairs(xd, th.cos(), th.sin(), pairing)
    rgx, rgb = torch.autograd.grad(ref, (xd, beta), gout.double())
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    assert out.dtype == dtype and (out.double() - ref).abs().max() <= tol
    assert (gx.double() - rgx).abs().max() <= tol
    # beta's gradient has beta's dtype (a float32 master): its rounding, or the input's where coarser
    assert gb.dtype == rope.beta.dtype
    assert (gb.double() - rgb).abs().max() <= max(tol, 1e-6) * 10 * float(rgb.abs().max())


@pytest.mark.parametrize("half", [False, True])
def test_angle_grad_in_place_batch_sum_equals_reduction(half):
    """The in-place accumulation over the batch (per-sample blocks of >= 2^16 elements on the CPU) equals the
    vectorised product and its sum; shared angles (N, Dh/2) take the reduction."""
    from symformer.positional._rotate import angle_grad

    g = torch.Generator().manual_seed(4)
    gx, x = (torch.randn(3, 2, 256, 128, generator=g, dtype=torch.float64) for _ in range(2))
    ref = angle_grad(gx, x, half)
    assert ref.shape == (3, 2, 256, 64)
    assert (angle_grad(gx, x, half, (2, 256, 64)) - ref.sum(0)).abs().max() <= 1e-12
    assert (angle_grad(gx, x, half, (256, 64)) - ref.sum((0, 1))).abs().max() <= 1e-12
