"""Diagnostics and the proven bounds (B1) Trotter and (B2) logit deviation, over >= 10,000 draws each.

The bounds are theorems (proofs in positional/diagnostics.py), so the tests expect 0 violations up to
floating-point rounding (absolute slack 1e-12 in float64)."""

from __future__ import annotations

import math

import pytest
import torch

from symformer.positional import ESPR, STRING, RoPE, skew
from symformer.positional import diagnostics as dg

N_DRAWS = 10_000


def _draws(seed: int, n: int = N_DRAWS, c: int = 3, dh: int = 6):
    g = torch.Generator().manual_seed(seed)
    # generator norms and position scales spread over 4 decades, so both tight (small) and loose regimes occur
    L = skew(torch.randn(n, c, dh, dh, generator=g, dtype=torch.float64))
    L = L * 10 ** torch.empty(n, 1, 1, 1, dtype=torch.float64).uniform_(-2, 0.5, generator=g)
    scale = 10 ** torch.empty(n, 1, dtype=torch.float64).uniform_(-2, 1, generator=g)
    r = torch.randn(n, c, generator=g, dtype=torch.float64) * scale
    s = torch.randn(n, c, generator=g, dtype=torch.float64) * scale
    return L, r, s


def _batched_eps(L: torch.Tensor) -> torch.Tensor:
    comm = L[:, :, None] @ L[:, None] - L[:, None] @ L[:, :, None]
    return torch.linalg.matrix_norm(comm, ord=2).flatten(1).amax(-1)


def _apply_gen(L, r):
    return torch.linalg.matrix_exp(torch.einsum("nc,ncij->nij", r, L))


def test_trotter_bound_B1_no_violation():
    L, r, s = _draws(0)
    eps = _batched_eps(L)
    er, es, ed = _apply_gen(L, r), _apply_gen(L, s), _apply_gen(L, s - r)
    lhs = torch.linalg.matrix_norm(er.mT @ es - ed, ord=2)
    bound = dg.rotation_deviation_bound(eps, r, s)
    assert int((lhs > bound + 1e-12).sum()) == 0
    # the bound is not vacuous: it is tight to within a factor 2 for some small-angle draws
    assert float((lhs / bound.clamp_min(1e-300))[bound > 1e-8].max()) > 0.5


def test_rotation_deviation_matches_batched():
    L, r, s = _draws(1, n=20, c=2)
    for i in range(3):
        got = dg.rotation_deviation(L[i], r[i], s[i])
        er, es, ed = (torch.linalg.matrix_exp(torch.einsum("c,cij->ij", x, L[i])) for x in (r[i], s[i], s[i] - r[i]))
        assert abs(float(got) - float(torch.linalg.matrix_norm(er.T @ es - ed, ord=2))) <= 1e-14


def test_logit_deviation_bound_B2_no_violation():
    n, c, dh, d = N_DRAWS, 2, 6, 4
    g = torch.Generator().manual_seed(3)
    L, ri, rj = _draws(4, n, c, dh)
    # post-rotations from tiny to large, also some exactly in A (active block fixed)
    s_mat = skew(torch.randn(n, dh, dh, generator=g, dtype=torch.float64))
    s_mat = s_mat * 10 ** torch.empty(n, 1, 1, dtype=torch.float64).uniform_(-3, 0.5, generator=g)
    in_a = torch.rand(n, generator=g) < 0.2
    s_mat[in_a, :d, :] = 0
    s_mat[in_a, :, :d] = 0
    eye = torch.eye(dh, dtype=torch.float64)
    p = torch.linalg.solve(eye + s_mat, eye - s_mat)
    q = torch.randn(n, dh, generator=g, dtype=torch.float64)
    k = torch.randn(n, dh, generator=g, dtype=torch.float64)
    gi, gj, gd = _apply_gen(L, ri), _apply_gen(L, rj), _apply_gen(L, rj - ri)
    qa, ka = q[:, :d], k[:, :d]
    qt = ((gi @ p)[:, :d, :d] @ qa[..., None])[..., 0]  # Pi G(r_i) P Pi q (T4.3)
    kt = ((gj @ p)[:, :d, :d] @ ka[..., None])[..., 0]
    alpha = (qt * kt).sum(-1) / math.sqrt(d)  # T4.4
    alpha_star = (qa * (gd[:, :d, :d] @ ka[..., None])[..., 0]).sum(-1) / math.sqrt(d)
    eps = _batched_eps(L)
    dp = torch.linalg.matrix_norm((p - eye)[:, :, :d], ord=2)
    gam_i = torch.linalg.matrix_norm(gi[:, d:, :d], ord=2)
    gam_j = torch.linalg.matrix_norm(gj[:, d:, :d], ord=2)
    bound = dg.logit_deviation_bound(qa.norm(dim=-1), ka.norm(dim=-1), ri, rj, eps, d, dp, gam_i, gam_j)
    assert int(((alpha - alpha_star).abs() > bound + 1e-12).sum()) == 0
    # with P in A and commuting block generators the bound and the deviation are both 0 (T6.1)
    assert float(dp[in_a].max()) <= 1e-15


def test_quantities_on_modules():
    s = STRING(8, 2, init_scale=0.2).double()
    with torch.no_grad():
        L = s.generators()
        assert float(dg.eps_comm(L)) <= 1e-12
        assert float(dg.Lambda(L)) == pytest.approx(float(dg.Lambda(s.beta)), rel=1e-10)  # T6'.0 via T2.3
        assert float(dg.lambda_operator(L)) <= float(dg.Lambda(s.beta)) + 1e-12
    pos = torch.tensor([[1.0, -2.0], [0.5, 0.5]], dtype=torch.float64)
    assert float(dg.R(pos)) == 3.0
    S = skew(torch.randn(6, 6, dtype=torch.float64))
    s_minus, e = dg.split_skew(S, 4)
    assert torch.equal(s_minus + e, S) and (e[:4, :4] == 0).all() and (s_minus[:4, 4:] == 0).all()
    assert float(dg.rho(S)) == pytest.approx(float(torch.linalg.matrix_norm(S, ord=2)))
    assert float(dg.eta(S, 4)) == pytest.approx(float(torch.linalg.matrix_norm(e, ord=2)))
    # T6'.8 counterexample shape: P = diag(Q, I) has eta_mix = 0 but delta_P = ||Q - I|| = 2 for Q = -I_2
    p = torch.eye(6, dtype=torch.float64)
    p[:2, :2] = -torch.eye(2, dtype=torch.float64)
    assert float(dg.eta_mix(p, 4)) == 0.0 and float(dg.delta_P(p, 4)) == pytest.approx(2.0)


def test_ir_spec_zero_when_commuting_and_positive_otherwise():
    # T8'.23: commuting generators and P in A give IR_spec = 0
    for mod in (RoPE(8, 2, mode="mixed").double(), STRING(8, 2, init_scale=0.3).double(), ESPR(8, 2, d_act=6).double()):
        assert float(dg.ir_spec(mod, 2.0, n_delta=8, n_r=32, ascent_steps=3)) <= 1e-12
    esp = ESPR(8, 2, commuting_init=False, init_scale=0.3).double()
    val, per = dg.ir_spec(esp, 2.0, n_delta=8, n_r=32, ascent_steps=5, return_per_delta=True)
    assert per.shape == (8,) and float(val) > 1e-3
    # the ascent only improves on the sampled sup
    val0 = dg.ir_spec(esp, 2.0, n_delta=8, n_r=32, ascent_steps=0)
    assert float(val) >= float(val0)
    # both R_sp definitions are available and differ in general
    L, P = esp.generators().detach(), skew(torch.randn(8, 8, dtype=torch.float64)) * 0.3
    P = torch.linalg.solve(torch.eye(8, dtype=torch.float64) + P, torch.eye(8, dtype=torch.float64) - P)
    a = dg.ir_spec((L, P, 6), 1.0, n_delta=4, n_r=16, ascent_steps=0)
    b = dg.ir_spec((L, P, 6), 1.0, n_delta=4, n_r=16, ascent_steps=0, definition="T8'.7")
    assert float(a) != float(b)


def test_project_l1_and_sampling():
    g = torch.Generator().manual_seed(9)
    v = torch.randn(2000, 3, generator=g, dtype=torch.float64) * 3
    p = dg.project_l1(v, 1.5)
    assert float(p.abs().sum(-1).max()) <= 1.5 + 1e-12
    inside = v.abs().sum(-1) <= 1.5
    assert torch.equal(p[inside], v[inside])
    # optimality of the projection: no random point of the ball is closer to v
    cand = dg.sample_l1_ball(2000, 3, 1.5, g)
    d_proj = (v[:50, None] - p[:50, None]).norm(dim=-1)
    d_cand = (v[:50, None] - cand[None]).norm(dim=-1)
    assert bool((d_proj <= d_cand + 1e-12).all())
    assert float(cand.abs().sum(-1).max()) <= 1.5


def test_bad_input():
    with pytest.raises(ValueError, match="L: .*skew"):
        dg.eps_comm(torch.randn(2, 3, 3))
    with pytest.raises(ValueError, match="L"):
        dg.eps_comm(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="d_act"):
        dg.eta_mix(torch.eye(4), 5)
    with pytest.raises(ValueError, match="S"):
        dg.rho(torch.eye(3))
    with pytest.raises(ValueError, match="definition"):
        dg.ir_gap(torch.zeros(1, 2, 2), torch.eye(2), 2, torch.zeros(1, 1), torch.zeros(1, 1), definition="x")
    with pytest.raises(TypeError, match="module_or_matrices"):
        dg.ir_spec(object(), 1.0)
    with pytest.raises(ValueError, match="deltas"):
        dg.ir_spec(RoPE(4, 2), 1.0, deltas=torch.zeros(3, 1))
    with pytest.raises(ValueError, match="radius"):
        dg.ir_spec(RoPE(4, 2), -1.0)
