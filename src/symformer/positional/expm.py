"""Differentiable matrix exponential for skew generators: scaling and squaring with the degree-13 Pade
approximant in float64 (Higham 2005, "The scaling and squaring method for the matrix exponential
revisited"; theta_13 for unit roundoff 2^-53) and the degree-12 Taylor polynomial in float32 (theta_12 for
2^-24 from the backward-error bound of Al-Mohy & Higham 2009; no LU solve: see THETA_12_TAYLOR_SINGLE).

Why not torch.linalg.matrix_exp: its backward evaluates the Frechet derivative by exponentiating a
(2n x 2n) block matrix [[A^T, G], [0, A^T]], about 7x the cost of the forward, and ESPR training on 2-D
grids pays it once per distinct position (T1.6, one exp(A(r)) per r). Here the gradient is the exact
derivative of the approximant itself (6 products, one solve, s squarings): every product costs two
in the backward and the solve reuses its LU factors, so the backward is ~2x the forward. Differentiating
the scaling-and-squaring approximant gives the Frechet derivative to the same relative accuracy as the
values (Al-Mohy & Higham 2009, "Computing the Frechet derivative of the matrix exponential").

For skew A (ESPR's L(r) = sum_k r_k L_k, T1.1) the even part V of the Pade pair is symmetric and the odd
part U skew, so r_13(A) = (V - U)^{-1} (V + U) = Q^{-1} Q^T is orthogonal in exact arithmetic, as
exp(A) is (T0.11). The float32 Taylor polynomial is orthogonal only to its backward error (below 2^-24,
the rounding of the products themselves). The scaling 2^-s is chosen per matrix (theta_13 = 5.37, see
_scaled_powers; theta_12 = 1.46, _taylor_powers); the squarings run on the sorted prefix of the batch that
still needs them.
"""

from __future__ import annotations

import torch

from symformer._validation import fail, reads_values
from symformer.positional.cayley import check_skew, check_square

# Pade [13/13] coefficients b_0..b_13 and the 1-norm bound theta_13 for unit roundoff 2^-53 (Higham 2005)
_B13 = (
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
)
THETA_13 = 5.371920351148152
# float32 (unit roundoff 2^-24): the degree-7 Pade approximant already has backward error below u for
# ||A||_1 <= theta_7 = 3.9257 (Higham 2005, single-precision column), with 4 matrix products instead of 6
# (checked in tests against float64 matrix_exp at that norm)
_B7 = (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0)
THETA_7_SINGLE = 3.925724783138660
# float32, solve-free: the degree-12 Taylor polynomial has backward error below u = 2^-24 for ||A|| <= theta_12
# = 1.4617 (the bound sum_{k>12} |c_k| theta^(k-1) <= u on h(x) = log(e^-x T_12(x)) = sum c_k x^k, Al-Mohy &
# Higham 2009 Sec. 3; computed exactly in tests/positional/test_expm.py). Paterson-Stockmeyer takes 5 products
# (x^2, x^3, x^4 and two Horner steps in x^4) and no LU solve, where Pade-7 takes 4 products and a batched LU
# solve (~12 products' time on CPU for 64 x 64); the smaller theta costs ~1.4 more squarings.
THETA_12_TAYLOR_SINGLE = 1.4616615072090335
SUPPORTED = (torch.float32, torch.float64)
# where values cannot be read (an accelerator, torch.compile: _validation.reads_values) the squarings are a fixed
# count, each masked per matrix (_square_static): jax.scipy.linalg.expm's default max_squarings. Pade-13 at
# theta_13 then covers ||a||_1 <= 5.37 * 2^16 ~ 3.5e5, Taylor-12 in float32 ||a||_1 <= 1.46 * 2^16 ~ 9.6e4
MAX_SQUARINGS = 16


def _coef(b: tuple, k: int, f: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """b_k f^k per matrix, (U, 1, 1): the rescaling x -> f x of the powers folded into the coefficients."""
    return (b[k] * f**k).to(dtype)[:, None, None]


def _lincomb(terms: list, const: torch.Tensor | None = None) -> torch.Tensor:
    """sum_i c_i x_i (+ const I) in one pass per term (addcmul) and an in-place diagonal add."""
    (c0, x0), rest = terms[0], terms[1:]
    out = x0 * c0
    for c, x in rest:
        out = torch.addcmul(out, x, c)
    if const is not None:
        out.diagonal(dim1=-2, dim2=-1).add_(const[:, :, 0])
    return out


def _solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a^{-1} b without the error check of torch.linalg.solve, which reads the LU info on the host (a sync on an
    accelerator): V - U of the Pade pair is nonsingular for ||a|| <= theta (Higham 2005, Sec. 2)."""
    return torch.linalg.solve_ex(a, b, check_errors=False)[0]


def _pade13(a: torch.Tensor, a2: torch.Tensor, a4: torch.Tensor, a6: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """r_13(f a) from the powers a, a^2, a^4, a^6 of a batch (U, n, n) and per-matrix powers of two f (the
    refined scaling): f^k sits in the coefficients, U = a (a^6 (c13 a^6 + c11 a^4 + c9 a^2) + c7 a^6 + ...)
    with c_k = b_k f^k, so no rescaled copies of the powers are made (powers of two: the same values)."""
    b, dt = _B13, a.dtype
    u_in = torch.baddbmm(
        _lincomb([(_coef(b, 7, f, dt), a6), (_coef(b, 5, f, dt), a4), (_coef(b, 3, f, dt), a2)], _coef(b, 1, f, dt)),
        a6,
        _lincomb([(_coef(b, 13, f, dt), a6), (_coef(b, 11, f, dt), a4), (_coef(b, 9, f, dt), a2)]),
    )
    u = a @ u_in
    v = torch.baddbmm(
        _lincomb([(_coef(b, 6, f, dt), a6), (_coef(b, 4, f, dt), a4), (_coef(b, 2, f, dt), a2)], _coef(b, 0, f, dt)),
        a6,
        _lincomb([(_coef(b, 12, f, dt), a6), (_coef(b, 10, f, dt), a4), (_coef(b, 8, f, dt), a2)]),
    )
    return _solve(v - u, v + u)


def _pade7(a: torch.Tensor, a2: torch.Tensor, a4: torch.Tensor, a6: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """r_7(f a): U = a (c7 a^6 + c5 a^4 + c3 a^2 + c1 I), V = c6 a^6 + c4 a^4 + c2 a^2 + c0 I, c_k = b_k f^k."""
    b, dt = _B7, a.dtype
    u = a @ _lincomb([(_coef(b, 7, f, dt), a6), (_coef(b, 5, f, dt), a4), (_coef(b, 3, f, dt), a2)], _coef(b, 1, f, dt))
    v = _lincomb([(_coef(b, 6, f, dt), a6), (_coef(b, 4, f, dt), a4), (_coef(b, 2, f, dt), a2)], _coef(b, 0, f, dt))
    return _solve(v - u, v + u)


def _taylor12(x: torch.Tensor, x2: torch.Tensor, x3: torch.Tensor, x4: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """T_12(f x) = B0 + x^4 (B1 + x^4 B2) with B_i = sum_k c_{4i+k} x^k (k < 4; B2 also c_12 x^4) and
    c_k = f^k / k!: the rescaling by f = 2^j sits in the coefficients, as in the Pade functions."""
    dt = x.dtype
    # c_k = f^k / k! = prod_{j <= k} f / j for k = 0..12 as one cumulative product: 4 launches where a power, a
    # division and a cast per coefficient took 39 (the static GPU path is launch-bound: docs/performance.md)
    j = torch.arange(1, 13, dtype=f.dtype, device=f.device)
    c = torch.cat((torch.ones_like(f)[:, None], torch.cumprod(f[:, None] / j, dim=1)), dim=1).to(dt)
    c = c[:, :, None, None].unbind(1)  # 13 views (U, 1, 1)
    b0 = _lincomb([(c[1], x), (c[2], x2), (c[3], x3)], c[0])
    b1 = _lincomb([(c[5], x), (c[6], x2), (c[7], x3)], c[4])
    b2 = _lincomb([(c[9], x), (c[10], x2), (c[11], x3), (c[12], x4)], c[8])
    return torch.baddbmm(b0, x4, torch.baddbmm(b1, x4, b2))


def _taylor_powers(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """(s, f, [x, x^2, x^3, x^4]) for _taylor12, as _scaled_powers: s from the 1-norm, lowered by the bound
    with alpha_4 = max(||x^4||^(1/4), ||x^5||^(1/5)) (Al-Mohy & Higham 2009 Thm 4.2: p = 4 since p (p - 1) <=
    m + 1 = 13), ||x^5|| <= ||x^4|| ||x||; j <= 10 keeps f^12 / 12! finite in float32."""
    s0, x, x2 = _first_powers(flat, THETA_12_TAYLOR_SINGLE)
    x3 = x2 @ x
    x4 = x2 @ x2
    n1, n4 = _norm1(x).double(), _norm1(x4).double()
    alpha = torch.maximum(n4**0.25, (n4 * n1) ** 0.2)
    return (*_lowered(s0, THETA_12_TAYLOR_SINGLE, alpha, 10), [x, x2, x3, x4])


def _first_powers(flat: torch.Tensor, theta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(s0, x, x^2) with x = flat / 2^s0 and s0 the squarings the 1-norm asks for at theta."""
    s0 = _squarings(flat, theta)
    x = flat * torch.exp2(-s0.to(flat.dtype))[:, None, None]
    return s0, x, x @ x


def _lowered(s0: torch.Tensor, theta: float, alpha: torch.Tensor, cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, f): s0 lowered by j = floor(log2(theta / alpha)) squarings, 0 <= j <= min(s0, cap), and f = 2^j."""
    j = torch.floor(torch.log2(theta / alpha)).nan_to_num(0, posinf=0).clamp(min=0).long()
    j = torch.minimum(j, s0).clamp(max=cap)
    return s0 - j, torch.exp2(j.double())


def _norm1(a: torch.Tensor) -> torch.Tensor:
    return a.detach().abs().sum(-2).amax(-1)


def _squarings(a: torch.Tensor, theta: float = THETA_13) -> torch.Tensor:
    """Per matrix, the number s >= 0 of squarings with ||a / 2^s||_1 <= theta."""
    return torch.clamp(torch.ceil(torch.log2(_norm1(a) / theta)), min=0).nan_to_num(0).long()


def _scaled_powers(
    flat: torch.Tensor, theta: float = THETA_13
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """(s, f, [x, x^2, x^4, x^6]): the approximant is taken at f x = a / 2^s per matrix. s starts from the 1-norm and is
    then lowered by the sharper bound of Al-Mohy & Higham 2009 (Thm 4.2, m = 13 admits p = 4): the Pade error bound
    holds with ||x|| replaced by alpha_4 = max(||x^4||^(1/4), ||x^5||^(1/5)), bounded above with ||x^5|| <= ||x^4||
    ||x||. For skew a (normal), alpha_4 approaches the spectral radius, often several times below the 1-norm: each
    dropped squaring saves one product forward and two backward. Rescaling x by f = 2^j rescales its powers by f^2,
    f^4, f^6 exactly (powers of two): the Pade functions fold f^k into their coefficients, so nothing is recomputed
    or copied (j is capped so that f^13 stays finite). For the degree-7 float32 approximant (theta_7) p = 3: alpha_3
    = max(||x^3||^(1/3), ||x^4||^(1/4)), with ||x^3|| <= ||x^2|| ||x||."""
    s0, x, x2 = _first_powers(flat, theta)
    x4 = x2 @ x2
    x6 = x4 @ x2
    n1, n4 = _norm1(x).double(), _norm1(x4).double()
    if theta == THETA_13:
        alpha = torch.maximum(n4**0.25, (n4 * n1) ** 0.2)
    else:
        alpha = torch.maximum((_norm1(x2).double() * n1) ** (1 / 3), n4**0.25)
    # the cap keeps b_k f^k finite in the dtype
    return (*_lowered(s0, theta, alpha, 76 if theta == THETA_13 else 17), [x, x2, x4, x6])


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
    return _expm_flat(flat, _degree(flat.dtype)).reshape(*batch, n, n)


def _expm_flat(flat: torch.Tensor, degree: int) -> torch.Tensor:
    """Scaling and squaring on (U, n, n): degree 13, the Pade approximant (float64); degree 12, the Taylor
    polynomial (float32, THETA_12_TAYLOR_SINGLE; no solve); degree 7, the Pade approximant for float32 before
    it (THETA_7_SINGLE; kept for tests and A/B comparisons). 12 and 7 also run in float64 (tests: gradcheck,
    accuracy)."""
    s, f, powers = _POWERS[degree](flat)
    r = _APPROXIMANTS[degree](*powers, f)
    return _square(r, s)


def _square(r: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """r_i^(2^s_i) per matrix. With the batch sorted by s (descending), the matrices still to square are a
    prefix: each step squares that prefix only and sets the finished tail aside (a view), and one cat and one
    index_copy put the batch back in order. Per matrix the products are those of squaring it alone; the
    backward of the slices and the cat is free and index_copy's is one gather, where a torch.where per step
    (square all, keep the finished) cost a product per finished matrix, a pass forward and three backward."""
    if not reads_values(s):  # an accelerator or torch.compile: no host read of s (module docstring)
        return _square_static(r, s)
    s_max = int(s.max()) if s.numel() else 0
    if s_max == 0:
        return r
    if bool((s == s_max).all()):
        for _ in range(s_max):
            r = r @ r
        return r
    order = torch.argsort(s, descending=True, stable=True)
    need = (s[:, None] > torch.arange(s_max, device=s.device)).sum(0).tolist()  # need[t]: matrices with s > t
    r = r[order]
    done = []
    for k in need:
        if k < r.shape[0]:
            done.append(r[k:])
            r = r[:k]
        r = r @ r
    out = torch.cat([r, *done[::-1]])
    return torch.empty_like(out).index_copy(0, order, out)


def _square_static(r: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """r_i^(2^s_i) with MAX_SQUARINGS squaring steps whatever s, each kept where s_i is not reached yet: a fixed
    graph that reads no value (no host sync, CUDA-graph capturable, one compiled graph), at the price of squaring
    every matrix MAX_SQUARINGS times. A matrix that needs more squarings (||a||_1 > theta 2^MAX_SQUARINGS) comes
    out NaN, never silently inaccurate (as jax.scipy.linalg.expm's max_squarings)."""
    # Launches (the GPU path is launch-bound): every step's mask comes from one comparison (views per step), and a
    # step is r @ where(mask, r, I), exact for a finished matrix (r I = r) and one where in the backward, where
    # where(mask, r @ r, r) took two wheres and two scalar tensors there; the overflow is one masked_fill
    masks = (s[:, None] > torch.arange(MAX_SQUARINGS + 1, device=s.device))[:, :, None, None].unbind(1)
    eye = torch.eye(r.shape[-1], dtype=r.dtype, device=r.device)
    for t in range(MAX_SQUARINGS):
        r = r @ torch.where(masks[t], r, eye)
    return r.masked_fill(masks[MAX_SQUARINGS], torch.nan)


def _degree(dtype: torch.dtype) -> int:
    """The approximant expm_skew uses: Taylor-12 in float32 (no solve), Pade-13 in float64."""
    return 12 if dtype == torch.float32 else 13


# degree -> (scaled powers and squarings, approximant at f x); 7 is kept for tests and comparisons
_POWERS = {13: _scaled_powers, 12: _taylor_powers, 7: lambda flat: _scaled_powers(flat, THETA_7_SINGLE)}
_APPROXIMANTS = {13: _pade13, 12: _taylor12, 7: _pade7}


def squarings_needed(a: torch.Tensor) -> int:
    """Largest number of squarings expm_skew uses on a batch (reported by benchmarks)."""
    n = a.shape[-1]
    if not a.numel():
        return 0
    return int(_POWERS[_degree(a.dtype)](a.detach().reshape(-1, n, n))[0].max())


__all__ = ["expm_skew", "MAX_SQUARINGS", "THETA_13", "THETA_7_SINGLE", "THETA_12_TAYLOR_SINGLE", "squarings_needed"]
