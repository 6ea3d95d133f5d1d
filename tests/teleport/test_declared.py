"""Teleporting a user's own model through declared attention layers (teleport.AttentionLayer, issue 42 item 2): a
hand-written GPT with a fused qkv (both row layouts), separate projections with grouped-query attention, and symformer
RoPE applied in the user's forward. The loss is unchanged to 1e-12 relative in float64, the gradient action matches
autograd, the closed-form candidate norms match brute force; wrong declarations change the loss; bad ones raise."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from symformer.positional import RoPE
from symformer.teleport import (
    AttentionLayer,
    PlainLoopTeleport,
    TeleportCallback,
    brute_force_norms,
    closed_form_norms,
    symmetry_group,
)

D, H, VOCAB = 32, 4, 64


class Attn(nn.Module):
    """Causal self-attention as users write it: fused qkv ("blocks": split; "heads": view(B, N, H, 3 Dh)) or q/k/v,
    grouped-query attention by repeat_interleave, optional symformer RoPE on q and k."""

    def __init__(self, fused: str | None, kv: int, rope: bool):
        super().__init__()
        self.fused, self.kv, self.dh = fused, kv, D // H
        if fused:
            self.qkv = nn.Linear(D, (H + 2 * kv) * self.dh)
        else:
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, kv * self.dh), nn.Linear(D, kv * self.dh)
        self.proj = nn.Linear(D, D)
        self.rope = RoPE(self.dh) if rope else None

    def forward(self, x):
        b, n, _ = x.shape
        if self.fused == "heads":
            q, k, v = self.qkv(x).view(b, n, H, 3, self.dh).unbind(3)
        elif self.fused == "blocks":
            q, k, v = self.qkv(x).split([D, self.kv * self.dh, self.kv * self.dh], -1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.reshape(b, n, H, self.dh).transpose(1, 2)
        k, v = (t.reshape(b, n, self.kv, self.dh).transpose(1, 2).repeat_interleave(H // self.kv, 1) for t in (k, v))
        if self.rope is not None:
            q, k = self.rope(q, k, torch.arange(n))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, n, D))


class GPT(nn.Module):
    def __init__(self, fused="blocks", kv=H, rope=False, layers=2):
        super().__init__()
        self.emb, self.pos = nn.Embedding(VOCAB, D), nn.Parameter(0.1 * torch.randn(16, D))
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln1=nn.LayerNorm(D),
                    attn=Attn(fused, kv, rope),
                    ln2=nn.LayerNorm(D),
                    mlp=nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)),
                )
            )
            for _ in range(layers)
        )
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.emb(ids) + (0 if self.blocks[0].attn.rope is not None else self.pos[: ids.shape[1]])
        for blk in self.blocks:
            x = x + blk.attn(blk.ln1(x))
            x = x + blk.mlp(blk.ln2(x))
        return self.head(x)


def loss_of(model, ids):
    return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())


def declare(model, layout="blocks", kv=None):
    """The declarations of GPT's layers: fused qkv + o, or q, k, v, o; kv heads; the RoPE the forward applies."""
    out = []
    for blk in model.blocks:
        a = blk.attn
        proj = dict(qkv=a.qkv, layout=layout) if a.fused else dict(q=a.q, k=a.k, v=a.v)
        out.append(AttentionLayer(n_heads=H, o=a.proj, kv_heads=kv, rotary=a.rope, **proj))
    return out


CASES = {
    "fused-blocks": (dict(fused="blocks"), dict()),
    "fused-heads": (dict(fused="heads"), dict(layout="heads")),
    "gqa": (dict(fused=None, kv=2), dict(kv=2)),
    "fused-gqa-rope": (dict(fused="blocks", kv=2, rope=True), dict(kv=2)),
    "rope": (dict(fused=None, rope=True), dict()),
}


def build(case, seed=0):
    torch.manual_seed(seed)
    mk, dk = CASES[case]
    model = GPT(**mk).double()
    return model, declare(model, **dk)


def ids(seed=1, b=3, n=12):
    return torch.randint(0, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def test_todays_entry_point_refuses_an_undeclared_user_model():
    with pytest.raises(ValueError, match=r"attention=\[teleport\.AttentionLayer\(\.\.\.\)\] declaring its own"):
        symmetry_group(GPT())


@pytest.mark.parametrize("case", list(CASES))
def test_declared_model_loss_is_invariant_in_float64(case):
    model, layers = build(case)
    group, x = symmetry_group(model, attention=layers), ids()
    assert [s.name for s in group.sites] == ["blocks.0.attn", "blocks.1.attn"]
    assert group.sites[0].n_heads == (2 if "gqa" in case else H)
    assert {s.qk.kind for s in group.sites} == ({"h"} if "rope" in case else {"gl"})
    with torch.no_grad():
        ref, logits = loss_of(model, x), model(x)
    before = [p.detach().clone() for p in group.parameters()]
    group.apply(model, group.random(torch.Generator().manual_seed(2)))
    assert min((p - b).abs().max().item() for p, b in zip(group.parameters(), before, strict=True)) > 1e-3
    with torch.no_grad():
        assert abs(loss_of(model, x).item() - ref.item()) <= 1e-12 * abs(ref.item())
        assert ((model(x) - logits).abs().max() / logits.abs().max()).item() <= 1e-12


@pytest.mark.parametrize("case", list(CASES))
def test_declared_gradient_action_and_closed_form_norms(case):
    """grad L(g theta) from autograd equals grad_action(g, grad L(theta)) (heads permuted); the inverse undoes g; the
    closed-form candidate norms equal brute force."""
    model, layers = build(case)
    group, x = symmetry_group(model, attention=layers), ids()
    params = group.parameters()
    g0 = torch.autograd.grad(loss_of(model, x), params)
    g = group.random(torch.Generator().manual_seed(3), scale=0.2)
    g.perm = [torch.arange(s.n_heads).flip(0) for s in group.sites]
    pred = group.grad_action(g, {id(p): gr for p, gr in zip(params, g0, strict=True)})
    group.apply(model, g)
    g1 = torch.autograd.grad(loss_of(model, x), params)
    floor = 1e-6 * max(gr.abs().max().item() for gr in g1)  # no-RoPE key biases: softmax ignores them, gradient ~0
    assert (
        max(
            ((pred[id(p)] - gr).abs().max() / max(gr.abs().max().item(), floor)).item()
            for p, gr in zip(params, g1, strict=True)
        )
        <= 1e-9
    )
    model.zero_grad()
    loss_of(model, x).backward()
    cands = group.sample(4, 0.3, torch.Generator().manual_seed(4))
    brute = brute_force_norms(model, group, cands, lambda: loss_of(model, x))
    assert torch.allclose(closed_form_norms(model, group, cands), brute, rtol=1e-9, atol=0)


def test_wrong_declarations_change_the_loss():
    """Negative controls: the 'heads' layout declared for a 'blocks' qkv, and no rotary declared for a RoPE layer
    (GL(d_h) instead of H(d_h)), give elements that move the loss."""
    for case, wrong in (("fused-blocks", dict(layout="heads")), ("rope", dict(rotary=None))):
        model, layers = build(case)
        for d in layers:
            for k, v in wrong.items():
                setattr(d, k, v)
        group, x = symmetry_group(model, attention=layers), ids()
        with torch.no_grad():
            ref = loss_of(model, x).item()
            group.apply(model, group.random(torch.Generator().manual_seed(2)))
            assert abs(loss_of(model, x).item() - ref) > 1e-4


def test_plain_loop_teleport_on_a_declared_model():
    """PlainLoopTeleport in a float64 loop: teleports at start_step and every `every` steps, each applied, the loss at
    theta and at g theta equal to 1e-12; the deprecated step= warns and says what it means."""
    model, layers = build("fused-gqa-rope")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    tele = PlainLoopTeleport(
        model,
        opt,
        loss_of,
        total_steps=8,
        start_step=1,
        every=4,
        steps=2,
        attention=layers,
        samples=8,
        alpha=0.3,
        state_policy="transform",
        max_cumulative_ratio=None,
    )
    for i in range(8):
        batch = ids(seed=10 + i)
        loss = loss_of(model, batch)
        loss.backward()
        tele.after_backward(i, batch, loss)
        if i in (1, 5):  # teleported: the loss kept, .grad the gradient at g theta (the step the optimizer takes)
            params = [p for p in model.parameters() if p.grad is not None]  # (the RoPE model has no self.pos)
            fresh = torch.autograd.grad(loss_of(model, batch), params)
            assert abs(loss_of(model, batch).item() - loss.item()) <= 1e-12 * loss.item()
            scale = max(g.abs().max().item() for g in fresh)
            assert max((p.grad - g).abs().max().item() for p, g in zip(params, fresh, strict=True)) <= 1e-10 * scale
        opt.step()
        opt.zero_grad()
    assert [e["step"] for e in tele.log] == [1, 2, 5, 6]
    assert all(e["applied"] for e in tele.log) and not any(e["skipped"] for e in tele.log)
    with pytest.warns(DeprecationWarning, match=r"step=3 is deprecated: it means start_step=3.*not a period"):
        old = PlainLoopTeleport(model, opt, loss_of, total_steps=8, step=3, steps=2, attention=layers)
    assert old.teleporter.schedule.step == 3 and old.teleporter.schedule.every is None
    with pytest.warns(DeprecationWarning, match="start_step=2"):
        TeleportCallback(model, step=2, attention=layers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PlainLoopTeleport(model, opt, loss_of, total_steps=8, start_step=3, steps=2, attention=layers)


def test_schedule_options_are_checked():
    from symformer.teleport import TeleportSchedule

    s = TeleportSchedule(epochs=(), step=3, consecutive=2, every=5)
    assert [t for t in range(16) if s.contains(t, 4)] == [3, 4, 8, 9, 13, 14]
    model, layers = build("fused-blocks")
    assert (
        TeleportCallback(model, every=3, steps=1, attention=layers).teleporter.schedule.step == 0
    )  # every= alone: from 0
    with pytest.raises(ValueError, match="^every: got 1, expected an integer >= 2"):
        PlainLoopTeleport(model, None, loss_of, total_steps=8, every=1, steps=2, attention=layers)
    with pytest.raises(ValueError, match="^step: got 3, expected no step= next to start_step=1"):
        PlainLoopTeleport(model, None, loss_of, total_steps=8, start_step=1, step=3, attention=layers)
    with pytest.raises(ValueError, match="^start_step: got 9"):
        PlainLoopTeleport(model, None, loss_of, total_steps=8, start_step=7, steps=2, attention=layers)


def test_plain_loop_teleport_takes_a_symformer_model():
    from tests.teleport._models import batch, tiny_model

    m = tiny_model("rope-half")
    x, pos, y = batch()
    tele = PlainLoopTeleport(
        m,
        None,
        lambda mdl, b: F.cross_entropy(mdl(b[0], b[1]), b[2]),
        total_steps=3,
        start_step=0,
        steps=2,
        samples=4,
        alpha=0.3,
    )
    assert len(tele.group.sites) == 2 and tele.group.sites[0].qk.kind == "h"


def _bad(model, **kw):
    a = model.blocks[0].attn
    base = dict(n_heads=H, qkv=a.qkv, o=a.proj)
    base.update(kw)
    return symmetry_group(model, attention=[AttentionLayer(**base)])


def test_bad_declarations_raise_clear_errors():
    model = GPT().double()
    a, b = model.blocks[0].attn, model.blocks[1].attn
    wrong = GPT(fused="blocks", kv=2).double()  # qkv holds 2 kv heads, declared without kv_heads
    with pytest.raises(
        ValueError,
        match=r"^attention layer blocks\.0\.attn: got \"weights \{'qkv': \(64, 32\), "
        r"'o': \(32, 32\)\}\", expected \{'qkv': 96\} output features for "
        r"n_heads=4, kv_heads=4, head_dim=8",
    ):
        _bad(wrong, qkv=wrong.blocks[0].attn.qkv, o=wrong.blocks[0].attn.proj)
    with pytest.raises(
        ValueError,
        match=r"^blocks\.0\.attn: o: got 'in_features 32', expected a multiple of "
        r"n_heads=3",
    ):
        _bad(model, n_heads=3)
    with pytest.raises(ValueError, match=r"^blocks\.0\.attn: kv_heads: got 3, expected a divisor of n_heads=4"):
        _bad(model, kv_heads=3)
    with pytest.raises(
        ValueError,
        match=r"^blocks\.0\.attn: layout: got 'heads', expected 'blocks' under "
        r"grouped-query",
    ):
        _bad(model, kv_heads=2, layout="heads")
    with pytest.raises(ValueError, match=r"^blocks\.0\.attn: layout: got 'rows', expected one of blocks, heads"):
        _bad(model, layout="rows")
    with pytest.raises(
        ValueError,
        match=r"^attention\[0\]\.qkv: got 'blocks\.0\.attn\.qkvv', expected the dotted "
        r"name of an nn.Linear of the model",
    ):
        _bad(model, qkv="blocks.0.attn.qkvv")
    with pytest.raises(
        ValueError,
        match=r"^attention\[0\]\.o: got 'Linear\(32, 32\)', expected a submodule of the "
        r"model",
    ):
        _bad(model, o=nn.Linear(32, 32))
    with pytest.raises(TypeError, match=r"^attention\[0\]\.o: got 'LayerNorm', expected an nn.Linear"):
        _bad(model, o=model.blocks[0].ln1)
    with pytest.raises(ValueError, match=r"^attention\[0\]: got \['o', 'q', 'qkv'\], expected either qkv"):
        _bad(model, q=a.proj)
    with pytest.raises(ValueError, match=r"^attention\[0\]\.o: got None, expected the output projection"):
        _bad(model, o=None)
    with pytest.raises(
        ValueError,
        match=r"^attention\[1\]\.qkv: got 'blocks\.0\.attn\.qkv', expected a projection "
        r"declared once \(it is already in layer blocks\.0\.attn\)",
    ):
        symmetry_group(
            model, attention=[AttentionLayer(H, o=a.proj, qkv=a.qkv), AttentionLayer(H, o=b.proj, qkv=a.qkv)]
        )
    with pytest.raises(TypeError, match=r"^attention: got 'AttentionLayer', expected a list"):
        symmetry_group(model, attention=AttentionLayer(H, o=a.proj, qkv=a.qkv))
    with pytest.raises(ValueError, match=r"^blocks\.0\.attn: rotary: got 'RoPE\(head_dim=16\)'"):
        _bad(model, rotary=RoPE(16))
    with pytest.raises(
        TypeError,
        match=r"^blocks\.0\.attn: rotary: got 'Linear', expected a symformer "
        r"RotaryPositional",
    ):
        _bad(model, rotary=nn.Linear(8, 8))
    with pytest.raises(TypeError, match="positional"):
        AttentionLayer(H, a.proj, a.qkv)  # projections by keyword only: their order is not guessed
    layers = [AttentionLayer(H, o="blocks.1.attn.proj", qkv="blocks.1.attn.qkv")]
    assert len(symmetry_group(model, attention=layers).sites) == 1  # names work as well as modules


@pytest.mark.parametrize("family,layout", [("phi3", "blocks"), ("llama", None)])
def test_declaring_an_hf_layer_gives_the_hf_familys_sites(family, layout):
    """An HF model's layers declared by hand (fused qkv_proj in Phi-3's block layout; Llama's q/k/v/o, GQA, the native
    RoPE as symformer RoPE in the half pairing) give the sites integrations.hf builds: the same group kinds and head
    counts, and one element acting identically (bit for bit) through either group; the loss is kept."""
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    from tests.integrations._hf_models import float64_reference, lm_loss, tiny
    from tests.integrations._hf_models import ids as hf_ids

    from symformer.integrations import hf

    model = float64_reference(tiny(family, torch.float64, kv_heads=2))
    layers = []
    for layer in model.model.layers:
        a = layer.self_attn
        proj = dict(qkv=a.qkv_proj, layout=layout) if layout else dict(q=a.q_proj, k=a.k_proj, v=a.v_proj)
        layers.append(AttentionLayer(4, o=a.o_proj, kv_heads=2, rotary=RoPE(8, pairing="half").double(), **proj))
    ours, theirs = symmetry_group(model, attention=layers), hf.symmetry_group(model)
    assert [(s.name, s.qk.kind, s.n_heads, s.query_heads) for s in ours.sites] == [
        (s.name, s.qk.kind, s.n_heads, s.query_heads) for s in theirs.sites
    ]
    g = theirs.random(torch.Generator().manual_seed(1))
    x = hf_ids()
    with torch.no_grad():
        ref = lm_loss(model, x).item()
        a, b = ours.transformed(g), theirs.transformed(g)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        ours.apply(model, g)
        assert abs(lm_loss(model, x).item() - ref) <= 1e-12 * ref
