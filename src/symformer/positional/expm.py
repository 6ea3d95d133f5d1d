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
exp(A) is (T0.11). The scaling 2^-s is chosen per matrix (theta_13 = 5.37, see _scaled_powers); the
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


def _pade13(a: torch.Tensor, a2: torch.Tensor, a4: torch.Tensor, a6: torch.Tensor) -> torch.Tensor:
    """r_13(a) from the powers a, a^2, a^4, a^6 of a batch (U, n, n) with Pade error below unit roundoff."""
    b = _B13
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    u_in = a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye
    u = a @ u_in
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    return torch.linalg.solve(v - u, v + u)


def _norm1(a: torch.Tensor) -> torch.Tensor:
    return a.detach().abs().sum(-2).amax(-1)


def _squarings(a: torch.Tensor) -> torch.Tensor:
    """Per matrix, the number s >= 0 of squarings with ||a / 2^s||_1 <= theta_13."""
    return torch.clamp(torch.ceil(torch.log2(_norm1(a) / THETA_13)), min=0).nan_to_num(0).long()


def _scaled_powers(flat: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(s, [x, x^2, x^4, x^6]) with x = a / 2^s per matrix. s starts from the 1-norm and is then lowered
    by the sharper bound of Al-Mohy & Higham 2009 (Thm 4.2, m = 13 admits p = 4): the Pade error bound
    holds with ||x|| replaced by alpha_4 = max(||x^4||^(1/4), ||x^5||^(1/5)), bounded above with
    ||x^5|| <= ||x^4|| ||x||. For skew a (normal), alpha_4 approaches the spectral radius, often several
    times below the 1-norm: each dropped squaring saves one product forward and two backward. Rescaling
    x by 2^j rescales its powers by 4^j, 16^j, 64^j exactly (powers of two), so nothing is recomputed."""
    s0 = _squarings(flat)
    x = flat * torch.exp2(-s0.to(flat.dtype))[:, None, None]
    x2 = x @ x
    x4 = x2 @ x2
    x6 = x4 @ x2
    n1, n4 = _norm1(x).double(), _norm1(x4).double()
    alpha = torch.maximum(n4 ** 0.25, (n4 * n1) ** 0.2)
    j = torch.floor(torch.log2(THETA_13 / alpha)).nan_to_num(0, posinf=0).clamp(min=0).long()
    j = torch.minimum(j, s0)
    if not bool(j.any()):
        return s0, [x, x2, x4, x6]
    f = torch.exp2(j.to(flat.dtype))[:, None, None]
    return s0 - j, [x * f, x2 * f ** 2, x4 * f ** 4, x6 * f ** 6]


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
    s, powers = _scaled_powers(flat)
    r = _pade13(*powers)
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
    return int(_scaled_powers(a.detach().reshape(-1, n, n))[0].max()) if a.numel() else 0


__all__ = ["expm_skew", "THETA_13", "squarings_needed"]
