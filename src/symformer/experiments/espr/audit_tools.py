"""Float64 toolkit of the `espr` audit: random draws of the objects the ESPR derivation quantifies over
(skew generators, rotations, projectors, mixing Cayley parameters) and the audit's bookkeeping (rows,
counted bounds, exactness tallies). The Cayley map, the Haar draw and the operator norm are the library's
own (positional/cayley.py, attention/favor.py, positional/diagnostics.py), so the audit checks them too."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from symformer.attention.favor import haar_orthogonal
from symformer.positional.cayley import cayley, inverse_cayley  # noqa: F401  (re-exported for the tiers)
from symformer.positional.diagnostics import operator_norm as opn
from symformer.positional.diagnostics import sample_l1_ball

PAPER = "espr-positional-rotations"
EXACT_TOL = 1e-12  # exactness target in float64 (near machine precision)
SLACK = 1e-12  # rounding slack allowed on proven inequalities


def rand_orth(g: torch.Generator, n: int, d: int) -> torch.Tensor:
    """n Haar-distributed O(d) draws (the library's QR draw with the sign fix)."""
    return haar_orthogonal(d, g, n)


def eye64(d: int) -> torch.Tensor:
    return torch.eye(d, dtype=torch.float64)


def tr(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(-1, -2)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def rand_skew(g: torch.Generator, n: int, d: int, scale: float = 1.0) -> torch.Tensor:
    a = randn(g, n, d, d)
    return scale * (a - tr(a)) / 2


def rand_so(g: torch.Generator, n: int, d: int) -> torch.Tensor:
    q = rand_orth(g, n, d)
    flip = torch.linalg.det(q) < 0
    q[flip, :, 0] = -q[flip, :, 0]
    return q


def rand_invertible(g: torch.Generator, n: int, d: int) -> torch.Tensor:
    """Invertible matrices with condition number <= e^2 (so similarity checks stay near eps)."""
    sv = torch.exp(2 * torch.rand(n, d, generator=g, dtype=torch.float64) - 1)
    return rand_orth(g, n, d) @ torch.diag_embed(sv) @ rand_orth(g, n, d)


def block_form(lam: torch.Tensor, d: int) -> torch.Tensor:
    """(..., m) -> (..., d, d): (+)_u lam_u J (+) 0 (T2.3), J = [[0, -1], [1, 0]] (T0.17)."""
    m = lam.shape[-1]
    out = lam.new_zeros(*lam.shape[:-1], d, d)
    idx = torch.arange(m)
    out[..., 2 * idx + 1, 2 * idx] = lam
    out[..., 2 * idx, 2 * idx + 1] = -lam
    return out


def rot_blocks(theta: torch.Tensor, d: int) -> torch.Tensor:
    """(..., m) -> (..., d, d): (+)_u R_2(theta_u) (+) I (T2.6)."""
    m = theta.shape[-1]
    out = torch.eye(d, dtype=theta.dtype).expand(*theta.shape[:-1], d, d).clone()
    idx = torch.arange(m)
    c, s = theta.cos(), theta.sin()
    out[..., 2 * idx, 2 * idx] = c
    out[..., 2 * idx + 1, 2 * idx + 1] = c
    out[..., 2 * idx + 1, 2 * idx] = s
    out[..., 2 * idx, 2 * idx + 1] = -s
    return out


def comm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[A, B] = AB - BA."""
    return a @ b - b @ a


def gen_sum(L: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """A(r) = sum_k r_k L_k (T1.3); L (n, C, d, d), r (n, C)."""
    return torch.einsum("nc,ncij->nij", r, L)


def commuting(g: torch.Generator, n: int, d: int, c: int, m: int, scale: float = 1.0):
    """Commuting skew generators L_k = U [(+)_u lam_{k,u} J (+) 0] U^T (T1.1, T2.3)."""
    U = rand_orth(g, n, d)
    lam = scale * randn(g, n, c, m)
    L = U.unsqueeze(1) @ block_form(lam, d) @ tr(U).unsqueeze(1)
    return L, U, lam


def proj_act(U: torch.Tensor, m: int) -> torch.Tensor:
    """Pi_act = U diag(I_2m, 0) U^T (T2.10)."""
    d = U.shape[-1]
    diag = torch.zeros(d, dtype=U.dtype)
    diag[: 2 * m] = 1
    return U @ torch.diag(diag) @ tr(U)


def logm_orth(q: torch.Tensor) -> torch.Tensor:
    """Principal log of orthogonal (normal) matrices by eigendecomposition (T0.11 log near I)."""
    w, V = torch.linalg.eig(q.to(torch.complex128))
    lg = V @ torch.diag_embed(torch.log(w)) @ torch.linalg.inv(V)
    return lg.real


def ball_l1(g: torch.Generator, n: int, c: int, radius: float) -> torch.Tensor:
    """n points uniform in the l1 ball of the given radius (T8'.5bis; the library's sampler)."""
    return sample_l1_ball(n, c, radius, g)


def l1(x: torch.Tensor) -> torch.Tensor:
    return x.abs().sum(-1)


def pure_mix_s(g: torch.Generator, U: torch.Tensor, m: int, rho_max: float) -> torch.Tensor:
    """Skew S with Pi_act S Pi_act = 0 (T6'.7 hypothesis), rescaled so ||S|| < rho_max < 1."""
    n, d = U.shape[0], U.shape[-1]
    s = rand_skew(g, n, d)
    mask = torch.ones(d, d, dtype=torch.float64)
    mask[: 2 * m, : 2 * m] = 0
    s = s * mask
    target = rho_max * torch.rand(n, 1, 1, generator=g, dtype=torch.float64)
    s = s / opn(s)[:, None, None] * target
    return U @ s @ tr(U)


def null_rotation(g: torch.Generator, U: torch.Tensor, m: int, angle: float = 2.5) -> torch.Tensor:
    """P = U diag(I_2m, R_null) U^T in the set A of T3.4, R_null = exp(skew) without eigenvalue -1."""
    n, d = U.shape[0], U.shape[-1]
    dn = d - 2 * m
    sk = rand_skew(g, n, dn)
    sk = sk / opn(sk).clamp_min(1e-300)[:, None, None] * angle  # angles < pi keep -1 out of the spectrum
    blk = torch.eye(d, dtype=torch.float64).repeat(n, 1, 1)
    blk[:, 2 * m :, 2 * m :] = torch.linalg.matrix_exp(sk)
    return U @ blk @ tr(U)


# ----------------------------------------------------------------------------- audit bookkeeping


@dataclass
class Row:
    id: str
    statement: str
    measured: str
    ok: bool | None
    evidence: str
    paper: str = "boxed statement"


@dataclass
class Audit:
    g: torch.Generator
    n: int
    rows: list[Row] = field(default_factory=list)
    rel_err: dict[str, float] = field(default_factory=dict)
    orth_err: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    def row(
        self, id: str, statement: str, measured: str, ok: bool | None, evidence: str, paper: str = "boxed statement"
    ) -> None:
        self.rows.append(Row(id, statement, measured, ok, evidence, paper))

    def bound(self, name: str, lhs: torch.Tensor, rhs: torch.Tensor) -> int:
        """Tally a bound we state as proven: lhs <= rhs (+ rounding slack) on every draw."""
        viol = int((lhs > rhs + SLACK * (1 + rhs.abs())).sum())
        old = self.bounds.get(name, (0, 0))
        self.bounds[name] = (old[0] + lhs.numel(), old[1] + viol)
        return viol

    def rel(self, name: str, err: torch.Tensor) -> float:
        v = float(err.max())
        self.rel_err[name] = max(self.rel_err.get(name, 0.0), v)
        return v

    def orth(self, name: str, q: torch.Tensor) -> float:
        v = float((tr(q) @ q - eye64(q.shape[-1])).abs().amax())
        self.orth_err[name] = max(self.orth_err.get(name, 0.0), v)
        return v


def exact_row(a: Audit, id: str, statement: str, errs: dict[str, torch.Tensor], tol: float = EXACT_TOL) -> None:
    """A row for exact identities: max abs error of each part against `tol`."""
    vals = {k: float(v.max()) for k, v in errs.items()}
    ok = all(v <= tol for v in vals.values())
    meas = "; ".join(f"{k}: {v:.2e}" for k, v in vals.items())
    a.row(id, statement, f"max abs err {meas}", ok, f"{a.n} float64 draws; tolerance {tol:g}")
