"""Tiers 0-4 of the `espr` audit: exact identities (float64, tolerance near machine precision) and the
constructive steps of the derivation (block form, Cayley map, exactly relative logits)."""

from __future__ import annotations

import math

import torch

from symformer.experiments.espr.audit_tiers import tiers_1_to_4
from symformer.experiments.espr.audit_tools import (
    Audit,
    comm,
    exact_row,
    eye64,
    logm_orth,
    opn,
    rand_invertible,
    rand_orth,
    rand_skew,
    randn,
    rot_blocks,
    tr,
)


def audit_exact(a: Audit) -> None:
    """Tiers 0 to 4: every row is appended to `a`."""
    _tier0(a)
    tiers_1_to_4(a)


def _tier0(a: Audit) -> None:
    g, n = a.g, a.n
    A, B = randn(g, n, 4, 4), randn(g, n, 4, 4)
    U = rand_invertible(g, n, 4)
    det = torch.linalg.det
    sc = 1 + det(A).abs() * det(B).abs()
    exact_row(
        a,
        "T0.4",
        "det(AB) = det A det B; det A^T = det A; det(U A U^-1) = det A",
        {
            "mult": (det(A @ B) - det(A) * det(B)).abs() / sc,
            "transpose": (det(tr(A)) - det(A)).abs(),
            "similarity": (det(U @ A @ torch.linalg.inv(U)) - det(A)).abs() / (1 + det(A).abs()),
        },
        1e-10,
    )
    M1, M2 = randn(g, n, 2, 2), randn(g, n, 3, 3)
    blk = torch.zeros(n, 5, 5, dtype=torch.float64)
    blk[:, :2, :2], blk[:, 2:, 2:] = M1, M2
    exact_row(
        a,
        "T0.5",
        "det of a block-diagonal matrix = product of block determinants",
        {"det": (det(blk) - det(M1) * det(M2)).abs() / (1 + (det(M1) * det(M2)).abs())},
        1e-10,
    )
    Q = rand_orth(g, n, 5)
    exact_row(a, "T0.6", "Q in O(n) => Q^-1 = Q^T", {"inverse": (torch.linalg.inv(Q) - tr(Q)).abs().amax((-2, -1))})
    dq = det(Q)
    exact_row(a, "T0.7", "Q in O(n) => det Q in {+1, -1}", {"det": torch.minimum((dq - 1).abs(), (dq + 1).abs())})
    # T0.8 on real normal matrices V [(+) (a I + b J)] V^T (every real normal matrix has this form)
    V = rand_orth(g, n, 4)
    ab = randn(g, n, 2, 2)
    core = torch.zeros(n, 4, 4, dtype=torch.float64)
    for u in range(2):
        core[:, 2 * u : 2 * u + 2, 2 * u : 2 * u + 2] = ab[:, u, 0, None, None] * eye64(2) + ab[
            :, u, 1, None, None
        ] * torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    N = V @ core @ tr(V)
    sv = torch.linalg.svdvals(N)
    ev = torch.linalg.eigvals(N).abs().sort(-1, descending=True).values
    exact_row(
        a,
        "T0.8",
        "M normal => singular values = |eigenvalues|",
        {"normality": (N @ tr(N) - tr(N) @ N).abs().amax((-2, -1)), "s_i vs |lambda_i|": (sv - ev).abs().amax(-1)},
        1e-10,
    )
    C = randn(g, n, 4, 4) * torch.exp(randn(g, n, 1, 1))
    sub = int((opn(A @ C) > opn(A) * opn(C) * (1 + 1e-12)).sum())
    tri = int((opn(A + C) > (opn(A) + opn(C)) * (1 + 1e-12)).sum())
    a.row(
        "T0.9",
        "||AB|| <= ||A|| ||B||, ||A + B|| <= ||A|| + ||B|| (operator norm)",
        f"violations: submultiplicativity {sub}, triangle {tri}",
        sub == 0 and tri == 0,
        f"{n} draws of 4x4 Gaussian pairs",
    )
    _t0_11(a)
    _t0_13(a)
    _tier0_rest(a)


def _tier0_rest(a: Audit) -> None:
    """T0.15-T0.20: projectors, skew spectra, plane rotations, Weyl's inequality, inverse transpose."""
    g, n = a.g, a.n
    det = torch.linalg.det
    P = torch.zeros(n, 5, 5, dtype=torch.float64)
    W = rand_orth(g, n, 5)
    Pp, Pq = W[..., :2] @ tr(W[..., :2]), W[..., 2:4] @ tr(W[..., 2:4])
    x, y = randn(g, n, 5, 1), randn(g, n, 5, 1)
    del P
    exact_row(
        a,
        "T0.15",
        "P, Q orthogonal projectors with PQ = 0 => im P orthogonal to im Q",
        {"PQ": (Pp @ Pq).abs().amax((-2, -1)), "(Px).(Qy)": (tr(Pp @ x) @ (Pq @ y)).abs().flatten()},
    )
    S = rand_skew(g, n, 5, 2.0)
    lam = torch.linalg.eigvals(S)
    im = lam.imag.sort(-1).values
    exact_row(
        a,
        "T0.16",
        "S skew => normal, spectrum in iR, closed under lambda -> -lambda",
        {
            "normality": (S @ tr(S) - tr(S) @ S).abs().amax((-2, -1)),
            "|Re lambda|": lam.real.abs().amax(-1),
            "pairing": (im + im.flip(-1)).abs().amax(-1),
        },
        1e-11,
    )
    th = 10 * randn(g, n)
    J = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64)
    R2 = torch.linalg.matrix_exp(th[:, None, None] * J)
    exact_row(
        a,
        "T0.18",
        "R_2(theta) = exp(theta J) in SO(2)",
        {
            "orthogonality": (tr(R2) @ R2 - eye64(2)).abs().amax((-2, -1)),
            "det": (det(R2) - 1).abs(),
            "closed form": (R2 - rot_blocks(th[:, None], 2)).abs().amax((-2, -1)),
        },
        1e-11,
    )
    E = randn(g, n, 5, 5) * torch.exp(randn(g, n, 1, 1))
    A5 = randn(g, n, 5, 5)
    smin = lambda x: torch.linalg.svdvals(x)[..., -1]  # noqa: E731
    viol = int(((smin(A5 + E) - smin(A5)).abs() > opn(E) + 1e-12).sum())
    a.row(
        "T0.19",
        "|sigma_min(A + E) - sigma_min(A)| <= ||E|| (Weyl)",
        f"violations {viol}",
        viol == 0,
        f"{n} draws of 5x5 A, E",
    )
    X = rand_invertible(g, n, 5)
    exact_row(
        a,
        "T0.20",
        "(X^-1)^T = (X^T)^-1",
        {
            "err": (tr(torch.linalg.inv(X)) - torch.linalg.inv(tr(X))).abs().amax((-2, -1))
            / (1 + torch.linalg.inv(X).abs().amax((-2, -1)))
        },
        1e-11,
    )


def _t0_11(a: Audit) -> None:
    g, n = a.g, a.n
    expm = torch.linalg.matrix_exp
    M = randn(g, n, 4, 4) / 2
    Nc = 0.3 * M @ M - 0.5 * M + 0.2 * eye64(4)  # a polynomial in M commutes with M
    U = rand_invertible(g, n, 4)
    Ui = torch.linalg.inv(U)
    M1, M2 = randn(g, n, 2, 2), randn(g, n, 3, 3)
    blk = torch.zeros(n, 5, 5, dtype=torch.float64)
    blk[:, :2, :2], blk[:, 2:, 2:] = M1, M2
    eb = expm(blk)
    scale = 1 + expm(M + Nc).abs().amax((-2, -1))
    trace = torch.diagonal(M, dim1=-2, dim2=-1).sum(-1)
    exact_row(
        a,
        "T0.11",
        "exp: [A,B]=0 => e^(A+B)=e^A e^B; (e^M)^T = e^(M^T); e^(UMU^-1) = U e^M U^-1; det e^M = e^tr M; exp of blocks",
        {
            "commuting": (expm(M + Nc) - expm(M) @ expm(Nc)).abs().amax((-2, -1)) / scale,
            "transpose": (tr(expm(M)) - expm(tr(M))).abs().amax((-2, -1)),
            "similarity": (expm(U @ M @ Ui) - U @ expm(M) @ Ui).abs().amax((-2, -1))
            / (1 + expm(M).abs().amax((-2, -1))),
            "det": (torch.linalg.det(expm(M)) - torch.exp(trace)).abs() / torch.exp(trace),
            "blocks": torch.maximum(
                (eb[:, :2, :2] - expm(M1)).abs().amax((-2, -1)), (eb[:, 2:, 2:] - expm(M2)).abs().amax((-2, -1))
            ),
        },
        1e-11,
    )


def bch_required_constants(X: torch.Tensor, Y: torch.Tensor, ts: list[float]) -> dict[str, list[float]]:
    """For M = tX, N = tY (both signs of t), the smallest constants the BCH statements need:
    T0.13: ||log(e^M e^N) - M - N - [M,N]/2|| / ||[M,N]||^2;
    T5.2 / T6'.2: (||log(e^M e^N) - (M+N)|| - ||[M,N]||/2) / ||[M,N]||^2."""
    expm = torch.linalg.matrix_exp
    out: dict[str, list[float]] = {"T0.13": [], "T5.2": []}
    for t in ts:
        c013, c52 = 0.0, 0.0
        for sgn in (1.0, -1.0):
            M, N = sgn * t * X, sgn * t * Y
            lg = logm_orth(expm(M) @ expm(N))
            cm = comm(M, N)
            cn = opn(cm)
            c013 = max(c013, float((opn(lg - M - N - cm / 2) / cn**2).max()))
            c52 = max(c52, float(((opn(lg - M - N) - cn / 2) / cn**2).max()))
        out["T0.13"].append(c013)
        out["T5.2"].append(c52)
    return out


def _t0_13(a: Audit) -> None:
    """T0.13 claims R(M, N) = O(||[M, N]||^2). Along M = tX, N = tY the third-order BCH terms are
    O(t^3) while ||[M,N]||^2 = O(t^4): the needed constant grows like 1/t, so no finite C exists."""
    ts = [1e-1, 1e-2, 1e-3]
    n = a.n  # per scale; 3 scales x 2 signs
    X, Y = rand_skew(a.g, n, 3), rand_skew(a.g, n, 3)
    req = bch_required_constants(X, Y, ts)["T0.13"]
    slope = math.log(req[-1] / req[0]) / math.log(ts[-1] / ts[0])
    ok = slope > -0.5  # bounded constant <=> no growth as t -> 0
    a.row(
        "T0.13",
        "BCH remainder ||R(M,N)|| = O(||[M,N]||^2) (local)",
        "needed C at t=" + ", ".join(f"{t:g}: {c:.3g}" for t, c in zip(ts, req)) + f"; log-log slope {slope:.2f}",
        ok,
        f"{n} draws of skew 3x3 (X, Y) per scale, M = tX, N = tY, both signs of t; the third-order term "
        "(1/12)([M,[M,N]] + [N,[N,M]]) is O(t^3) vs ||[M,N]||^2 = O(t^4), so the required constant grows like 1/t: "
        "true form is O(||[M,N]|| (||M|| + ||N||)). Smallest counterexample: d = 3.",
    )


# ----------------------------------------------------------------------------- Tiers 1-3
