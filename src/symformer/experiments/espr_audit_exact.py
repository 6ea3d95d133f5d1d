"""Tiers 0-4 of the `espr` audit: exact identities (float64, tolerance near machine precision) and the
constructive steps of the derivation (block form, Cayley map, exactly relative logits)."""

from __future__ import annotations

import math

import torch

from symformer.experiments.espr_audit_tools import (
    EXACT_TOL,
    Audit,
    block_form,
    cayley,
    comm,
    commuting,
    exact_row,
    eye64,
    gen_sum,
    inverse_cayley,
    logm_orth,
    null_rotation,
    opn,
    proj_act,
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
    _tiers_1_3(a)


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


def _tiers_1_3(a: Audit, d: int = 6, c: int = 3, m: int = 2) -> None:
    g, n = a.g, a.n
    L, U, lam = commuting(g, n, d, c, m)
    r, s = 2 * randn(g, n, c), 2 * randn(g, n, c)
    Ar, As = gen_sum(L, r), gen_sum(L, s)
    exact_row(a, "T1.2", "L_k skew => normal", {"normality": (L @ tr(L) - tr(L) @ L).abs().amax((-3, -2, -1))})
    exact_row(a, "T1.4", "A(r)^T = -A(r)", {"skew": (Ar + tr(Ar)).abs().amax((-2, -1))})
    exact_row(a, "T1.5", "[A(r), A(s)] = 0 for commuting generators", {"commutator": comm(Ar, As).abs().amax((-2, -1))})
    _t2_3(a, d, c, m)
    theta = torch.einsum("nc,ncm->nm", r, lam)  # theta_u(r) = beta_u^T r (T2.4)
    expm = torch.linalg.matrix_exp
    Rr, Rs, Rsr = expm(Ar), expm(As), expm(gen_sum(L, s - r))
    exact_row(
        a,
        "T2.5",
        "U^T A(r) U = (+)_u theta_u(r) J (+) 0",
        {"block": (tr(U) @ Ar @ U - block_form(theta, d)).abs().amax((-2, -1))},
    )
    exact_row(
        a,
        "T2.6",
        "exp(U^T A(r) U) = (+)_u R_2(theta_u(r)) (+) I",
        {"blocks": (expm(tr(U) @ Ar @ U) - rot_blocks(theta, d)).abs().amax((-2, -1))},
    )
    exact_row(
        a,
        "T2.7",
        "R_STR(r) = U [(+)_u R_2(theta_u(r)) (+) I] U^T",
        {"form": (Rr - U @ rot_blocks(theta, d) @ tr(U)).abs().amax((-2, -1))},
    )
    a.orth("R_STR", Rr)
    exact_row(
        a,
        "T2.8",
        "R_STR(r) in SO(d_h)",
        {"orthogonality": (tr(Rr) @ Rr - eye64(d)).abs().amax((-2, -1)), "det - 1": (torch.linalg.det(Rr) - 1).abs()},
    )
    rel = (tr(Rr) @ Rs - Rsr).abs().amax((-2, -1))
    a.rel("STRING (T2.9, pure math)", rel)
    exact_row(a, "T2.9", "R_STR(r_i)^T R_STR(r_j) = R_STR(r_j - r_i)", {"relative": rel})
    Pi = proj_act(U, m)
    Pn = eye64(d) - Pi
    exact_row(
        a,
        "T2.10",
        "Pi_act, Pi_null symmetric idempotent, Pi_act Pi_null = 0, rank Pi_act = 2m",
        {
            "sym": (Pi - tr(Pi)).abs().amax((-2, -1)),
            "idem": (Pi @ Pi - Pi).abs().amax((-2, -1)),
            "null idem": (Pn @ Pn - Pn).abs().amax((-2, -1)),
            "product": (Pi @ Pn).abs().amax((-2, -1)),
            "rank - 2m": (torch.diagonal(Pi, dim1=-2, dim2=-1).sum(-1) - 2 * m).abs(),
        },
    )
    exact_row(a, "T2.11", "R_STR(r) Pi_act = Pi_act R_STR(r)", {"commute": (Rr @ Pi - Pi @ Rr).abs().amax((-2, -1))})
    _tier3(a, L, U, r, s, Rr, Rs, Rsr, Pi, d, m)


def _t2_3(a: Audit, d: int, c: int, m: int) -> None:
    """T2.1-T2.3 constructively: from the generators alone, recover U from the eigenplanes of
    -A(g)^2 = A(g)^T A(g) for a generic g (distinct theta_u), then check U^T L_k U is block form."""
    g, n = a.g, a.n
    U0 = rand_orth(g, n, d)
    lam = randn(g, n, c, m)
    lam[:, 0] = torch.arange(1, m + 1, dtype=torch.float64) + 0.4 * (
        torch.rand(n, m, generator=g, dtype=torch.float64) - 0.5
    )
    L = U0.unsqueeze(1) @ block_form(lam, d) @ tr(U0).unsqueeze(1)
    M = L[:, 0] + 0.05 * gen_sum(L, randn(g, n, c))  # generic combination A(g)
    w, V = torch.linalg.eigh(tr(M) @ M)  # ascending: d - 2m zeros, then theta_u^2 in pairs
    dn = d - 2 * m
    cols = []
    for u in range(m):
        v1 = V[..., dn + 2 * u]
        th = w[..., dn + 2 * u].clamp_min(0).sqrt()
        cols += [v1, (M @ v1.unsqueeze(-1)).squeeze(-1) / th[:, None]]
    Urec = torch.stack(cols + [V[..., i] for i in range(dn)], dim=-1)
    Bk = tr(Urec).unsqueeze(1) @ L @ Urec.unsqueeze(1)
    lam_rec = Bk[..., 2 * torch.arange(m) + 1, 2 * torch.arange(m)]
    err = (Bk - block_form(lam_rec, d)).abs().amax((-3, -2, -1))
    orth = (tr(Urec) @ Urec - eye64(d)).abs().amax((-2, -1))
    ok = float(err.max()) <= 1e-10 and float(orth.max()) <= 1e-10
    a.row(
        "T2.3",
        "commuting skew L_k => one U in O(d_h) with U^T L_k U = (+)_u lam_{k,u} J (+) 0 (via T2.1, T2.2)",
        f"U recovered from the generators: max block residual {float(err.max()):.2e}, orthogonality "
        f"{float(orth.max()):.2e}",
        ok,
        f"{n} draws, d_h={d}, d_c={c}, m={m}; U from the 2-D eigenplanes of A(g)^T A(g) for generic g; tolerance 1e-10",
    )


def _tier3(a: Audit, L, U, r, s, Rr, Rs, Rsr, Pi, d: int, m: int) -> None:
    g, n = a.g, a.n
    S = rand_skew(g, n, d, 1.5)
    eye = eye64(d)
    smin = torch.linalg.svdvals(eye + S)[..., -1]
    exact_row(
        a,
        "T3.1",
        "S skew => I + S invertible (sigma_min >= 1), (I - S)(I + S) = (I + S)(I - S)",
        {
            "1 - sigma_min(I+S) (<=0 ok)": (1 - smin).clamp_min(0),
            "commute": ((eye - S) @ (eye + S) - (eye + S) @ (eye - S)).abs().amax((-2, -1)),
        },
    )
    P = cayley(S)
    a.orth("P (Cayley)", P)
    exact_row(
        a,
        "T3.2",
        "P_sp = (I - S)(I + S)^-1 in SO(d_h)",
        {"orthogonality": (tr(P) @ P - eye).abs().amax((-2, -1)), "det - 1": (torch.linalg.det(P) - 1).abs()},
    )
    sk = rand_skew(g, n, d)
    Q = torch.linalg.matrix_exp(
        sk / opn(sk)[:, None, None] * 0.9 * math.pi * torch.rand(n, 1, 1, generator=g, dtype=torch.float64)
    )
    SQ = inverse_cayley(Q)  # the same map (I - Q)(I + Q)^-1 applied to Q (T3.3)
    exact_row(
        a,
        "T3.3",
        "Q in SO without eigenvalue -1 => S_Q = (I - Q)(I + Q)^-1 skew and Cayley(S_Q) = Q",
        {
            "skew": (SQ + tr(SQ)).abs().amax((-2, -1)) / (1 + SQ.abs().amax((-2, -1))),
            "round trip": (cayley(SQ) - Q).abs().amax((-2, -1)),
        },
        1e-10,
    )
    PA = null_rotation(g, U, m)
    SA = inverse_cayley(PA)
    a.orth("P in A", PA)
    exact_row(
        a,
        "T3.4",
        "P in A is in SO(d_h); R_null without -1 => P = Cayley(S) with S skew (P in B)",
        {
            "orthogonality": (tr(PA) @ PA - eye).abs().amax((-2, -1)),
            "det - 1": (torch.linalg.det(PA) - 1).abs(),
            "S skew": (SA + tr(SA)).abs().amax((-2, -1)) / (1 + SA.abs().amax((-2, -1))),
            "Cayley(S) = P": (cayley(SA) - PA).abs().amax((-2, -1)),
        },
        1e-10,
    )
    Rsp = Rr @ P
    exact_row(
        a,
        "T3.5",
        "R_sp(r) = R_STR(r) P_sp in SO(d_h)",
        {"orthogonality": (tr(Rsp) @ Rsp - eye).abs().amax((-2, -1)), "det - 1": (torch.linalg.det(Rsp) - 1).abs()},
    )
    RspA = Rr @ PA
    exact_row(
        a,
        "T3.6",
        "P in A => Pi P = Pi = P Pi and Pi R_sp(r) Pi = Pi R_STR(r) Pi",
        {
            "Pi P - Pi": (Pi @ PA - Pi).abs().amax((-2, -1)),
            "P Pi - Pi": (PA @ Pi - Pi).abs().amax((-2, -1)),
            "Pi R_sp Pi": (Pi @ RspA @ Pi - Pi @ Rr @ Pi).abs().amax((-2, -1)),
        },
    )
    rel = (Pi @ tr(Rr @ PA) @ (Rs @ PA) @ Pi - Pi @ Rsr @ Pi).abs().amax((-2, -1))
    a.rel("ESPR with P in A (T3.7, pure math)", rel)
    exact_row(a, "T3.7", "P in A => Pi R_sp(r_i)^T R_sp(r_j) Pi = Pi R_STR(r_j - r_i) Pi", {"relative": rel})
    _tier4(a, Rr, Rs, Rsr, P, PA, Pi, d, m)


def _tier4(a: Audit, Rr, Rs, Rsr, P, PA, Pi, d: int, m: int) -> None:
    g, n = a.g, a.n
    q, k = randn(g, n, d, 1), randn(g, n, d, 1)
    qa, ka = Pi @ q, Pi @ k
    da = 2 * m
    for name, PP in (("general P", P), ("P in A", PA)):
        qt, kt = Pi @ Rr @ PP @ qa, Pi @ Rs @ PP @ ka  # T4.3
        alpha = (tr(qt) @ kt).flatten() / math.sqrt(da)
        if name == "general P":
            Mi, Mj = Pi @ Rr @ PP @ Pi, Pi @ Rs @ PP @ Pi
            alt = (tr(qa) @ tr(Mi) @ Mj @ ka).flatten() / math.sqrt(da)
            exact_row(
                a,
                "T4.4",
                "alpha_ij = q~^T k~ / sqrt(d_act) = (q_act)^T (Pi R_sp(r_i) Pi)^T (Pi R_sp(r_j) Pi) k_act / "
                "sqrt(d_act)",
                {"two forms": (alpha - alt).abs() / (1 + alpha.abs())},
            )
        else:
            star = (tr(qa) @ Pi @ Rsr @ Pi @ ka).flatten() / math.sqrt(da)
            err = (alpha - star).abs()
            a.rel("ESPR logits with P in A (T4.5, pure math)", err)
            exact_row(
                a, "T4.5", "P in A => alpha_ij = (q_act)^T Pi R_STR(r_j - r_i) Pi k_act / sqrt(2m)", {"logit": err}
            )
            exact_row(
                a, "T6.1", "GOAL: commuting generators, block form, P in A => exactly relative logits", {"logit": err}
            )
            a.row(
                "T7.2",
                "q^ = d_act^(-1/4) q~, k^ = d_act^(-1/4) k~ => q^ . k^ = alpha_ij exactly",
                f"max abs err {float(((da**-0.25 * qt).mT @ (da**-0.25 * kt)).flatten().sub(alpha).abs().max()):.2e}",
                float(((da**-0.25 * qt).mT @ (da**-0.25 * kt)).flatten().sub(alpha).abs().max()) <= EXACT_TOL,
                f"{n} draws; tolerance {EXACT_TOL:g}",
            )
