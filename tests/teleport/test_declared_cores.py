"""Declared attention layers whose forward runs a symformer core that only approximates softmax (FAVOR+, PLASH):
symmetry_group refuses them up front with a ValueError naming `attention[i]` (as it refuses symformer's own layers
running them), so neither `.apply` nor PlainLoopTeleport silently changes the loss or warns on every candidate; an
exact core (SoftmaxAttention) in the same place still teleports exactly. A group that is not a symmetry of the loss
(here a wrong layout) warns once per teleport step, not once per candidate (issue 58 item 3)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from symformer.attention import FavorAttention, PlashAttention, SoftmaxAttention
from symformer.teleport import AttentionLayer, PlainLoopTeleport, symmetry_group

D, H, VOCAB = 16, 2, 32
DH = D // H


class CoreAttn(nn.Module):
    """A user's causal attention with a fused qkv and a symformer core in its forward."""

    def __init__(self, core: nn.Module):
        super().__init__()
        self.qkv, self.proj, self.core = nn.Linear(D, 3 * D), nn.Linear(D, D), core

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, H, DH).transpose(1, 2) for t in self.qkv(x).split(D, -1))
        return self.proj(self.core(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, D))


class LM(nn.Module):
    def __init__(self, core_fn, layers=2):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.attn = nn.ModuleList(CoreAttn(core_fn()) for _ in range(layers))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.emb(ids)
        for a in self.attn:
            x = x + a(x)
        return self.head(x)


CORES = {
    "favor": lambda: FavorAttention(DH, n_features=16, seed=0),
    "plash": lambda: PlashAttention(DH, H, D, M=4, D_k=8, seed=0, causal_block=4),
    "softmax": SoftmaxAttention,
}


def build(kind: str):
    torch.manual_seed(0)
    model = LM(CORES[kind]).double()
    return model, [AttentionLayer(H, qkv=a.qkv, o=a.proj) for a in model.attn]


def ids(seed=1, b=2, n=12):
    return torch.randint(0, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def loss_of(model, x):
    return F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())


@pytest.mark.parametrize("kind,cls", [("favor", "FavorAttention"), ("plash", "PlashAttention")])
def test_declared_layers_running_favor_or_plash_are_refused(kind, cls):
    model, layers = build(kind)
    msg = rf"^attention\[0\]: got 'a layer running {cls} \(attn\.0\.core\)', expected a declared layer computing an"
    with pytest.raises(ValueError, match=msg):
        symmetry_group(model, attention=layers)
    with pytest.raises(ValueError, match=rf"^attention\[0\]: got 'a layer running {cls} \(attn\.1\.core\)'"):
        symmetry_group(model, attention=layers[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any step: no warning per candidate
        with pytest.raises(ValueError, match=msg):
            PlainLoopTeleport(model, None, loss_of, total_steps=4, start_step=0, steps=2, attention=layers)


def test_a_declared_layer_running_an_exact_core_teleports_exactly():
    model, layers = build("softmax")
    group, x = symmetry_group(model, attention=layers), ids()
    with torch.no_grad():
        ref = loss_of(model, x).item()
        group.apply(model, group.random(torch.Generator().manual_seed(2)))
        assert abs(loss_of(model, x).item() - ref) <= 1e-12 * ref


def test_a_group_that_moves_the_loss_warns_once_per_step():
    """The 'heads' layout declared for a 'blocks' qkv: every candidate moves the loss and is undone; the step warns
    once, saying how many it skipped and that nothing was teleported."""
    model, _ = build("softmax")
    layers = [AttentionLayer(H, qkv=a.qkv, o=a.proj, layout="heads") for a in model.attn]
    tele = PlainLoopTeleport(
        model, None, loss_of, total_steps=2, start_step=0, steps=1, attention=layers, samples=16, alpha=0.5
    )
    x = ids()
    before = [p.detach().clone() for p in model.parameters()]
    loss = loss_of(model, x)
    loss.backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = tele.after_backward(0, x, loss)
    skipped = [w for w in caught if "teleport: skipped" in str(w.message)]
    assert rec is not None and not rec["applied"]
    assert rec["skipped"] >= 2, rec
    assert len(skipped) == 1 and f"skipped {rec['skipped']} element(s)" in str(skipped[0].message)
    assert "nothing teleported" in str(skipped[0].message)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_teleportation_page_says_which_declared_layers_are_exact():
    """Item 11: docs/systems/teleportation.md has the table of declared layers, and the refusal it quotes is the one
    symmetry_group raises."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "systems" / "teleportation.md").read_text()
    assert "Which declared layers are exact" in page
    for core in ("FavorAttention", "PlashAttention", "SoftmaxAttention", "F.scaled_dot_product_attention"):
        assert core in page, core
    quoted = page.split("ValueError: ", 1)[1].split("(...)", 1)[0]  # "attention[i]: got 'a layer running ..."
    model, layers = build("favor")
    with pytest.raises(ValueError) as err:
        symmetry_group(model, attention=layers)
    assert str(err.value).startswith(quoted.replace("[i]", "[0]")), (quoted, str(err.value))
