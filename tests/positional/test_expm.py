"""expm_skew (scaling-and-squaring Pade, differentiated through the approximant) against
torch.linalg.matrix_exp in float64, gradcheck, bad input."""
from __future__ import annotations

import pytest
import torch

from symformer.positional.expm import (
    THETA_7_SINGLE,
    _expm_flat,
    _scaled_powers,
    expm_skew,
    squarings_needed,
)


def _skew_batch(seed: int, n: int, scales: list[float]) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(len(scales), n, n, generator=g, dtype=torch.float64)
    a = a - a.mT
    return a / a.abs().sum(-2).amax(-1)[:, None, None] * torch.tensor(scales, dtype=torch.float64)[:, None, None]


# 1-norms from 1e-8 (no squaring) to 1000; several in one batch (different s per matrix)
NORMS = [1e-8, 1e-3, 0.3, 2.0, 5.3, 5.5, 20.0, 80.0, 300.0, 1000.0]


@pytest.mark.parametrize("n", [2, 7, 16])
def test_values_and_gradients_match_matrix_exp(n):
    a = _skew_batch(n, n, NORMS).requires_grad_(True)
    assert squarings_needed(a) >= 6  # the sweep reaches many squarings (8 by the 1-norm alone)
    ours, ref = expm_skew(a, check=True), torch.linalg.matrix_exp(a)
    assert (ours - ref).abs().max() <= 1e-12
    g = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (ga,) = torch.autograd.grad(ours, a, g)
    (gr,) = torch.autograd.grad(ref, a, g)
    assert ((ga - gr).abs().amax((-1, -2)) / gr.abs().amax((-1, -2)).clamp(min=1)).max() <= 1e-12


def test_orthogonal_and_batch_shapes():
    a = _skew_batch(3, 6, [0.5, 50.0, 7.0, 0.0, 3.0, 9.0]).view(2, 3, 6, 6)
    e = expm_skew(a)
    assert e.shape == (2, 3, 6, 6)
    assert (e.mT @ e - torch.eye(6, dtype=torch.float64)).abs().max() <= 1e-13  # exp(skew) in SO(n), T0.11
    assert expm_skew(torch.zeros(0, 4, 4)).shape == (0, 4, 4)
    f = expm_skew(a.float())
    assert f.dtype == torch.float32 and (f.double() - e).abs().max() <= 1e-5


@pytest.mark.parametrize("n", [4, 16])
def test_degree7_float32_path_reaches_single_precision(n):
    """The float32 path (degree 7, theta_7 = 3.93 for u = 2^-24). Run in float64, only its truncation error
    shows: below u_single before squaring, doubled by each of its s squarings. Run in float32, it is at least
    as accurate per matrix as torch.linalg.matrix_exp in float32, over the norm sweep and at theta_7."""
    u = 2.0 ** -24
    a = _skew_batch(n + 1, n, NORMS + [THETA_7_SINGLE, 3.9]).requires_grad_(True)
    s = _scaled_powers(a.detach(), THETA_7_SINGLE)[0].double()
    ours, ref = _expm_flat(a, 7), torch.linalg.matrix_exp(a)
    assert ((ours - ref).abs().amax((-1, -2)) <= 2 * u * 2 ** s).all()
    g = torch.randn(ours.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (ga,), (gr,) = torch.autograd.grad(ours, a, g), torch.autograd.grad(ref, a, g)
    assert ((ga - gr).abs().amax((-1, -2)) / gr.abs().amax((-1, -2)).clamp(min=1) <= 8 * u * 2 ** s).all()
    a32 = a.detach().float()
    err32 = (expm_skew(a32).double() - ref).abs().amax((-1, -2))
    err_torch32 = (torch.linalg.matrix_exp(a32).double() - ref).abs().amax((-1, -2))
    assert (err32 <= 2 * err_torch32 + 4 * u).all()


def test_gradcheck_degree7_path():
    a = _skew_batch(5, 4, [0.1, 3.0, 12.0]).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: _expm_flat(t, 7), (a,))


def test_gradcheck_mixed_squarings():
    a = _skew_batch(4, 4, [0.1, 3.0, 12.0]).requires_grad_(True)
    assert torch.autograd.gradcheck(expm_skew, (a,))
    assert torch.autograd.gradgradcheck(expm_skew, (a[:1].detach().requires_grad_(True),))


def test_bad_input():
    with pytest.raises(ValueError, match="a: .*square"):
        expm_skew(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="a: .*square"):
        expm_skew(torch.zeros(4))
    with pytest.raises(ValueError, match="a: .*skew"):
        expm_skew(torch.eye(3), check=True)
    expm_skew(torch.eye(3))  # unchecked: the general algorithm still applies
    with pytest.raises(TypeError, match="bfloat16"):
        expm_skew(torch.zeros(3, 3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="int64"):
        expm_skew(torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="a: .*Tensor"):
        expm_skew([[0.0]])


def test_square_sorted_prefixes_equals_per_matrix_squaring():
    """_square sorts the batch by its number of squarings and squares prefixes: each matrix must come out
    exactly as if squared alone (same products), back in the input order, with its gradient."""
    from symformer.positional.expm import _square
    g = torch.Generator().manual_seed(7)
    r = torch.randn(7, 5, 5, generator=g, dtype=torch.float64).div_(3).requires_grad_(True)
    s = torch.tensor([2, 0, 3, 2, 1, 0, 3])
    out = _square(r, s)
    for i in range(7):
        ref = r[i]
        for _ in range(int(s[i])):
            ref = ref @ ref
        assert torch.equal(out[i], ref)
    assert torch.autograd.gradcheck(lambda t: _square(t, s), (r,))
    assert torch.equal(_square(r, torch.zeros(7, dtype=torch.long)), r)
