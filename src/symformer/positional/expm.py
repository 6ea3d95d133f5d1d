"""Differentiable matrix exponential for skew generators: scaling and squaring with the degree-13 Pade
approximant (Higham 2005, "The scaling and squaring method for the matrix exponential revisited").

Why not torch.linalg.matrix_exp: its backward evaluates the Frechet derivative by exponentiating a
(2n x 2n) block matrix [[A^T, G], [0, A^T]], about 7x the cost of the forward, and ESPR training on 2-D
grids pays it once per distinct position (T1.6, one exp(A(r)) per r). Here the gradient is the exact
derivative of the approximant itself (6 products, one solve, s squarings): every product costs two
in the backward and the solve reuses its LU factors, so the backward is ~2x the forward. Differentiating
the scaling-and-squaring approximant gives the Frechet derivative to the same relative accuracy as the
values (Al-Mohy & Higham 2009, "Computing the Frechet derivative of the matrix exponential").

For skew A (ESPR's L(r) = sum_k r_k L_k, T1.1) the even part V of the Pade pair is symmetric and the odd
part U skew, so r_13(A) = (V - U)^{-1} (V + U) = Q^{-1} Q^T is orthogonal in exact arithmetic, as
exp(A) is (T0.11). The scaling 2^-s is chosen per matrix from its 1-norm (theta_13 = 5.37); the
squarings run on the sorted prefix of the batch that still needs them.
"""
from __future__ import annotations

import torch

from symformer._validation import fail
from symformer.positional.cayley import check_skew, check_square

# Pade [13/13] coefficients b_0..b_13 and the 1-norm bound theta_13 for unit roundoff 2^-53 (Higham 2005)
_B13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
        129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
        40840800.0, 960960.0, 16380.0, 182.0, 1.0)
THETA_13 = 5.371920351148152
SUPPORTED = (torch.float32, torch.float64)


def _pade13(a: torch.Tensor) -> torch.Tensor:
    """r_13(a) for a batch (U, n, n) with 1-norms <= theta_13."""
    b = _B13
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u_in = a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye
    u = a @ u_in
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    return torch.linalg.solve(v - u, v + u)


def _squarings(a: torch.Tensor) -> torch.Tensor:
    """Per matrix, the number s >= 0 of squarings with ||a / 2^s||_1 <= theta_13."""
    norm = a.detach().abs().sum(-2).amax(-1)
    return torch.clamp(torch.ceil(torch.log2(norm / THETA_13)), min=0).nan_to_num(0).long()


def expm_skew(a: torch.Tensor, check: bool = False) -> torch.Tensor:
    """exp(a) for a batch of real matrices a (..., n, n), float32 or float64, differentiable.

    Meant for skew generators (check=True rejects a non-square or non-skew a with ValueError); the
    algorithm is the general one, so values and gradients match torch.linalg.matrix_exp for any a.
    TypeError for any other dtype (bfloat16 / float16 have no LU solve on CPU; cast to float32 first)."""
    if not isinstance(a, torch.Tensor):
        fail("a", type(a).__name__, "a torch.Tensor", TypeError)
    if a.dtype not in SUPPORTED:
        fail("a", f"dtype {a.dtype}", "torch.float32 or torch.float64 (cast low-precision generators first)", TypeError)
    if check:
        check_skew("a", a)
    elif a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        check_square("a", a)
    batch, n = a.shape[:-2], a.shape[-1]
    flat = a.reshape(-1, n, n)
    if flat.shape[0] == 0:
        return a.clone()
    s = _squarings(flat)
    scaled = flat * torch.exp2(-s.to(a.dtype))[:, None, None]
    r = _pade13(scaled)
    top = int(s.max())
    if top:
        order = torch.argsort(s, descending=True)
        counts = s[order]
        r = r[order]
        for step in range(top):  # the first `k` (sorted) matrices still need a squaring
            k = int((counts > step).sum())
            r = torch.cat((r[:k] @ r[:k], r[k:])) if k < r.shape[0] else r @ r
        r = r[torch.argsort(order)]
    return r.reshape(*batch, n, n)


def squarings_needed(a: torch.Tensor) -> int:
    """Largest number of squarings expm_skew uses on a batch (reported by benchmarks)."""
    n = a.shape[-1]
    return int(_squarings(a.reshape(-1, n, n)).max()) if a.numel() else 0


__all__ = ["expm_skew", "THETA_13", "squarings_needed"]
