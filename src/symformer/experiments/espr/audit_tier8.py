"""Tier 8' of the `espr` audit: IR_spec (T8'.7) under both definitions of R_sp, STRING members (T8'.23, T8'.14),
ESPR members (T8'.13), reachability (T8'.15) and the feature link (T8'.10)."""

from __future__ import annotations

import torch

from symformer.experiments.espr.audit_tools import (
    EXACT_TOL,
    Audit,
    ball_l1,
    block_form,
    cayley,
    comm,
    eye64,
    gen_sum,
    l1,
    null_rotation,
    opn,
    pure_mix_s,
    rand_orth,
    rand_skew,
    randn,
    tr,
)


def _ir_gap_batch(L, P, Pi, r, delta) -> dict[str, torch.Tensor]:
    """||Pi R_sp(r)^T R_sp(r + Delta) Pi - Pi R_STR(Delta)|| for one model per row, under both
    definitions of R_sp: "T3.5" (R_STR P) and "T8'.7" (P R_STR P^T, the literal T8'.7 expression).
    L (n, C, d, d), P (n, d, d), Pi (d, d), r (n, k, C), delta (n, C) -> {defn: (n, k)}."""
    expm = torch.linalg.matrix_exp
    Rr = expm(torch.einsum("nkc,ncij->nkij", r, L))
    Rrd = expm(torch.einsum("nkc,ncij->nkij", r + delta[:, None], L))
    Rd = (Pi @ expm(gen_sum(L, delta)))[:, None]
    Pk = P[:, None]
    inner = tr(Rr) @ Rrd
    return {"T3.5": opn(Pi @ (tr(Pk) @ inner @ Pk) @ Pi - Rd), "T8'.7": opn(Pi @ (Pk @ inner @ tr(Pk)) @ Pi - Rd)}


def _ir_sup(
    g, L, P, Pi, delta, radius: float, k: int = 4, rounds: int = 1, k_local: int = 4
) -> dict[str, torch.Tensor]:
    """sup over ||r||_1 <= R per Delta (T8'.7), estimated from below by k samples in the l1 ball plus
    `rounds` of random local ascent around the best (driven by the T8'.7 gap); both definitions."""
    n, c = delta.shape
    r = ball_l1(g, n * k, c, radius).reshape(n, k, c)
    vals = _ir_gap_batch(L, P, Pi, r, delta)
    best = {df: v.max(-1).values for df, v in vals.items()}
    rb = r[torch.arange(n), vals["T8'.7"].argmax(-1)]
    for i in range(rounds):
        cand = rb[:, None] + (0.3 * 0.5**i) * radius * randn(g, n, k_local, c)
        cand = cand * (radius / l1(cand).clamp_min(1e-300)).clamp(max=1.0)[..., None]
        v = _ir_gap_batch(L, P, Pi, cand, delta)
        vb, ib = v["T8'.7"].max(-1)
        rb = torch.where((vb > best["T8'.7"])[:, None], cand[torch.arange(n), ib], rb)
        best = {df: torch.maximum(best[df], v[df].max(-1).values) for df in best}
    return best


def _active_generators(g, n: int, d: int, m: int, c: int, eps_scale: float) -> torch.Tensor:
    """Generators acting on the first 2m coordinates only (zero on the null block, as T8'.7 assumes):
    commuting block form in a random active basis plus eps_scale * random skew (non-commuting)."""
    da = 2 * m
    Ua = rand_orth(g, n, da)
    lam = randn(g, n, c, m)
    La = Ua.unsqueeze(1) @ block_form(lam, da) @ tr(Ua).unsqueeze(1)
    La = La + eps_scale * rand_skew(g, n * c, da).reshape(n, c, da, da)
    L = torch.zeros(n, c, d, d, dtype=torch.float64)
    L[..., :da, :da] = La
    return L


def tier8(a: Audit, d: int = 6, m: int = 2, c: int = 2) -> dict[str, float]:
    g, n = a.g, a.n
    Pi = torch.diag(torch.tensor([1.0] * (2 * m) + [0.0] * (d - 2 * m), dtype=torch.float64))
    Ue = torch.eye(d, dtype=torch.float64).repeat(n, 1, 1)
    R, Rd = 1.0, 1.0
    # STRING members: commuting generators on the active block, P in A (T8'.23, T8'.14)
    Ls = _active_generators(g, n, d, m, c, 0.0)
    PA = null_rotation(g, Ue, m)
    delta = ball_l1(g, n, c, Rd)
    ir_s = _ir_sup(g, Ls, PA, Pi, delta, R)
    mx = max(float(v.max()) for v in ir_s.values())
    a.row(
        "T8'.23",
        "commuting generators and P in A => IR_spec = 0",
        f"max over draws of sup_r gap: T3.5 R_sp {float(ir_s['T3.5'].max()):.2e}, T8'.7 R_sp "
        f"{float(ir_s[chr(84) + '8' + chr(39) + '.7'].max()):.2e}",
        mx <= EXACT_TOL,
        f"{n} (model, Delta) draws, d_h={d}, m={m}, d_c={c}, R = R_Delta = {R}; both R_sp definitions",
    )
    a.row(
        "T8'.14",
        "inf over H_STRING of IR_spec >= c_T > 0 (non-commuting lower bound)",
        f"STRING members reach IR_spec = {mx:.1e} (= 0 up to rounding)",
        mx > EXACT_TOL,
        f"{n} STRING draws (commuting generators, P in A): IR_spec = 0 by T8'.23, contradicting c_T > 0; the "
        f"hypothesis "
        "'exists a != b with [L_a, L_b] != 0' is incompatible with H_STRING's commuting generators",
    )
    # ESPR members: non-commuting generators on the active block, pure-mix Cayley P (T8'.13, T8'.7)
    eps_scale = 0.1 * torch.rand(1, generator=g).item() + 0.02
    Le = _active_generators(g, n, d, m, c, eps_scale)
    S = pure_mix_s(g, Ue, m, 0.5)
    P = cayley(S)
    Pn = eye64(d) - Pi
    eta = opn(Pi @ S @ Pn + Pn @ S @ Pi)
    rho = opn(S)
    eps = opn(comm(Le[:, :, None], Le[:, None])).amax((-2, -1))
    c_comm = 0.5 * eps * (R + Rd) ** 2  # C_BCH = 0: the least C_comm any C_* >= 0 allows
    c_mix = 2 * eta**2 / (1 - rho) ** 3
    delta = ball_l1(g, n, c, Rd)
    ir_e = _ir_sup(g, Le, P, Pi, delta, R)
    v13 = int((ir_e["T8'.7"] > c_comm + c_mix + 1e-12).sum())
    worst = float((ir_e["T8'.7"] / (c_comm + c_mix)).max())
    a.row(
        "T8'.13",
        "IR_spec <= C_comm + C_mix (ESPR/Cayley/pure mix, C_mix = 2 eta^2/(1-rho)^3)",
        f"pointwise (per Delta) violations with C_BCH = 0: {v13}/{n}; max sup_r gap / (C_comm + C_mix) = {worst:.3f}",
        v13 == 0 if v13 == 0 else None,
        f"{n} (model, Delta) draws, T8'.7's R_sp, d_h={d}, m={m}, generators zero on the null block, eps scale "
        f"{eps_scale:.3f}, "
        f"rho < 0.5, R = R_Delta = 1; the pointwise check is stronger than the statement (an expectation over "
        f"Delta), so "
        "a violation would be inconclusive, none means it holds for every C_* >= 0",
    )
    diff = (ir_e["T3.5"] - ir_e["T8'.7"]).abs()
    a.row(
        "T8'.7",
        "IR_spec with T8'.7's R_sp = P R_STR P^T equals IR_spec with T3.5's R_sp = R_STR P",
        f"max |difference| of the per-Delta sups {float(diff.max()):.3g} (means {float(ir_e['T3.5'].mean()):.3g} vs "
        f"{float(ir_e[chr(84) + '8' + chr(39) + '.7'].mean()):.3g})",
        float(diff.max()) <= 1e-9,
        f"{n} ESPR draws as in T8'.13 (d_null = {d - 2 * m}): the two definitions of R_sp give different IR_spec "
        "in general; "
        "they agree when S has no null-null block (then D P D = P^T with D = diag(I, -I)) and on STRING members "
        "(T8'.23). Checks in this audit say which they use.",
    )
    return _tier8_reach(a, d, m, c, Pi, Ue, R, Rd, mx, ir_e)


def _tier8_reach(
    a: Audit, d: int, m: int, c: int, Pi, Ue, R: float, Rd: float, mx: float, ir_e: dict
) -> dict[str, float]:
    """T8'.15 (reachability: IR_spec -> 0 as eps_comm, eta_mix -> 0), T8'.10 and the statements without numbers."""
    g, n = a.g, a.n
    nn_ = max(-(-n // 3), 100)  # three delta levels, >= n draws in all
    Pi_ = Pi
    Ue_ = Ue[:nn_]
    L0 = _active_generators(g, nn_, d, m, c, 0.0)
    K = rand_skew(g, nn_ * c, 2 * m).reshape(nn_, c, 2 * m, 2 * m)
    S0 = pure_mix_s(g, Ue_, m, 0.9)
    S0 = S0 / opn(S0)[:, None, None]
    dl = ball_l1(g, nn_, c, Rd)
    irs = []
    for dlt in (1e-1, 1e-2, 1e-3):
        Ld = L0.clone()
        Ld[..., : 2 * m, : 2 * m] += dlt * K
        irs.append(float(_ir_sup(g, Ld, cayley(dlt * S0), Pi_, dl, R)["T8'.7"].mean()))
    ok15 = irs[1] < irs[0] / 5 and irs[2] < irs[1] / 5
    a.row(
        "T8'.15",
        "for every delta > 0 some ESPR model has eps_comm, eta_mix <= delta and IR_spec -> 0",
        "mean IR_spec at delta = 0.1, 0.01, 0.001: " + ", ".join(f"{v:.3g}" for v in irs),
        ok15,
        f"{nn_} models per delta: generators L0 + delta K, P = Cayley(delta S0) with ||S0|| = 1; T8'.7's R_sp",
    )
    # T8'.10: ||(U' - U) z|| <= ||U' - U|| B_z
    U1, U2 = rand_orth(g, n, d), rand_orth(g, n, d)
    z = randn(g, n, d, 1)
    lhs = ((U1 - U2) @ z).norm(dim=(-2, -1))
    v10 = int((lhs > opn(U1 - U2) * z.norm(dim=(-2, -1)) * (1 + 1e-12)).sum())
    a.row(
        "T8'.10", "||z' - z|| = ||(U' - U) z|| <= ||U' - U||_2 B_z", f"violations {v10}", v10 == 0, f"{n} draws, d={d}"
    )
    for id_, st in (
        ("T8'.17", "PL condition and GD finds the global minimiser"),
        ("T8'.18", "Rademacher complexity C_n(H, delta) with S(H_ESPR) <= S_0 + c~ (rank E + eps_comm)"),
        ("T8'.19", "uniform generalisation bound"),
        ("T8'.20", "uniform shift-risk bound"),
    ):
        a.row(
            id_,
            st,
            "not checkable: constants (mu, L_g, S_0, c~, c) are unspecified",
            None,
            "no numeric content to test; not counted in statements_checked",
        )
    return {
        "ir_spec_string_max": mx,
        "ir_espr_t35_mean": float(ir_e["T3.5"].mean()),
        "ir_espr_t87_mean": float(ir_e["T8'.7"].mean()),
    }
