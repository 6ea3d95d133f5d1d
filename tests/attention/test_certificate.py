"""Certificate pieces (Lemma F.2, Thm B.8, Lemma H.1, eq. 103) checked against measured deviations in float64."""

import math

import pytest
import torch

from symformer.attention.certificate import (
    certified,
    certify,
    combine_heads,
    eps_stage1,
    mixer_lipschitz,
    op_norm,
    row_norm_max,
    stage2_factor,
)
from symformer.attention.plash import PlashAttention


def _inputs(n=6, nq=8, nk=16, d=8, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, m, d, generator=g, dtype=torch.float64) * scale for m in (nq, nk, nk)]


def _module(**kw):
    args = dict(head_dim=8, n_heads=1, d_model=8, M=4, degrees=(1,), D_k=32, mixer_heads=2)
    args.update(kw)
    return PlashAttention(**args).double().eval()


def test_op_norm_power_iteration_matches_svd():
    w = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert math.isclose(float(op_norm(w)), float(torch.linalg.matrix_norm(w, ord=2)), rel_tol=1e-8)


def test_stage1_comparator_bound_holds():
    m = _module()
    q, k, v = _inputs()
    eps, y_q = eps_stage1(q, k, v, m.prototypes)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert bool(((y - y_q).flatten(1).norm(dim=-1) <= eps).all())  # Lemma F.2


@pytest.mark.parametrize("layers", [1, 2])
def test_mixer_lipschitz_bound_on_segment(layers):
    # sound mode: ||Mixer(U) - Mixer(U')||_{2,inf} <= L_mix ||U - U'||_{2,inf} for U, U' on the segment
    m = _module(mixer_layers=layers)
    g = torch.Generator().manual_seed(2)
    y0 = torch.randn(5, 4, 8, generator=g, dtype=torch.float64)
    y1 = y0 + 0.05 * torch.randn(5, 4, 8, generator=g, dtype=torch.float64)
    lip = mixer_lipschitz(m.mixer, y0, y1, paper=False)
    with torch.no_grad():
        for t0, t1 in ((0.0, 1.0), (0.2, 0.7), (0.5, 0.55)):
            u, w = y0 + t0 * (y1 - y0), y0 + t1 * (y1 - y0)
            assert bool((row_norm_max(m.mixer(u) - m.mixer(w)) <= lip * row_norm_max(u - w)).all())


def test_post_processing_bound_lemma_h1():
    m = _module()
    q, k, v = _inputs(scale=0.5)
    c = certify(m, q, k, v, paper=False)
    with torch.no_grad():
        t_ts, t_det = m.trace(q, k, v), m.trace(q, k, v, deterministic=True)
    lhs = (t_ts.out - t_det.out).flatten(1).norm(dim=-1)
    rhs = math.sqrt(q.shape[1]) * c.l_post * row_norm_max(t_ts.y_enh - t_det.y_enh)  # eq. (88)
    assert bool((lhs <= rhs).all())


def test_stage2_factor_restores_dk_power():
    m = _module(degrees=(1, 2), D_k=(16, 16))
    eta = 0.5
    want = math.sqrt((math.sqrt(1 + eta) + 1) ** 2 + (math.sqrt(1 + eta) + 4) ** 2)  # D_2^{1/2} = 4
    assert math.isclose(float(stage2_factor(m, eta)), want, rel_tol=1e-12)


def test_feature_discrepancy_theorem_g4_on_event():
    m = _module(degrees=(1, 2), D_k=(64, 64), tau_g=2.0)
    _, k, v = _inputs()
    with torch.no_grad():
        kt, vt = m.compress(k, v)
        g = m.normalized_features(kt, vt)
        for kk, dk, zt, zd in zip(m.degrees, m.D_k, m.sketch_features(g), m.deterministic_features(g)):
            assert bool((zd.norm(dim=-1) <= dk ** ((kk - 1) / 2) * m.tau_g**-kk + 1e-12).all())  # Cor. G.2
            on_event = zt.norm(dim=-1) <= math.sqrt(1.99) * m.tau_g**-kk
            bound = (math.sqrt(1.99) + dk ** ((kk - 1) / 2)) * m.tau_g**-kk
            assert bool(((zt - zd).norm(dim=-1) <= bound)[on_event].all())  # eq. (79)


def test_certified_draws_are_sound():
    # Fig. 2/4-like setting at a reduced size; every certified (draw, eps_out) must have error <= eps_out.
    h = 4
    q, k, v = _inputs(n=8 * h, nq=8, nk=16, d=8, scale=0.05, seed=3)
    n_cert = 0
    for tg in (1e4, 1e8):
        c = certify(_module(tau_g=tg, D_k=64), q, k, v, paper=False)
        ei, ed, co, err = (combine_heads(x, h) for x in (c.eps_I, c.eps_det, c.coef, c.error))
        grid = torch.linspace(float((ei + ed).min()), 3 * float((ei + ed).max()), 20, dtype=torch.float64)
        ok = certified(ei, ed, co, tg, grid)
        n_cert += int(ok.sum())
        assert not bool((ok & (err[None] > grid[:, None])).any())
    assert n_cert > 0  # the check is not vacuous


def test_certified_requires_positive_slack():
    z = torch.zeros(1, dtype=torch.float64)
    assert not bool(certified(torch.ones(1, dtype=torch.float64), z, z, 10.0, [0.5]).any())
    assert bool(certified(torch.ones(1, dtype=torch.float64), z, torch.ones(1, dtype=torch.float64), 10.0, [1.5]).all())


def test_bad_input():
    m = _module()
    q, k, v = _inputs()
    with pytest.raises(ValueError, match="eta"):
        certify(m, q, k, v, eta=1.5)
    with pytest.raises(ValueError, match="q"):
        certify(m, q[0], k, v)
    with pytest.raises(ValueError, match="k"):
        certify(m, q, k[..., :3], v)
    with pytest.raises(ValueError, match="k"):
        certify(m, q, k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="w"):
        op_norm(torch.randn(3))
