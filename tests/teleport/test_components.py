"""Each kind of symmetry on its own (issue 43 item 2), in float64: a group made of that one component (or a product
of a layer's components) moves the parameters but leaves the function unchanged, its gradient action equals autograd
at the moved point, the inverse undoes it, the closed-form candidate norms equal the norms of the transformed
gradients, and the actions are differentiable in the element (gradcheck: Zhao et al.'s ascent goes through them).
A wrong action (the weights' map applied to the gradient) is caught, so the checks can fail."""

from __future__ import annotations

import pytest
import torch
from tests.teleport._models import batch, tiny_model
from torch import nn
from torch.nn import functional as F

from symformer.positional import RoPE
from symformer.teleport import (
    AttentionSite,
    ExpertScaling,
    GroupElement,
    HeadPermutation,
    MLPScaling,
    NormScaling,
    QKFactor,
    SymmetryGroup,
    TrivialGroup,
    VOFactor,
    attention_parts,
    diagonal_blocks,
    symmetry_group,
)
from symformer.teleport.declare import fused_blocks, qkv_rows
from symformer.teleport.qk_groups import DiagonalGroup, qk_group_for

D, H, HK, DH, N = 16, 4, 2, 4, 6


def _rms(t: torch.Tensor) -> torch.Tensor:
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)


class Layer(nn.Module):
    """Grouped-query attention (4 query heads reading 2 key heads) with half-pairing RoPE; optionally q/k RMSNorms
    before the rotation ("shared": weights (Dh,) times (offset + w), Qwen3 / Gemma 3; "per_head": one norm over all
    heads, weights (H Dh,) and (H_kv Dh,), OLMo 2), per-head attention sinks (GPT-OSS), an elementwise output gate
    sigmoid(g) * (A V) (Qwen3-Next), or a fused qkv projection [W_Q; W_K; W_V] (Phi-3)."""

    def __init__(self, norm=None, offset=0.0, sinks=False, gate=False, fused=False):
        super().__init__()
        self.n_heads, self.head_dim, self.norm, self.offset = H, DH, norm, offset
        if fused:
            self.qkv = nn.Linear(D, (H + 2 * HK) * DH)
        else:
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(D, H * DH), nn.Linear(D, HK * DH), nn.Linear(D, HK * DH)
        self.o_proj = nn.Linear(H * DH, D)
        self.rotary = RoPE(DH, 1, pairing="half")
        shape = {"shared": ((DH,), (DH,)), "per_head": ((H * DH,), (HK * DH,))}.get(norm)
        if shape is not None:
            self.q_norm, self.k_norm = (nn.Parameter(1 + 0.3 * torch.randn(s)) for s in shape)
        self.sinks = nn.Parameter(torch.randn(H)) if sinks else None
        self.gate = nn.Linear(D, H * DH) if gate else None

    def _normed(self, t: torch.Tensor, w: torch.Tensor, heads: int) -> torch.Tensor:
        b = t.shape[0]
        if self.norm == "shared":
            return _rms(t.view(b, N, heads, DH)) * (self.offset + w)
        if self.norm == "per_head":
            return (_rms(t) * (self.offset + w)).view(b, N, heads, DH)
        return t.view(b, N, heads, DH)

    def forward(self, x):
        b = x.shape[0]
        if hasattr(self, "qkv"):
            q, k, v = self.qkv(x).split([H * DH, HK * DH, HK * DH], -1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k = self._normed(q, getattr(self, "q_norm", None), H), self._normed(k, getattr(self, "k_norm", None), HK)
        q, k = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(H // HK, 1)
        v = v.view(b, N, HK, DH).transpose(1, 2).repeat_interleave(H // HK, 1)
        q, k = self.rotary(q, k, torch.arange(N, dtype=x.dtype)[:, None])
        logits = q @ k.transpose(-1, -2) / DH**0.5
        if self.sinks is not None:  # one more logit per query head, dropped after the softmax
            logits = torch.cat((logits, self.sinks.view(1, H, 1, 1).expand(b, H, N, 1)), -1)
        y = torch.softmax(logits, -1)[..., :N] @ v
        y = y.transpose(1, 2).reshape(b, N, H * DH)
        if self.gate is not None:
            y = torch.sigmoid(self.gate(x)) * y
        return self.o_proj(y)


class View:
    """The attribute names AttentionSite reads, on the fused layer's row blocks."""

    def __init__(self, layer: Layer):
        self.n_heads, self.head_dim, self.rotary, self.o_proj = H, DH, layer.rotary, layer.o_proj
        self.fused, (self.q_proj, self.k_proj, self.v_proj) = fused_blocks(layer.qkv, qkv_rows("blocks", H, HK, DH))


class MoE(nn.Module):
    """Dense mixture of experts in HF's fused layout: gate_up (E, 2 I, d) = [gate; up], down (E, d, I); 2-D weights
    (experts=None) are one gated MLP (Phi-3's gate_up_proj)."""

    def __init__(self, experts: int | None = 3, inner: int = 5):
        super().__init__()
        lead = () if experts is None else (experts,)
        self.gate_up = nn.Parameter(0.4 * torch.randn(*lead, 2 * inner, D))
        self.down = nn.Parameter(0.4 * torch.randn(*lead, D, inner))
        self.router = nn.Linear(D, experts or 1)

    def forward(self, x):
        gate, up = (
            (x @ self.gate_up.transpose(-1, -2)[..., None, :, :]).chunk(2, -1)
            if self.gate_up.ndim == 3
            else (x @ self.gate_up.T).chunk(2, -1)
        )
        h = F.silu(gate) * up
        y = h @ self.down.transpose(-1, -2)[..., None, :, :] if self.down.ndim == 3 else h @ self.down.T
        if self.down.ndim == 2:
            return y
        return (torch.softmax(self.router(x), -1).movedim(-1, 0)[..., None] * y).sum(0)


def _x(seed=1, b=3):
    return torch.randn(b, N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _site(layer: Layer, trivial: bool = False) -> AttentionSite:
    module = View(layer) if hasattr(layer, "qkv") else layer
    return AttentionSite("attn", module, TrivialGroup(DH) if trivial else qk_group_for(layer.rotary, DH), HK)


def _norms(layer: Layer, site: AttentionSite) -> NormScaling:
    blocks = diagonal_blocks(qk_group_for(layer.rotary, DH))
    return NormScaling(site, layer.q_norm, layer.k_norm, blocks, layer.offset, per_head=layer.norm == "per_head")


def _cases() -> dict:
    """name -> () -> (model, forward input, group)."""

    def attn(parts, **kw):
        def make():
            torch.manual_seed(0)
            layer = Layer(**kw).double()
            return layer, _x(), SymmetryGroup(parts(layer))

        return make

    def ffn():
        m = tiny_model("none")
        x, pos, _ = batch()
        return (lambda inp: m(inp, pos)), x, SymmetryGroup([MLPScaling(f) for f in symmetry_group(m).ffns]), m

    def relu_mlp():
        torch.manual_seed(0)
        m = nn.ModuleDict(dict(up=nn.Linear(D, 6), down=nn.Linear(6, D))).double()
        return (lambda inp: m.down(torch.relu(m.up(inp)))), _x(), SymmetryGroup([MLPScaling(m)]), m

    def moe(experts):
        def make():
            torch.manual_seed(0)
            m = MoE(experts).double()
            return m, _x(), SymmetryGroup([ExpertScaling(m.gate_up, m.down)])

        return make

    return {
        "qk": attn(lambda m: [QKFactor(_site(m))]),
        "vo": attn(lambda m: [VOFactor(_site(m))]),
        "vo-diagonal-gate": attn(lambda m: [VOFactor(_site(m), DiagonalGroup(DH))], gate=True),
        "perm-sinks": attn(lambda m: [HeadPermutation(_site(m), carried=(m.sinks,))], sinks=True),
        "norm-shared-offset": attn(lambda m: [_norms(m, _site(m, True))], norm="shared", offset=1.0),
        "norm-per-head": attn(lambda m: [_norms(m, _site(m, True))], norm="per_head"),
        "fused-rows": attn(lambda m: [QKFactor(s := _site(m)), VOFactor(s), *s.module.fused], fused=True),
        "layer-product": attn(
            lambda m: attention_parts(s := _site(m, True), norms=_norms(m, s), carried=(m.sinks,)),
            norm="per_head",
            sinks=True,
        ),
        "mlp": ffn,
        "mlp-small": relu_mlp,
        "experts-3d": moe(3),
        "experts-2d": moe(None),
    }


def _setup(name):
    made = _cases()[name]()
    forward, x, group = made[:3]
    model = made[3] if len(made) > 3 else forward
    return model, (lambda: forward(x)), group


def _loss(out: torch.Tensor) -> torch.Tensor:
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    return (w * out).sum() + out.pow(2).mean()


@pytest.mark.parametrize("name", list(_cases()))
def test_component_is_a_symmetry_with_the_gradient_action_of_autograd(name):
    model, run, group = _setup(name)
    params = group.parameters()
    orig = [p.detach().clone() for p in params]
    y0 = run().detach()
    g0 = torch.autograd.grad(_loss(run()), params)
    grads = {id(p): t for p, t in zip(params, g0, strict=True)}
    g = group.random(torch.Generator().manual_seed(3), scale=0.4)
    g.perm = [torch.arange(c.site.n_heads).flip(0) for c in group.part("perm")]  # never the identity
    pred = group.grad_action(g, grads)
    wrong = group._act(g, dict(grads), grad=False) if name != "perm-sinks" else None  # weights' map on gradients
    group.apply(model, g)
    moved = max(float((p.detach() - o).abs().max()) for p, o in zip(params, orig, strict=True))
    assert moved > 1e-2
    y1 = run().detach()
    assert float((y1 - y0).abs().max() / y0.abs().max()) <= 1e-12
    g1 = torch.autograd.grad(_loss(run()), params)
    scale = max(float(t.abs().max()) for t in g1)
    err = max(float((pred.get(id(p), grads[id(p)]) - t).abs().max()) for p, t in zip(params, g1, strict=True))
    assert err <= 1e-10 * scale
    if wrong is not None:  # the test can fail: the weights' map is not the gradients'
        bad = max(float((wrong.get(id(p), grads[id(p)]) - t).abs().max()) for p, t in zip(params, g1, strict=True))
        assert bad > 1e-3 * scale
    group.apply(model, group.inverse(g))
    assert max(float((p.detach() - o).abs().max()) for p, o in zip(params, orig, strict=True)) <= 1e-12


@pytest.mark.parametrize("name", list(_cases()))
def test_closed_form_candidate_norms_are_the_norms_of_the_transformed_gradients(name):
    model, run, group = _setup(name)
    params = group.parameters()
    grads = dict(zip(map(id, params), torch.autograd.grad(_loss(run()), params), strict=True))
    cands = group.sample(3, 0.5, torch.Generator().manual_seed(4), ffn=True)
    if name == "perm-sinks":  # a permutation's share is its carried tensors'; q/k/v/o are their factors' (product)
        return
    closed = torch.as_tensor(group.candidate_sq_norms(grads, cands)).expand(3)  # a scalar where no factor varies
    for i in range(3):
        moved = group.grad_action(cands.pick(i), grads)
        direct = sum(float(moved.get(id(p), grads[id(p)]).pow(2).sum()) for p in params)
        assert abs(float(closed[i]) - direct) <= 1e-12 * direct
    if name != "fused-rows":  # candidates really differ (a permutation is never sampled)
        assert float(closed.max() - closed.min()) > 1e-6 * float(closed.max())


def _project(new: dict, group: SymmetryGroup) -> torch.Tensor:
    """Fixed random functionals of every new parameter (a few outputs keep gradcheck's analytic Jacobian cheap)."""
    gen = torch.Generator().manual_seed(9)
    outs = [
        (torch.randn(new[id(p)].shape, generator=gen, dtype=torch.float64) * new[id(p)]).sum((-1,))
        for p in group.parameters()
        if id(p) in new
    ]
    return torch.cat([o.flatten()[:4] for o in outs])


@pytest.mark.parametrize("name", ["qk", "vo-diagonal-gate", "norm-per-head", "fused-rows"])
def test_action_is_differentiable_in_the_coefficients(name):
    """gradcheck of theta' = from_coeffs(c) . theta for every component with Lie-algebra coordinates (Zhao's ascent),
    through the fused rows' split and merge."""
    _, _, group = _setup(name)
    comps = [c for c in group.components if c.coefficients() is not None]
    coefs = [0.1 * torch.randn(c.coefficients().shape, dtype=torch.float64) for c in comps]

    def f(*cs):
        parts = {k: [None] * len(group.part(k)) for k in group.kinds()}
        for c, k in zip(comps, cs, strict=True):
            parts[c.kind][group.part(c.kind).index(c)] = c.from_coeffs(k)
        return _project(group.transformed(GroupElement(**parts)), group)

    assert torch.autograd.gradcheck(f, tuple(c.requires_grad_() for c in coefs))


@pytest.mark.parametrize("name", ["mlp-small", "experts-3d"])
def test_scalings_are_differentiable(name):
    _, _, group = _setup(name)
    kind = group.kinds()[0]
    s = [(1 + 0.2 * torch.rand(*x.shape, dtype=torch.float64)).requires_grad_() for x in group.identity().parts[kind]]

    def f(*xs):
        return _project(group.transformed(GroupElement(**{kind: list(xs)})), group)

    assert torch.autograd.gradcheck(f, tuple(s))


def test_an_element_must_match_the_group():
    _, _, group = _setup("qk")
    g = group.identity()
    g.qk = g.qk + g.qk
    with pytest.raises(ValueError, match=r"element.qk: got '2 factors', expected 1 \(one per qk component\)"):
        group.apply(nn.Module(), g)
    with pytest.raises(TypeError, match="components\\[0\\]: got 'str'"):
        SymmetryGroup(["qk"])
