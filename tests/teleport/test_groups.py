"""Symmetry groups: invariance in float64, negative checks, inverse, gradient action, closed-form norms."""

from __future__ import annotations

import pytest
import torch
from tests.teleport._models import KINDS, batch, positions, tiny_model
from torch import nn

from symformer.models import attention_layers
from symformer.positional import RoPE, pair_indices
from symformer.positional.base import RotaryPositional
from symformer.teleport import (
    HGroup,
    QKGroup,
    TrivialGroup,
    brute_force_norms,
    closed_form_norms,
    commutant_basis,
    diagonal_blocks,
    relative_rotations,
    symmetry_group,
)


def rel_err(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("kind", KINDS)
def test_invariance_and_inverse(kind):
    m = tiny_model(kind)
    x, pos, _ = batch()
    y0 = m(x, pos).detach()
    before = [p.detach().clone() for p in m.parameters()]
    G = symmetry_group(m)
    g = G.random(torch.Generator().manual_seed(1))  # generic element with head permutations and FFN scaling
    G.apply(m, g)
    moved = max(float((a - b.detach()).abs().max()) for a, b in zip(before, m.parameters(), strict=True))
    assert moved > 1e-2  # the element really moves the parameters
    assert rel_err(m(x, pos).detach(), y0) <= 1e-10
    G.apply(m, G.inverse(g))
    assert max(float((a - b.detach()).abs().max()) for a, b in zip(before, m.parameters(), strict=True)) <= 1e-12


@pytest.mark.parametrize("kind", KINDS)
def test_near_identity_samples_are_symmetries(kind):
    m = tiny_model(kind)
    x, pos, _ = batch()
    y0 = m(x, pos).detach()
    G = symmetry_group(m)
    cands = G.sample(4, 0.65, torch.Generator().manual_seed(2), ffn=True)
    for i in range(4):
        G.apply(m, G.pick(cands, i))
    assert rel_err(m(x, pos).detach(), y0) <= 1e-10


def _apply_qk(model, make_u):
    with torch.no_grad():
        for a in attention_layers(model):
            h, d = a.n_heads, a.head_dim
            u = make_u(d).to(torch.float64)
            wq = (u @ a.q_proj.weight.view(h, d, -1)).reshape(a.q_proj.weight.shape)
            bq = (u @ a.q_proj.bias.view(h, d, 1)).reshape(-1)
            uit = torch.linalg.inv(u).T
            wk = (uit @ a.k_proj.weight.view(h, d, -1)).reshape(a.k_proj.weight.shape)
            bk = (uit @ a.k_proj.bias.view(h, d, 1)).reshape(-1)
            a.q_proj.weight.copy_(wq), a.q_proj.bias.copy_(bq), a.k_proj.weight.copy_(wk), a.k_proj.bias.copy_(bk)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rope_negative_checks(pairing):
    """A generic diagonal U breaks RoPE; H built on the other pairing breaks it too (paper Sec. 3.2)."""
    x, pos, _ = batch()
    m = tiny_model(f"rope-{pairing}")
    y0 = m(x, pos).detach()
    g = torch.Generator().manual_seed(4)
    _apply_qk(m, lambda d: torch.diag(1 + 0.5 * torch.rand(d, generator=g, dtype=torch.float64)))
    assert rel_err(m(x, pos).detach(), y0) > 1e-3
    m = tiny_model(f"rope-{pairing}")
    wrong = HGroup(8, pair_indices(8, "half" if pairing == "interleaved" else "interleaved"))
    _apply_qk(m, lambda d: wrong.random((), torch.Generator().manual_seed(5)))
    assert rel_err(m(x, pos).detach(), y0) > 1e-3
    # the right pairing keeps it
    m = tiny_model(f"rope-{pairing}")
    right = HGroup(8, pair_indices(8, pairing))
    _apply_qk(m, lambda d: right.random((), torch.Generator().manual_seed(5)))
    assert rel_err(m(x, pos).detach(), y0) <= 1e-10


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rope_commutant_is_h(pairing):
    """The numerical commutant of RoPE's relative rotations is exactly H(d_h) (dimension d_h)."""
    rope = RoPE(8, coord_dim=1, pairing=pairing).to(torch.float64)
    basis = commutant_basis(relative_rotations(rope, torch.arange(7.0)[:, None]))
    assert basis.shape[0] == 8
    h = HGroup(8, pair_indices(8, pairing)).basis()
    # span(H) == span(commutant): projecting H's basis onto the commutant loses nothing
    flat = basis.reshape(8, -1)
    proj = (h.reshape(8, -1) @ flat.T) @ flat
    assert float((proj - h.reshape(8, -1)).abs().max()) < 1e-10


def test_commutant_of_nothing_is_everything_and_group_dimensions():
    assert commutant_basis(torch.eye(4, dtype=torch.float64)[None]).shape[0] == 16
    assert QKGroup(4).dimension == 16
    m = tiny_model("espr-noncommuting")
    assert symmetry_group(m).qk_dimensions() == [1, 1]  # generic non-commuting generators: scalars only


def _commuting_diagonals(rel: torch.Tensor) -> int:
    """Independent reference: dim {d : diag(d) M = M diag(d) for every M in rel}, from the SVD of the map
    d -> (d_i - d_j) M_ij stacked over all M."""
    d = rel.shape[-1]
    cols = [
        ((torch.eye(d, dtype=torch.float64)[k][:, None] - torch.eye(d, dtype=torch.float64)[k][None, :]) * rel).reshape(
            -1
        )
        for k in range(d)
    ]
    sv = torch.linalg.svdvals(torch.stack(cols, 1))
    return int((sv <= 1e-9 * max(float(sv.max()), 1.0)).sum())


@pytest.mark.parametrize(
    "kind", ["rope-interleaved", "rope-half", "string", "circulant-string", "espr", "espr-noncommuting", "partial-rope"]
)
def test_diagonal_blocks_are_exactly_the_commuting_diagonals(kind):
    """The norm-weight scalings of a Qwen3-style layer: diag(d) commutes with every relative rotation iff d is
    constant on each block (sound: random block-constant d commute; complete: as many blocks as the dimension of
    the commuting diagonals, computed without the group's basis)."""
    rot = attention_layers(tiny_model(kind))[0].rotary
    pos = positions(6)
    rel = relative_rotations(rot, pos)
    blocks = diagonal_blocks(symmetry_group(tiny_model(kind)).sites[0].qk)
    assert int(blocks.max()) + 1 == _commuting_diagonals(rel)
    d = torch.diag(
        torch.exp(torch.randn(int(blocks.max()) + 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[
            blocks
        ]
    )
    assert float((d @ rel - rel @ d).abs().max()) <= 1e-12
    if kind.startswith("rope"):
        expected = pair_indices(8, kind.split("-")[1])
        assert all(blocks[i] == blocks[j] for i, j in expected.tolist())
        assert int(blocks.max()) + 1 == 4
    split = torch.ones(8, dtype=torch.float64)
    big = [b for b in range(int(blocks.max()) + 1) if (blocks == b).sum() > 1]
    if big:  # a scaling that splits a block fails to commute
        split[(blocks == big[0]).nonzero()[0, 0]] = 1.5
        assert float((torch.diag(split) @ rel - rel @ torch.diag(split)).abs().max()) > 1e-3


def test_diagonal_blocks_of_gl_and_a_permuted_string():
    assert diagonal_blocks(QKGroup(5)).tolist() == [0, 1, 2, 3, 4]  # no rotation: every diagonal scaling
    perm = torch.eye(8, dtype=torch.float64)[[3, 0, 6, 1, 7, 2, 5, 4]]  # STRING with P a permutation
    pairs = pair_indices(8, "interleaved")
    blocks = diagonal_blocks(HGroup(8, pairs, orth=perm))
    moved = perm.argmax(0)  # P e_i = e_{moved[i]}: the pairs land where P sends them
    assert all(blocks[moved[i]] == blocks[moved[j]] for i, j in pairs.tolist()) and int(blocks.max()) == 3
    with pytest.raises(ValueError, match="group"):
        diagonal_blocks(TrivialGroup(4))
    with pytest.raises(TypeError, match=r"^group: got .*str.* expected a QKGroup"):
        diagonal_blocks("rope")


@pytest.mark.parametrize("kind", ["none", "rope-half", "string", "espr", "partial-string"])
def test_grad_action_matches_autograd(kind):
    """grad L(g theta) is the linear image of grad L(theta) (the loss is invariant and the action linear)."""
    m = tiny_model(kind)
    x, pos, y = batch()
    G = symmetry_group(m)
    loss = nn.functional.cross_entropy(m(x, pos), y)
    grads = dict(zip([id(p) for p in G.parameters()], torch.autograd.grad(loss, G.parameters()), strict=True))
    g = G.random(torch.Generator().manual_seed(6))
    pred = G.grad_action(g, grads)
    G.apply(m, g)
    new = torch.autograd.grad(nn.functional.cross_entropy(m(x, pos), y), G.parameters())
    for p, t in zip(G.parameters(), new, strict=True):
        assert float((pred[id(p)] - t).abs().max()) <= 1e-10 * max(1.0, float(t.abs().max()))


@pytest.mark.parametrize(
    "kind", ["learned", "rope-interleaved", "rope-half", "string", "circulant-string", "espr", "partial-rope"]
)
def test_closed_form_norms_equal_brute_force(kind):
    m = tiny_model(kind)
    x, pos, y = batch()
    G = symmetry_group(m)

    def loss_fn():
        return nn.functional.cross_entropy(m(x, pos), y)

    m.zero_grad()
    loss_fn().backward()
    cands = G.sample(16, 0.65, torch.Generator().manual_seed(7), ffn=True)
    cf, bf = closed_form_norms(m, G, cands), brute_force_norms(m, G, cands, loss_fn)
    assert float(((cf - bf).abs() / bf).max()) <= 1e-8
    assert float(bf.std()) > 1e-4  # candidates differ: the check is not vacuous


def test_transformed_is_differentiable_gradcheck():
    """The differentiable action used by the Zhao baseline: gradcheck in float64 (tiny sizes)."""
    m = tiny_model("rope-interleaved", n_layers=1)
    G = symmetry_group(m, ffn=False)
    s = G.sites[0]
    wq = s.module.q_proj.weight

    def f(cq, cv):
        g = G.identity()
        g.qk[0] = s.qk.from_coeffs(cq)
        g.vo[0] = torch.eye(8, dtype=torch.float64) + cv.view(2, 8, 8)
        new = G.transformed(g)
        return new[id(wq)], new[id(s.module.k_proj.weight)], new[id(s.module.o_proj.weight)]

    cq = (0.1 * torch.randn(2, 8, dtype=torch.float64)).requires_grad_()
    cv = (0.1 * torch.randn(2, 64, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(f, (cq, cv))


class _Unknown(RotaryPositional):
    def __init__(self, head_dim, **_):
        super().__init__()
        self.head_dim, self.coord_dim = head_dim, 2

    def forward(self, q, k, positions, key_positions=None):
        return q, k


def test_bad_inputs():
    with pytest.raises(ValueError, match="model"):
        symmetry_group(nn.Sequential(nn.Linear(3, 3)))
    with pytest.raises(TypeError, match="model"):
        symmetry_group("not a model")
    m = tiny_model("rope-half")
    for a in attention_layers(m):
        a.rotary = _Unknown(8)
    with pytest.raises(ValueError, match="positional"):
        symmetry_group(m)
    G = symmetry_group(tiny_model("none"))
    gen = torch.Generator().manual_seed(0)
    for alpha in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            G.sample(4, alpha, gen)
    with pytest.raises(ValueError, match="samples"):
        G.sample(0, 0.5, gen)


def test_block_group_elements_match_its_basis_and_the_partial_part():
    """BlockGroup (a partial rotary part: the inner group on the rotated block, GL on the rest): from_coeffs is
    I + sum c_k B_k over its (lazily built) basis; its elements commute with every relative rotation of the part
    and have no entry between the blocks; a U mixing the blocks does not commute."""
    from symformer.positional import PartialRotary
    from symformer.teleport import BlockGroup, qk_groups

    part = PartialRotary(RoPE(head_dim=4, coord_dim=2).double(), 8)
    grp = qk_groups.qk_group_for(part, 8)
    assert isinstance(grp, BlockGroup) and grp.dimension == 4 + 16 and grp.basis().shape == (20, 8, 8)
    c = torch.randn(3, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = torch.eye(8, dtype=torch.float64) + torch.einsum("nk,kij->nij", c, grp.basis())
    assert float((grp.from_coeffs(c) - want).abs().max()) <= 1e-15
    rel = relative_rotations(part, positions(6))
    for u in (
        grp.random((4,), torch.Generator().manual_seed(1)),
        grp.near_identity((4,), 0.3, torch.Generator().manual_seed(2)),
    ):
        assert float(grp.contains(u, rel)) <= 1e-12 and float(u[:, :4, 4:].abs().max()) == 0.0
    mix = torch.eye(8, dtype=torch.float64)
    mix[0, 6] = 0.5
    assert float(grp.contains(mix, rel)) > 1e-3
    with pytest.raises(ValueError, match=r"^head_dim: got 3, expected an integer >= 4"):
        BlockGroup(3, grp.inner)
    with pytest.raises(TypeError, match=r"^inner: got 'RoPE', expected a QKGroup"):
        BlockGroup(8, RoPE(head_dim=4, coord_dim=2))


def test_partial_rotary_is_the_inner_part_on_its_block_and_refuses_bad_input():
    """R(r) = blockdiag(R_inner(r), I) in float64; forward rotates the first rotary_dim coordinates and passes
    the rest; ESPR (its own 1/sqrt(d_act) scale, T4.4) and a larger inner head are refused by name."""
    from symformer.positional import ESPR, PartialRotary

    part = PartialRotary(RoPE(head_dim=6, coord_dim=2).double(), 10)
    q, k = (torch.randn(2, 3, 6, 10, generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in (0, 1))
    pos = positions(6)
    qr, kr = part(q, k, pos)
    want = (part.matrix(pos) @ q[..., None])[..., 0]
    assert float((qr - want).abs().max()) <= 1e-14 and torch.equal(qr[..., 6:], q[..., 6:])
    assert float((part.matrix(pos)[..., :6, :6] - part.inner.matrix(pos)).abs().max()) == 0.0
    assert float((part.rotate(k, pos) - kr).abs().max()) == 0.0
    with pytest.raises(ValueError, match=r"^inner: got 'a part with its own logit scale \(ESPR"):
        PartialRotary(ESPR(head_dim=6, coord_dim=2), 10)
    with pytest.raises(ValueError, match=r"^inner\.head_dim: got 6, expected at most head_dim=4"):
        PartialRotary(RoPE(head_dim=6, coord_dim=2), 4)
    with pytest.raises(TypeError, match=r"^inner: got 'Linear'"):
        PartialRotary(nn.Linear(2, 2), 4)
    with pytest.raises(ValueError, match=r"^q: got 'head dim 6', expected head dim 10"):
        part(q[..., :6], k, pos)


def test_partial_is_a_registered_positional_for_symformer_models():
    """TransformerConfig(positional="partial", positional_kwargs={"rotary_dim": 4, "inner": "string", ...}) builds
    PartialRotary in every layer (options reach the inner part; default: RoPE on half the head), and its model's
    group is the block group; a rotary_dim above head_dim, a non-rotary inner part or a misspelt option is refused
    by name."""
    from symformer.models import TransformerConfig, ViTClassifier
    from symformer.positional import PartialRotary

    def build(**kw):
        cfg = TransformerConfig(
            d_model=16, n_heads=2, n_layers=1, positional="partial", positional_kwargs=kw, coord_dim=2, max_len=8
        )
        return ViTClassifier(cfg, 4, 3).to(torch.float64)

    model = build(rotary_dim=4, inner="string", init_scale=0.3)
    part = attention_layers(model)[0].rotary
    assert isinstance(part, PartialRotary) and (part.head_dim, part.rotary_dim, part.coord_dim) == (8, 4, 2)
    assert part.inner.skew_param.abs().max() > 0  # init_scale reached STRING
    x, pos, _ = batch()
    with torch.no_grad():
        ref = model(x, pos)
    group = symmetry_group(model)
    assert group.sites[0].qk.kind == "partial-string"
    group.apply(model, group.random(torch.Generator().manual_seed(0)))
    with torch.no_grad():
        assert rel_err(model(x, pos), ref) <= 1e-12
    default = attention_layers(build())[0].rotary
    assert (default.rotary_dim, type(default.inner).__name__) == (4, "RoPE")
    with pytest.raises(ValueError, match=r"^rotary_dim: got 10, expected an integer <= 8"):
        build(rotary_dim=10)
    with pytest.raises(ValueError, match=r"^inner: got 'sinusoidal'"):
        build(rotary_dim=4, inner="sinusoidal")
    with pytest.raises(TypeError, match=r"unknown option\(s\) init_scal\b"):
        build(rotary_dim=4, inner="string", init_scal=0.3)


def test_diagonal_group_is_the_invertible_diagonal_matrices():
    """DiagonalGroup (the V/O factor under an output gate): its fast from_coeffs equals the basis expansion, its
    random elements are diagonal with both signs, and its diagonal part is every coordinate alone."""
    from symformer.teleport import DiagonalGroup, QKGroup, diagonal_blocks

    grp, gen = DiagonalGroup(6), torch.Generator().manual_seed(0)
    c = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    assert grp.dimension == 6 and grp.kind == "diagonal"
    assert torch.equal(grp.from_coeffs(c), QKGroup.from_coeffs(grp, c))
    r = grp.random((200,), gen)
    d = torch.diagonal(r, dim1=-2, dim2=-1)
    assert torch.equal(r, torch.diag_embed(d)) and (d < 0).any() and (d > 0).any() and d.abs().min() > 0
    assert torch.equal(diagonal_blocks(grp), torch.arange(6))
