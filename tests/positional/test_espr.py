"""ESPR: relative property with P in the set A (T3.7, T4.5), orthogonality (T3.5), distinct-position
exps, penalties, gradcheck, bad input."""

from __future__ import annotations

import math

import pytest
import torch

from symformer.models import penalties
from symformer.positional import ESPR, skew
from symformer.positional import diagnostics as dg
from symformer.positional.espr import distinct_positions


def _espr_in_A(c: int, dh: int = 12, d_act: int = 8, seed: int = 0) -> ESPR:
    """Commuting generators on the active block (perturbed beta) and P = diag(I, R_null): P in A (T3.4)."""
    g = torch.Generator().manual_seed(seed)
    mod = ESPR(dh, c, d_act=d_act).double()
    with torch.no_grad():
        mod.gen_param.mul_(1 + 0.3 * torch.rand(mod.gen_param.shape, generator=g, dtype=torch.float64).mean())
        s = torch.zeros(dh, dh, dtype=torch.float64)
        s[d_act:, d_act:] = skew(torch.randn(dh - d_act, dh - d_act, generator=g, dtype=torch.float64))
        mod.set_skew(s)
    return mod


@pytest.mark.parametrize("c", [1, 2, 3])
def test_relative_property_with_P_in_A(c):
    mod = _espr_in_A(c)
    g = torch.Generator().manual_seed(c)
    ri = torch.randn(400, c, generator=g, dtype=torch.float64) * 10
    rj = torch.randn(400, c, generator=g, dtype=torch.float64) * 10
    d = mod.d_act
    with torch.no_grad():
        p = mod.post_rotation()
        assert dg.delta_P(p, d) == 0 and dg.eta_mix(p, d) == 0  # P in A: fixes the active block
        assert (p.mT @ p - torch.eye(12, dtype=torch.float64)).abs().max() <= 1e-12
        ai, aj = mod.active_matrix(ri), mod.active_matrix(rj)
        rel = (ai.mT @ aj - mod.exp_generator(rj - ri)[..., :d, :d]).abs().max()
        assert rel <= 1e-12  # T3.7
        m = mod.matrix(ri)
        assert (m.mT @ m - torch.eye(12, dtype=torch.float64)).abs().max() <= 1e-12  # T3.5: R_sp in SO
        assert (torch.linalg.det(m) - 1).abs().max() <= 1e-12


def test_logits_are_relative_and_scaled():
    # T4.5: shifting every position by the same offset leaves the logits unchanged; scale = 1/sqrt(d_act)
    mod = _espr_in_A(2)
    assert mod.scale == pytest.approx(1 / math.sqrt(8))
    g = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, 3, 9, 12, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.randn(9, 2, generator=g, dtype=torch.float64) * 4
    shift = torch.randn(1, 2, generator=g, dtype=torch.float64) * 6
    qa, ka = mod(q, k, pos)
    qb, kb = mod(q, k, pos + shift)
    assert (qa @ ka.mT - qb @ kb.mT).abs().max() <= 1e-12
    assert (qa[..., 8:] == 0).all()  # null coordinates are zero (Pi_act q~)


@pytest.mark.parametrize("post", [True, False])
def test_forward_matches_matrix_noncommuting(post):
    mod = ESPR(10, 2, d_act=6, commuting_init=False, post_rotation=post, init_scale=0.3).double()
    if post:
        with torch.no_grad():
            mod.skew_param.normal_(0, 0.3)
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(2, 2, 7, 10, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.randint(0, 3, (2, 7, 2), generator=g).double()  # repeated positions
    qr, kr = mod(q, k, pos, pos.flip(1))
    pi = mod.projector()
    m = (pi @ mod.matrix(pos) @ pi)[:, None]
    assert (qr - (m @ q[..., None])[..., 0]).abs().max() <= 1e-12
    mk = (pi @ mod.matrix(pos.flip(1)) @ pi)[:, None]
    assert (kr - (mk @ k[..., None])[..., 0]).abs().max() <= 1e-12
    qs, _ = mod(q, k, pos[0])  # shared (N, C) positions
    assert (qs[0] - qr[0]).abs().max() <= 1e-12


def test_one_matrix_exp_per_distinct_position(monkeypatch):
    mod = ESPR(8, 2, commuting_init=False).double()
    pos = torch.tensor([[0, 0], [1, 2], [0, 0], [1, 2], [3, 1]], dtype=torch.float64)
    reps, inv = distinct_positions(pos)
    assert reps.shape == (3, 2) and torch.equal(reps[inv], pos)
    calls = []
    import symformer.positional.espr as espr_mod

    real = espr_mod.expm_skew
    monkeypatch.setattr(espr_mod, "expm_skew", lambda a: (calls.append(a.shape[:-2]), real(a))[1])
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    mod(q, q, pos)
    assert calls == [torch.Size([3])]
    with torch.no_grad():
        mod(q, q, pos)
        mod(q, q, pos.clone())  # cached: no new exp
    assert len(calls) == 2


def test_penalty_and_model_penalty():
    mod = ESPR(8, 2, d_act=6, commuting_init=False, eps_comm_penalty=2.0, eta_mix_penalty=3.0).double()
    with torch.no_grad():
        mod.skew_param.normal_(0, 0.2)
    want = 2.0 * dg.eps_comm(mod.generators()) + 3.0 * dg.eta_mix(mod.post_rotation(), 6)
    pen = mod.penalty()
    assert pen.item() == pytest.approx(want.item(), rel=1e-12) and pen.item() > 0
    pen.backward()
    assert mod.gen_param.grad.abs().sum() > 0 and mod.skew_param.grad.abs().sum() > 0
    assert ESPR(8, 2).penalty().item() == 0.0
    total = penalties(torch.nn.Sequential(mod, ESPR(8, 2)))
    assert total.item() == pytest.approx(pen.item())


def test_gradcheck_espr():
    mod = ESPR(4, 2, d_act=2, commuting_init=False, init_scale=0.3).double()
    with torch.no_grad():
        mod.skew_param.normal_(0, 0.3)
    g = torch.Generator().manual_seed(2)
    pos = torch.tensor([[0.5, -1.0], [0.3, 0.2], [0.5, -1.0]], dtype=torch.float64)
    q = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    fn = lambda a, b, gp, sp: mod(a, b, pos)  # noqa: E731  (parameters enter through the module)
    assert torch.autograd.gradcheck(fn, (q, k, mod.gen_param, mod.skew_param))
    posg = pos.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda r: mod(q.detach(), k.detach(), r)[0], (posg,))


def test_bad_input():
    with pytest.raises(ValueError, match="d_act"):
        ESPR(8, d_act=10)
    with pytest.raises(ValueError, match="d_act"):
        ESPR(8, d_act=5)
    with pytest.raises(ValueError, match="head_dim"):
        ESPR(7)
    with pytest.raises(ValueError, match="eps_comm_penalty"):
        ESPR(8, eps_comm_penalty=-1.0)
    mod = ESPR(8, 2)
    with pytest.raises(ValueError, match="generators: .*skew"):
        mod.set_generators(torch.randn(2, 8, 8))
    with pytest.raises(ValueError, match="generators"):
        mod.set_generators(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match="S: .*skew"):
        mod.set_skew(torch.eye(8))
    q = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match="positions"):
        mod(q, q, torch.zeros(3, 1))
    with pytest.raises(ValueError, match="positions"):
        mod(q, q, torch.tensor([[float("nan"), 0.0]] * 3))
    with pytest.raises(ValueError, match="q"):
        mod(torch.randn(1, 1, 3, 6), q, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="post_rotation"):
        ESPR(8, post_rotation=False).set_skew(torch.zeros(8, 8))


@pytest.mark.parametrize(
    "positions", [[0, 1, 2, 5, 3, 1], [-4, 7, 0, -1, 2, 2], [0.5, 1.0, 2.0, 0.5, 3.0, 1.0], [0, 1, 2, 3, 4, 5]]
)
def test_power_path_equals_matrix_exp(positions):
    # 1-D integer positions use exp(nL) = exp(L)^n; it must agree with matrix_exp per position (0..N-1 in order:
    # the power table itself, no gather)
    fast = ESPR(8, 1, d_act=6, commuting_init=False, init_scale=0.4).double()
    ref = ESPR(8, 1, d_act=6, commuting_init=False, init_scale=0.4, exp_method="matrix_exp").double()
    with torch.no_grad():
        fast.skew_param.normal_(0, 0.3)
        ref.load_state_dict(fast.state_dict())
    pos = torch.tensor(positions, dtype=torch.float64)[:, None]
    q = torch.randn(2, 2, 6, 8, dtype=torch.float64)
    a, b = fast(q, q, pos), ref(q, q, pos)
    assert (a[0] - b[0]).abs().max() <= 1e-12 and (a[1] - b[1]).abs().max() <= 1e-12
    qq = torch.randn(1, 1, 3, 8, dtype=torch.float64, requires_grad=True)
    for pos_i in ([[0.0], [2.0], [3.0]], [[0.0], [1.0], [2.0]]):  # gathered, and the table in order
        pos_i = torch.tensor(pos_i, dtype=torch.float64)
        fn = lambda x, gp, sp, pos_i=pos_i: fast(x, x, pos_i)[0]  # noqa: E731
        assert torch.autograd.gradcheck(fn, (qq, fast.gen_param, fast.skew_param))


def test_gradcheck_penalty():
    mod = ESPR(4, 2, d_act=2, commuting_init=False, init_scale=0.5, eps_comm_penalty=1.0, eta_mix_penalty=1.0).double()
    with torch.no_grad():
        mod.skew_param.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    assert torch.autograd.gradcheck(lambda gp, sp: mod.penalty(), (mod.gen_param, mod.skew_param))


def test_primitive_rays_decomposes_integer_positions():
    from symformer.positional.espr import primitive_rays

    idx = torch.tensor([[0, 0], [2, 4], [1, 2], [-3, 6], [-1, 2], [0, -5], [3, 5]])
    prims, which, g = primitive_rays(idx)
    assert g.tolist() == [0, 2, 1, 3, 1, 5, 1]
    assert torch.equal(prims[which[1:]] * g[1:, None], idx[1:])  # every nonzero position is g r0
    from math import gcd

    assert all(gcd(abs(int(a)), abs(int(b))) == 1 for a, b in prims)


@pytest.mark.parametrize("grid", [4])  # rays up to 3 r0: a chain of two products
def test_ray_exponentials_equal_matrix_exp_and_gradcheck(grid):
    """2-D integer grids share exponentials along rays (exp(A(g r0)) = exp(A(r0))^g): equal to torch.linalg.matrix_exp
    per position in float64, gradients by gradcheck; shifted (non-integer) positions take one exponential each."""
    from symformer.positional import grid_positions
    from symformer.positional.espr import ray_exponentials

    fast = ESPR(4, 2, commuting_init=False, init_scale=0.4, seed=0).double()
    pos = grid_positions(grid).double()
    calls = []

    def counted(p):
        calls.append(p.shape[0])
        return fast.exp_generator(p)

    e = ray_exponentials(pos.long(), counted)
    ref = torch.linalg.matrix_exp(torch.einsum("uc,cij->uij", pos, fast.generators()))
    assert e is not None and (e - ref).abs().max() <= 1e-12
    assert calls[0] < grid * grid - 1  # fewer exponentials than positions
    q = torch.randn(1, 1, grid * grid, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, gp, sp: fast(x, x, pos)[0], (q, fast.gen_param, fast.skew_param))
    shifted = pos + 0.5  # not integers: the per-position path, same values as matrix_exp
    ref = torch.linalg.matrix_exp(torch.einsum("uc,cij->uij", shifted, fast.generators()))
    assert (fast._exp_distinct(shifted, torch.float64) - ref).abs().max() <= 1e-12
