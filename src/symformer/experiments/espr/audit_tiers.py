"""ESPR audit, tiers 1-4 (float64, CPU): the structured-rotation statements checked on random draws."""

from __future__ import annotations

import math

import torch

from symformer.experiments.espr.audit_tools import (
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
    null_rotation,
    opn,
    proj_act,
    rand_orth,
    rand_skew,
    randn,
    rot_blocks,
    tr,
)


def tiers_1_to_4(a: Audit, d: int = 6, c: int = 3, m: int = 2) -> None:
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
