"""Cayley transform (ESPR T3.1-T3.3): orthogonality, determinant, inverse, gradcheck, bad input."""

from __future__ import annotations

import pytest
import torch

from symformer.positional.cayley import cayley, check_skew, inverse_cayley, skew


def _rand_skew(n: int, batch: int = 1000, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return skew(torch.randn(batch, n, n, generator=g, dtype=torch.float64) * scale)


@pytest.mark.parametrize("n", [2, 5, 16])
def test_cayley_is_special_orthogonal(n):
    # T3.2 over 1,000 random skew matrices per size, including large ||S|| (scale 10)
    s = torch.cat([_rand_skew(n, 500), _rand_skew(n, 500, seed=1, scale=10.0)])
    p = cayley(s)
    eye = torch.eye(n, dtype=torch.float64)
    assert (p.mT @ p - eye).abs().max() <= 1e-12
    assert (torch.linalg.det(p) - 1).abs().max() <= 1e-11


def test_inverse_cayley_round_trip():
    s = _rand_skew(6, 200)
    s_back = inverse_cayley(cayley(s))
    assert (s_back - s).abs().max() <= 1e-10
    assert (s_back + s_back.mT).abs().max() <= 1e-12  # T3.3: S_Q is skew


def test_inverse_cayley_rejects_eigenvalue_minus_one():
    q = -torch.eye(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="Q"):
        inverse_cayley(q)


def test_cayley_gradcheck():
    a = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: cayley(skew(a)), (a,))


def test_bad_input():
    with pytest.raises(ValueError, match="S: .*skew-symmetric"):
        cayley(torch.randn(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="S: .*square"):
        cayley(torch.zeros(3, 4))
    with pytest.raises(TypeError, match="S"):
        cayley([[0.0]])
    with pytest.raises(ValueError, match="generators"):
        check_skew("generators", torch.eye(3))
    with pytest.raises(ValueError, match="finite"):
        cayley(torch.full((2, 2), float("nan")))
