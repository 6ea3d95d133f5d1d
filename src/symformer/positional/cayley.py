"""Cayley transform between skew-symmetric matrices and SO(n) (ESPR Tier 3).

`cayley(S) = (I - S)(I + S)^{-1}` (T3.1) lies in SO(n) for every skew S (T3.2); `inverse_cayley`
maps back every Q in SO(n) without eigenvalue -1 (T3.3). Both use `torch.linalg.solve`, never an
explicit inverse, and are differentiable (gradcheck in tests/positional/test_cayley.py).
"""

from __future__ import annotations

import torch

from symformer._validation import check_tensor, fail


def skew(a: torch.Tensor) -> torch.Tensor:
    """a - a^T on the last two dims: the unconstrained parametrisation of skew matrices.

    Args:
        a (..., n, n): any square matrices.

    Returns:
        s (..., n, n): a - a^T, skew-symmetric.

    Examples:
        >>> import torch
        >>> from symformer.positional import skew
        >>> s = skew(torch.randn(2, 4, 4))
        >>> torch.equal(s.transpose(-1, -2), -s)
        True
    """
    return a - a.transpose(-1, -2)


def check_square(name: str, m: torch.Tensor) -> torch.Tensor:
    check_tensor(name, m)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        fail(name, f"shape {tuple(m.shape)}", "a (..., n, n) square matrix (batch of square matrices)")
    return m


def skew_error(s: torch.Tensor) -> torch.Tensor:
    """max |S + S^T| (0 for an exactly skew matrix)."""
    return (s + s.transpose(-1, -2)).abs().amax() if s.numel() else s.new_zeros(())


def check_skew(name: str, s: torch.Tensor, tol: float | None = None) -> torch.Tensor:
    """ValueError unless s is (a batch of) square skew-symmetric matrices up to `tol`
    (default: 1e3 * machine epsilon of its dtype times max(1, max|s|)).

    Args:
        name (str): the argument name the error message gives.
        s (..., n, n): the matrices to check.
        tol (float | None): the largest max|S + S^T| accepted.

    Returns:
        s (..., n, n): s itself.

    Raises:
        ValueError: s is not square or not skew up to tol.

    Examples:
        >>> import torch
        >>> from symformer.positional import check_skew, skew
        >>> s = skew(torch.randn(3, 3))
        >>> check_skew("S", s) is s
        True
        >>> check_skew("S", torch.eye(3))
        Traceback (most recent call last):
        ...
        ValueError: S: got 'a matrix with max|S + S^T| = 2', expected a skew-symmetric matrix ...
    """
    check_square(name, s)
    if s.device.type == "meta":  # no values to check (HF's from_pretrained builds modules on meta first)
        return s
    if tol is None:
        scale = max(1.0, float(s.detach().abs().amax())) if s.numel() else 1.0
        tol = 1e3 * torch.finfo(s.dtype).eps * scale
    err = float(skew_error(s.detach()))
    if err > tol:
        fail(
            name, f"a matrix with max|S + S^T| = {err:.3g}", f"a skew-symmetric matrix (S^T = -S, tolerance {tol:.3g})"
        )
    return s


def cayley(s: torch.Tensor, check: bool = True) -> torch.Tensor:
    """P = (I - S)(I + S)^{-1} for skew S of shape (..., n, n)  (T3.1; in SO(n) by T3.2).

    I + S is invertible because sigma(S) lies on the imaginary axis (T3.1), and (I - S) commutes with
    (I + S)^{-1}, so P = (I + S)^{-1}(I - S) = solve(I + S, I - S). solve_ex without its error check: I + S is
    never singular for skew S (T3.1), and torch.linalg.solve's check reads the LU info on the host (a sync on an
    accelerator, per call in training).

    Args:
        s (..., n, n): skew-symmetric matrices, float32 or float64.
        check (bool): raise a ValueError unless s is skew (`check_skew`).

    Returns:
        P (..., n, n): orthogonal with determinant 1, in s's dtype.

    Examples:
        >>> import torch
        >>> from symformer.positional import cayley, skew
        >>> p = cayley(skew(torch.randn(5, 5, dtype=torch.float64)))
        >>> torch.allclose(p.T @ p, torch.eye(5, dtype=torch.float64)), round(float(torch.linalg.det(p)), 6)
        (True, 1.0)
    """
    if check:
        check_skew("S", s)
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
    return torch.linalg.solve_ex(eye + s, eye - s, check_errors=False)[0]


def inverse_cayley(q: torch.Tensor) -> torch.Tensor:
    """S_Q = (I - Q)(I + Q)^{-1} (T3.3): skew, with cayley(S_Q) = Q when -1 is not an eigenvalue of Q.
    Raises ValueError when I + Q is singular (Q has eigenvalue -1).

    Args:
        q (..., n, n): orthogonal matrices without eigenvalue -1.

    Returns:
        S (..., n, n): skew-symmetric, with cayley(S) = q.

    Examples:
        >>> import torch
        >>> from symformer.positional import cayley, inverse_cayley, skew
        >>> s = skew(torch.randn(4, 4, dtype=torch.float64))
        >>> torch.allclose(inverse_cayley(cayley(s)), s)
        True
    """
    check_square("Q", q)
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    sol, info = torch.linalg.solve_ex(eye + q, eye - q)
    if bool((info != 0).any()):
        fail("Q", "a matrix with eigenvalue -1 (I + Q singular)", "an orthogonal matrix without eigenvalue -1 (T3.3)")
    return sol
