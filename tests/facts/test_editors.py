"""ROME / MEMIT / AlphaEdit closed forms on tiny linear cases with known exact answers (float64)."""

import pytest
import torch

from symformer.facts.editors import (
    alphaedit_update,
    key_second_moment,
    memit_update,
    null_space_projector,
    rome_update,
)

TOL = 1e-10


def _case(d_out=5, d_in=7, n0=20, n1=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    K0 = torch.randn(d_in, n0, generator=g, dtype=torch.float64)
    K1 = torch.randn(d_in, n1, generator=g, dtype=torch.float64)
    V1 = torch.randn(d_out, n1, generator=g, dtype=torch.float64)
    return W, K0, K1, V1


def test_rome_inserts_the_fact_and_is_optimal():
    W, K0, K1, V1 = _case()
    C = key_second_moment(K0)
    k, v = K1[:, 0], V1[:, 0]
    D = rome_update(W, C, k, v)
    assert torch.allclose((W + D) @ k, v, atol=TOL, rtol=0)
    assert torch.linalg.matrix_rank(D) == 1
    # KKT of min tr(D C D^T) s.t. D k = r: the gradient D C lies in span{a k^T}
    proj = torch.eye(7, dtype=torch.float64) - torch.outer(k, k) / (k @ k)
    assert (D @ C @ proj).abs().max() < TOL
    # inputs C^-1-orthogonal to k keep their outputs
    x = torch.randn(7, dtype=torch.float64)
    u = torch.linalg.solve(C, k)
    x = x - (x @ u) / (k @ u) * k
    assert torch.allclose((W + D) @ x, W @ x, atol=TOL, rtol=0)


def test_memit_matches_least_squares_reference():
    W, K0, K1, V1 = _case()
    lam = 0.7
    C = key_second_moment(K0)
    D = memit_update(W, C, K1, V1, lam)
    # independent reference: lam tr(D C D^T) + ||D K1 - R||^2 as one stacked least-squares problem (QR)
    L = torch.linalg.cholesky(lam * C)
    A = torch.cat([L, K1], 1)  # D A ~ [0, R]
    B = torch.cat([torch.zeros(5, 7, dtype=torch.float64), V1 - W @ K1], 1)
    ref = torch.linalg.lstsq(A.T, B.T).solution.T
    assert torch.allclose(D, ref, atol=1e-10, rtol=0)


def test_memit_without_preservation_interpolates():
    W, K0, K1, V1 = _case()
    D = memit_update(W, key_second_moment(K0), K1, V1, 0.0)
    assert torch.allclose((W + D) @ K1, V1, atol=1e-9, rtol=0)


def test_alphaedit_keeps_preserved_keys_exactly():
    W, _, K1, V1 = _case(d_in=8, n1=2)
    g = torch.Generator().manual_seed(3)
    K0 = torch.randn(8, 4, generator=g, dtype=torch.float64) @ torch.randn(4, 30, generator=g, dtype=torch.float64)
    C = key_second_moment(K0)  # rank 4: a 4-dim null space
    P = null_space_projector(C, 1e-8)
    assert torch.allclose(P @ P, P, atol=TOL) and int(torch.trace(P).round()) == 4
    D = alphaedit_update(W, P, K1, V1, l2=0.5)
    assert (D @ K0).abs().max() < 1e-9  # preserved outputs unchanged
    # reference: D = X U^T, ridge in null-space coordinates, by lstsq on the stacked system
    lam, U = torch.linalg.eigh(C)
    U0 = U[:, lam < 1e-8]
    A = torch.cat([U0.T @ K1, 0.5**0.5 * torch.eye(4, dtype=torch.float64)], 1)
    B = torch.cat([V1 - W @ K1, torch.zeros(5, 4, dtype=torch.float64)], 1)
    X = torch.linalg.lstsq(A.T, B.T).solution.T
    assert torch.allclose(D, X @ U0.T, atol=1e-10, rtol=0)


def test_editor_shape_errors_name_the_argument():
    W, K0, K1, V1 = _case()
    C = key_second_moment(K0)
    with pytest.raises(ValueError, match="C: got .shape"):
        rome_update(W, C[:3, :3], K1[:, 0], V1[:, 0])
    with pytest.raises(ValueError, match="values: got .shape"):
        memit_update(W, C, K1, V1[:, :2], 1.0)
    with pytest.raises(ValueError, match="tol"):
        null_space_projector(C, 0.0)
