"""expm_skew (scaling-and-squaring Pade, differentiated through the approximant) against
torch.linalg.matrix_exp in float64, gradcheck, bad input."""

from __future__ import annotations

import pytest
import torch

from symformer.positional.expm import (
    THETA_7_SINGLE,
    THETA_12_TAYLOR_SINGLE,
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


def _single_powers(a: torch.Tensor, degree: int) -> torch.Tensor:
    from symformer.positional.expm import _taylor_powers

    return (_taylor_powers(a) if degree == 12 else _scaled_powers(a, THETA_7_SINGLE))[0].double()


@pytest.mark.parametrize("degree,theta", [(7, THETA_7_SINGLE), (12, THETA_12_TAYLOR_SINGLE)])
@pytest.mark.parametrize("n", [4, 16])
def test_float32_paths_reach_single_precision(n, degree, theta):
    """The float32 paths (Taylor-12 since it needs no solve, theta_12 = 1.46; Pade-7 before it, theta_7 = 3.93;
    both for u = 2^-24). Run in float64, only their truncation error shows: below u_single before squaring,
    doubled by each of its s squarings. Run in float32, expm_skew is at least as accurate per matrix as
    torch.linalg.matrix_exp in float32, over the norm sweep and at theta."""
    u = 2.0**-24
    a = _skew_batch(n + 1, n, NORMS + [theta, 0.99 * theta, 3.9]).requires_grad_(True)
    s = _single_powers(a.detach(), degree)
    ours, ref = _expm_flat(a, degree), torch.linalg.matrix_exp(a)
    assert ((ours - ref).abs().amax((-1, -2)) <= 2 * u * 2**s).all()
    g = torch.randn(ours.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (ga,), (gr,) = torch.autograd.grad(ours, a, g), torch.autograd.grad(ref, a, g)
    assert ((ga - gr).abs().amax((-1, -2)) / gr.abs().amax((-1, -2)).clamp(min=1) <= 8 * u * 2**s).all()
    a32 = a.detach().float()
    err32 = (_expm_flat(a32, degree).double() - ref).abs().amax((-1, -2))
    err_torch32 = (torch.linalg.matrix_exp(a32).double() - ref).abs().amax((-1, -2))
    assert (err32 <= 2 * err_torch32 + 4 * u).all()
    if degree == 12:  # the default float32 path: orthogonal (T0.11) to a few u per squaring, as Pade-7 was
        e = expm_skew(a32)
        assert torch.equal(e, _expm_flat(a32, 12))
        drift = (e.mT @ e - torch.eye(n)).abs().amax((-1, -2)).double()
        assert (drift <= 4 * u * 2**s).all()


def test_theta_12_is_the_single_precision_backward_error_bound():
    """theta_12: the largest theta with sum_{k>12} |c_k| theta^(k-1) <= 2^-24, where h(x) = log(e^-x T_12(x))
    = sum c_k x^k (Al-Mohy & Higham 2009, Sec. 3), c_k in exact rationals up to k = 90 (the tail beyond is
    below 1e-40 at theta <= 2)."""
    from fractions import Fraction
    from math import factorial

    m, top, u = 12, 90, 2.0**-24
    y = [Fraction(0)] * (top + 1)  # e^-x T_12(x) - 1 = sum_{k>12} y_k x^k
    for k in range(m + 1, top + 1):
        y[k] = sum(Fraction((-1) ** (k - j), factorial(k - j) * factorial(j)) for j in range(m + 1))
    c, p = [Fraction(0)] * (top + 1), [Fraction(1)] + [Fraction(0)] * top
    for i in range(1, top // (m + 1) + 1):  # log(1 + y) = sum (-1)^(i+1) y^i / i
        p = [sum(p[a] * y[k - a] for a in range(k - m) if p[a]) for k in range(top + 1)]
        c = [ck + Fraction((-1) ** (i + 1), i) * pk for ck, pk in zip(c, p)]
    bound = lambda t: sum(abs(float(c[k])) * t ** (k - 1) for k in range(m + 1, top + 1))  # noqa: E731
    assert all(c[k] == 0 for k in range(m + 1))
    assert bound(THETA_12_TAYLOR_SINGLE) <= u < bound(THETA_12_TAYLOR_SINGLE * (1 + 1e-9))


def test_gradcheck_float32_paths():
    a = _skew_batch(5, 4, [0.1, 3.0, 12.0]).requires_grad_(True)
    for degree in (7, 12):
        assert torch.autograd.gradcheck(lambda t, d=degree: _expm_flat(t, d), (a,))
    g = torch.Generator().manual_seed(6)
    b = (torch.randn(3, 5, 5, generator=g, dtype=torch.float64) * 2).requires_grad_(True)  # not skew
    assert (_expm_flat(b, 12) - torch.linalg.matrix_exp(b)).abs().max() <= 1e-5 * torch.linalg.matrix_exp(b).abs().max()
    assert torch.autograd.gradcheck(lambda t: _expm_flat(t, 12), (b,))


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
