"""The public Haar draw (attention/favor.py) and operator norm (positional/diagnostics.py) the espr audit builds on."""

from __future__ import annotations

import pytest
import torch

from symformer.attention.favor import haar_orthogonal
from symformer.positional.diagnostics import operator_norm


def test_haar_orthogonal_is_orthogonal_in_float64():
    q = haar_orthogonal(6, torch.Generator().manual_seed(0), n=500)
    assert q.shape == (500, 6, 6) and q.dtype == torch.float64
    assert (q.mT @ q - torch.eye(6, dtype=torch.float64)).abs().max() < 1e-14
    one = haar_orthogonal(6, torch.Generator().manual_seed(0))
    assert one.shape == (6, 6) and (one.T @ one - torch.eye(6, dtype=torch.float64)).abs().max() < 1e-14


def test_haar_orthogonal_is_uniform_in_distribution():
    """Haar: E[Q] = 0 and E[Q_ij^2] = 1/d. With 20000 draws of 4x4 the mean of each entry has SE 0.5/sqrt(20000)
    = 0.0035; 6 SE (two-sided normal tail 2e-9 per entry, 16 entries) bounds both checks."""
    q = haar_orthogonal(4, torch.Generator().manual_seed(1), n=20000)
    assert q.mean(0).abs().max() < 6 * 0.5 / 20000**0.5
    # Var(Q_ij^2) for Haar O(4) is 2/(d(d+2)) - 1/d^2 < 0.03: SE of the mean of Q_ij^2 is < 0.0013
    assert ((q**2).mean(0) - 0.25).abs().max() < 6 * 0.0013
    # the sign fix matters: without it LAPACK's Q has a biased first column sign
    assert abs(float(q[:, 0, 0].mean())) < 6 * 0.5 / 20000**0.5


def test_haar_orthogonal_bad_input():
    with pytest.raises(ValueError, match="d"):
        haar_orthogonal(0, torch.Generator())
    with pytest.raises(TypeError, match="n"):
        haar_orthogonal(3, torch.Generator(), n=2.0)


def test_operator_norm_is_the_largest_singular_value():
    a = torch.randn(10, 5, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    want = torch.linalg.svdvals(a)[..., 0]
    assert (operator_norm(a) - want).abs().max() < 1e-13
