"""Diagnostics of structured positional rotations (ESPR T5.1, T6'.0, T8'.7) and provable bounds.

Quantities (operator norms ||.|| = spectral norm, T0.9 / T8'.0):
  eps_comm = max_{a,b} ||[L_a, L_b]||                      (T5.1, T6'.0)
  Lambda   = max_u sum_k |lambda_{k,u}|                    (T6'.0; commuting generators or beta)
  R        = max_i ||r_i||_1                               (T6'.0)
  rho      = ||S||,  eta = ||E||  with S = S_- + E          (T6'.0; S_- block diagonal, E the act/null mixing blocks)
  eta_mix  = max(||Pi_null P Pi_act||, ||Pi_act P Pi_null||) (T6'.0)
  IR_spec  (T8'.7), by Monte Carlo over Delta and sampling + projected ascent over ||r||_1 <= R.

Proven bounds (used by the tests and the `espr` audit; proofs below, constants explicit):

(B1) Trotter bound. For skew (anti-Hermitian) X, Y: ||e^X e^Y - e^{X+Y}|| <= (1/2) ||[X, Y]||.
  Proof. H(s) = e^{(1-s)(X+Y)} e^{sX} e^{sY}; H(1) - H(0) = e^X e^Y - e^{X+Y} and
  H'(s) = e^{(1-s)(X+Y)} (e^{sX} Y - Y e^{sX}) e^{sY}. Orthogonal factors have norm 1 and
  e^{sX} Y e^{-sX} - Y = int_0^s e^{uX} [X, Y] e^{-uX} du has norm <= s ||[X, Y]||, so
  ||H(1) - H(0)|| <= int_0^1 s ||[X, Y]|| ds = ||[X, Y]|| / 2.                                    []
  With X = -A(r), Y = A(s) (X + Y = A(s - r), T1.3) and T5.1 (||[A(r), A(s)]|| <= eps ||r||_1 ||s||_1):
      ||R_STR(r)^T R_STR(s) - R_STR(s - r)|| <= (1/2) eps_comm ||r||_1 ||s||_1.   (rotation_deviation_bound)

(B2) Logit deviation (in the spirit of T6'.11, all constants explicit). Let G(r) = exp(A(r)), P orthogonal,
  Pi = Pi_act, q~_i = Pi G(r_i) P Pi q_i (T4.3), alpha_ij = q~_i . k~_j / sqrt(d_act) (T4.4),
  alpha*_ij = (Pi q_i)^T Pi G(r_j - r_i) Pi (Pi k_j) / sqrt(d_act), delta_P = ||(P - I) Pi|| and
  gamma(r) = ||Pi_null G(r) Pi|| (leakage of the rotation out of the active block). Then
      |alpha_ij - alpha*_ij| <= ||Pi q_i|| ||Pi k_j|| / sqrt(d_act)
                                * ((1/2) eps_comm ||r_i||_1 ||r_j||_1 + 2 delta_P + gamma(r_i) gamma(r_j)).
  Proof. M_i = Pi G_i P Pi and X_i = Pi G_i Pi have norm <= 1 and ||M_i - X_i|| = ||Pi G_i (P - I) Pi|| <= delta_P,
  so ||M_i^T M_j - X_i^T X_j|| <= ||M_i - X_i|| + ||M_j - X_j|| <= 2 delta_P.
  X_i^T X_j = Pi G_i^T G_j Pi - (Pi_null G_i Pi)^T (Pi_null G_j Pi), the last term of norm <= gamma_i gamma_j.
  ||Pi (G_i^T G_j - G(r_j - r_i)) Pi|| <= (1/2) eps_comm ||r_i||_1 ||r_j||_1 by (B1). Cauchy-Schwarz.       []
  If the generators commute, keep the active block (gamma = 0) and P is in the set A of T3.4 (delta_P = 0),
  the bound is 0: the logits are exactly relative (T6.1). Note that delta_P is NOT bounded by 2 eta_mix
  (T6'.8 is false: P = diag(Q, I) has eta_mix = 0 and delta_P = ||Q - I|| up to 2), which is why it appears here.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_float, check_int, check_tensor, fail
from symformer.positional.base import RotaryPositional
from symformer.positional.cayley import check_skew


def operator_norm(m: torch.Tensor) -> torch.Tensor:
    """Operator (spectral) norm of the last two dims (T0.9)."""
    return torch.linalg.matrix_norm(m, ord=2)


_opnorm = operator_norm


def _check_generators(L: torch.Tensor, check: bool = True) -> torch.Tensor:
    check_tensor("L", L, 3)
    if L.shape[-1] != L.shape[-2]:
        fail("L", f"shape {tuple(L.shape)}", "skew generators of shape (C, Dh, Dh)")
    if check:
        check_skew("L", L)
    return L


def commutator_norms(L: torch.Tensor, check: bool = True) -> torch.Tensor:
    """eps_ab = ||[L_a, L_b]|| (C, C) (T5.1)."""
    _check_generators(L, check)
    comm = L[:, None] @ L[None] - L[None] @ L[:, None]
    return _opnorm(comm)


def eps_comm(L: torch.Tensor, check: bool = True) -> torch.Tensor:
    """eps_comm = max_{a,b} ||[L_a, L_b]|| (T6'.0); 0 for a single generator. Differentiable."""
    return commutator_norms(L, check).amax()


def lambda_from_beta(beta: torch.Tensor) -> torch.Tensor:
    """Lambda = max_u sum_k |beta_{u,k}| for frequencies beta (m, C) (T6'.0, T2.4)."""
    check_tensor("beta", beta, 2)
    return beta.abs().sum(-1).amax()


def joint_spectrum(L: torch.Tensor, seed: int | None = 0) -> torch.Tensor:
    """lambda_{k,j} (C, Dh): eigenvalues (divided by i) of each L_k on the eigenvectors of a random
    combination sum_k c_k L_k. Exact joint spectrum for commuting generators (T2.1) when that combination
    has no accidental multiplicity; a heuristic otherwise."""
    _check_generators(L)
    g = seeded_generator(seed)
    c = torch.randn(L.shape[0], generator=g, dtype=torch.float64).to(L.dtype)
    cdt = torch.complex128 if L.dtype == torch.float64 else torch.complex64
    herm = 1j * torch.einsum("k,kij->ij", c, L).to(cdt)  # i * skew is Hermitian
    _, vecs = torch.linalg.eigh(herm)
    diag = torch.einsum("ij,kil,lj->kj", vecs.conj(), (1j * L.to(cdt)), vecs)
    return diag.real


def Lambda(x: torch.Tensor) -> torch.Tensor:
    """Lambda of T6'.0 from beta (m, C) or from commuting generators (C, Dh, Dh) (via `joint_spectrum`;
    each plane appears twice as +/- lambda, which leaves the max unchanged)."""
    check_tensor("x", x, (2, 3))
    if x.ndim == 2:
        return lambda_from_beta(x)
    return joint_spectrum(x).abs().sum(0).amax()


def lambda_operator(L: torch.Tensor) -> torch.Tensor:
    """max_k ||L_k|| = sup_{||r||_1 <= 1} ||A(r)||: the best constant in ||A(r)|| <= Lambda ||r||_1 for ANY skew
    generators (the l1 ball's extreme points are +/- e_k). For commuting generators it is <= Lambda (T6'.1)."""
    _check_generators(L)
    return _opnorm(L).amax()


def R(positions: torch.Tensor) -> torch.Tensor:
    """R = max_i ||r_i||_1 over positions (..., C) (T6'.0)."""
    check_tensor("positions", positions)
    return positions.abs().sum(-1).amax()


def rho(S: torch.Tensor) -> torch.Tensor:
    """rho = ||S|| (T6'.0)."""
    check_skew("S", S)
    return _opnorm(S)


def _check_dact(d_act: int, n: int) -> int:
    check_int("d_act", d_act, 0)
    if d_act > n:
        fail("d_act", d_act, f"an active dimension <= {n} (the matrix size)")
    return d_act


def split_skew(S: torch.Tensor, d_act: int) -> tuple[torch.Tensor, torch.Tensor]:
    """S = S_- + E (T5.4, T6'.0): S_- = the act/act and null/null blocks, E = the act/null mixing blocks
    (both skew). Reading: the split of T6'.7, where Pi_act S_- Pi_null = 0 and E carries all the mixing."""
    check_skew("S", S)
    d = _check_dact(d_act, S.shape[-1])
    mask = torch.zeros_like(S, dtype=torch.bool)
    mask[..., :d, d:] = True
    mask[..., d:, :d] = True
    return S.masked_fill(mask, 0), S.masked_fill(~mask, 0)


def eta(S: torch.Tensor, d_act: int) -> torch.Tensor:
    """eta = ||E|| for the split of `split_skew` (T6'.0)."""
    return _opnorm(split_skew(S, d_act)[1])


def eta_mix(P: torch.Tensor, d_act: int) -> torch.Tensor:
    """eta_mix = max(||Pi_null P Pi_act||, ||Pi_act P Pi_null||) (T6'.0); 0 when d_act = Dh. Differentiable."""
    check_tensor("P", P)
    d = _check_dact(d_act, P.shape[-1])
    if d in (0, P.shape[-1]):
        return P.new_zeros(())
    return torch.maximum(_opnorm(P[..., d:, :d]), _opnorm(P[..., :d, d:]))


def delta_P(P: torch.Tensor, d_act: int) -> torch.Tensor:
    """delta_P = ||(P - I) Pi_act|| (0 iff P fixes the active subspace, e.g. P in the set A of T3.4)."""
    check_tensor("P", P)
    d = _check_dact(d_act, P.shape[-1])
    eye = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return _opnorm((P - eye)[..., :, :d])


def rotation_deviation_bound(eps: Any, r: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """(1/2) eps_comm ||r||_1 ||s||_1: proven bound (B1) on ||R_STR(r)^T R_STR(s) - R_STR(s - r)||
    (broadcast over the leading dims of r, s (..., C))."""
    eps = torch.as_tensor(eps, dtype=r.dtype, device=r.device)
    return 0.5 * eps * r.abs().sum(-1) * s.abs().sum(-1)


def rotation_deviation(L: torch.Tensor, r: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """||exp(A(r))^T exp(A(s)) - exp(A(s - r))|| for batches r, s (..., C) (the left side of (B1))."""
    a = lambda x: torch.einsum("...c,cij->...ij", x, L)  # noqa: E731
    er, es, ed = (torch.linalg.matrix_exp(a(x)) for x in (r, s, s - r))
    return _opnorm(er.transpose(-1, -2) @ es - ed)


def leakage(L: torch.Tensor, positions: torch.Tensor, d_act: int) -> torch.Tensor:
    """gamma(r) = ||Pi_null exp(A(r)) Pi_act|| per position (...,) (0 when the generators keep the block)."""
    d = _check_dact(d_act, L.shape[-1])
    g = torch.linalg.matrix_exp(torch.einsum("...c,cij->...ij", positions.to(L.dtype), L))
    if d == L.shape[-1]:
        return g.new_zeros(g.shape[:-2])
    return _opnorm(g[..., d:, :d])


def logit_deviation_bound(
    q_act_norm: torch.Tensor,
    k_act_norm: torch.Tensor,
    r_i: torch.Tensor,
    r_j: torch.Tensor,
    eps: Any,
    d_act: int,
    delta_p: Any = 0.0,
    gamma_i: Any = 0.0,
    gamma_j: Any = 0.0,
) -> torch.Tensor:
    """Bound (B2) on |alpha_ij - alpha*_ij| (see the module docstring for the statement and proof)."""
    check_int("d_act", d_act, 1)
    rot = rotation_deviation_bound(eps, r_i, r_j)
    return (
        q_act_norm
        * k_act_norm
        / math.sqrt(d_act)
        * (rot + 2 * torch.as_tensor(delta_p, dtype=rot.dtype) + torch.as_tensor(gamma_i) * torch.as_tensor(gamma_j))
    )


def parts(obj: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(L (C, Dh, Dh), P (Dh, Dh), d_act) of a rotary part (`RotaryPositional.rotation_parts`) or of a
    tuple (L, P, d_act). For STRING-like parts P = I and d_act = Dh (their orthogonal basis change is
    already inside the generators)."""
    if isinstance(obj, tuple):
        if len(obj) != 3:
            fail("module_or_matrices", f"a tuple of length {len(obj)}", "(L, P, d_act)")
        L, P, d = obj
        _check_generators(L)
        check_tensor("P", P, 2)
        return L, P, _check_dact(d, L.shape[-1])
    if not isinstance(obj, RotaryPositional):
        fail("module_or_matrices", type(obj).__name__, "a RotaryPositional part or a tuple (L, P, d_act)", TypeError)
    return obj.rotation_parts()


def project_l1(v: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection of each row of v (..., C) onto {||x||_1 <= radius} (Duchi et al., 2008)."""
    a = v.abs()
    inside = a.sum(-1, keepdim=True) <= radius
    u, _ = a.sort(-1, descending=True)
    css = u.cumsum(-1) - radius
    ks = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype, device=v.device)
    cond = u - css / ks > 0
    k = cond.to(v.dtype).cumsum(-1).argmax(-1, keepdim=True)  # last index where cond holds
    k = torch.where(cond.any(-1, keepdim=True), cond.sum(-1, keepdim=True) - 1, k)
    theta = css.gather(-1, k) / (k + 1).to(v.dtype)
    proj = v.sign() * (a - theta).clamp_min(0)
    return torch.where(inside, v, proj)


def sample_l1_ball(n: int, dim: int, radius: float, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """n points uniform in {||x||_1 <= radius} in R^dim (Dirichlet direction, signs, radius U^{1/dim})."""
    e = -torch.rand(n, dim, generator=generator, dtype=dtype).log()
    direction = e / e.sum(-1, keepdim=True)
    signs = torch.where(torch.rand(n, dim, generator=generator) < 0.5, -1.0, 1.0).to(dtype)
    rad = radius * torch.rand(n, 1, generator=generator, dtype=dtype) ** (1.0 / dim)
    return direction * signs * rad


def ir_gap(
    L: torch.Tensor, P: torch.Tensor, d_act: int, r: torch.Tensor, delta: torch.Tensor, definition: str = "T3.5"
) -> torch.Tensor:
    """||Pi R_sp(r)^T R_sp(r + Delta) Pi - Pi R_STR(Delta) Pi|| for batches r, delta (..., C).

    definition "T3.5": R_sp(r) = exp(A(r)) P;  "T8'.7": R_sp(r) = P exp(A(r)) P^T. (Reading: the second
    term is taken as Pi R_STR(Delta) Pi; it equals T8'.7's Pi R_STR(Delta) when R_STR commutes with Pi, T2.11.)"""
    a = lambda x: torch.einsum("...c,cij->...ij", x, L)  # noqa: E731
    e_r, e_rd, e_d = (torch.linalg.matrix_exp(a(x)) for x in (r, r + delta, delta))
    if definition == "T3.5":
        m = P.T @ e_r.transpose(-1, -2) @ e_rd @ P
    elif definition == "T8'.7":
        m = P @ e_r.transpose(-1, -2) @ e_rd @ P.T
    else:
        fail("definition", definition, "'T3.5' or \"T8'.7\"")
    d = d_act
    return _opnorm(m[..., :d, :d] - e_d[..., :d, :d])


def ir_spec(
    module_or_matrices: Any,
    radius: float,
    deltas: torch.Tensor | None = None,
    n_delta: int = 32,
    delta_radius: float | None = None,
    n_r: int = 128,
    n_starts: int = 4,
    ascent_steps: int = 20,
    definition: str = "T3.5",
    seed: int | None = 0,
    return_per_delta: bool = False,
):
    """IR_spec (T8'.7) = E_{Delta ~ nu} sup_{||r||_1 <= R} ||Pi R_sp(r)^T R_sp(r + Delta) Pi - Pi R_STR(Delta) Pi||.

    nu: the given `deltas` (n, C) (e.g. the offsets of an OOD test), else n_delta draws uniform in the l1
    ball of radius `delta_radius` (default R). The sup is estimated (from below) by n_r uniform draws in the
    l1 ball plus its 2C vertices and 0, then `ascent_steps` of projected gradient ascent from the best
    `n_starts` draws. Computed in float64 under no_grad of the module. `definition` picks R_sp (see ir_gap).
    Returns the mean (and the per-Delta sups when return_per_delta)."""
    radius = check_float("radius", radius, 0.0)
    check_int("n_r", n_r, 1)
    check_int("n_starts", n_starts, 1)
    check_int("ascent_steps", ascent_steps, 0)
    with torch.no_grad():
        L, P, d = parts(module_or_matrices)
        L, P = L.detach().double(), P.detach().double()
    c = L.shape[0]
    g = seeded_generator(seed)
    if deltas is None:
        check_int("n_delta", n_delta, 1)
        dr = radius if delta_radius is None else check_float("delta_radius", delta_radius, 0.0)
        deltas = sample_l1_ball(n_delta, c, dr, g)
    else:
        check_tensor("deltas", deltas, 2)
        if deltas.shape[-1] != c:
            fail("deltas", f"shape {tuple(deltas.shape)}", f"(n, C) with C={c}")
        deltas = deltas.double()
    eye = torch.eye(c, dtype=torch.float64)
    cand = torch.cat([sample_l1_ball(n_r, c, radius, g), radius * eye, -radius * eye, eye[:1] * 0])
    with torch.no_grad():
        vals = ir_gap(L, P, d, cand[None], deltas[:, None], definition)  # (n_delta, n_cand)
    best, idx = vals.topk(min(n_starts, cand.shape[0]), dim=-1)
    r = cand[idx].clone()  # (n_delta, n_starts, C)
    step = 0.1 * radius
    for _ in range(ascent_steps):
        r.requires_grad_(True)
        with torch.enable_grad():
            val = ir_gap(L, P, d, r, deltas[:, None], definition)
            (grad,) = torch.autograd.grad(val.sum(), r)
        with torch.no_grad():
            gn = grad.norm(dim=-1, keepdim=True).clamp_min(1e-30)
            r = project_l1(r.detach() + step * grad / gn, radius)
            best = torch.maximum(best, ir_gap(L, P, d, r, deltas[:, None], definition))
        step *= 0.8
    per_delta = best.amax(-1)
    mean = per_delta.mean()
    return (mean, per_delta) if return_per_delta else mean
