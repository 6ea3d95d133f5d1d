"""Grouped-query attention in teleport.groups (issue 18 item 1): U shared by the query heads of one key head.

A plain-torch GQA layer (4 query heads reading 2 key/value heads, HF's repeat_kv order) with RoPE: a generic
group element leaves its output unchanged (float64), the gradient action matches autograd at the moved point,
and the closed-form candidate norms match the brute force ones. Without the sharing (kv_heads = n_heads on
the same weights) the element is not a symmetry, so the test can fail."""

from __future__ import annotations

import torch
from torch import nn

from symformer.positional import RoPE
from symformer.teleport import AttentionSite, SymmetryGroup, attention_parts
from symformer.teleport.qk_groups import qk_group_for

D, H, HK, DH, N = 16, 4, 2, 4, 6


class GQALayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_heads, self.head_dim = H, DH
        self.q_proj, self.o_proj = nn.Linear(D, H * DH), nn.Linear(H * DH, D)
        self.k_proj, self.v_proj = nn.Linear(D, HK * DH), nn.Linear(D, HK * DH)
        self.rotary = RoPE(DH, 1, pairing="half")

    def forward(self, x):
        b = x.shape[0]
        q = self.q_proj(x).view(b, N, H, DH).transpose(1, 2)
        k = self.k_proj(x).view(b, N, HK, DH).transpose(1, 2).repeat_interleave(H // HK, dim=1)
        v = self.v_proj(x).view(b, N, HK, DH).transpose(1, 2).repeat_interleave(H // HK, dim=1)
        pos = torch.arange(N, dtype=x.dtype)[:, None]
        q, k = self.rotary(q, k, pos)
        y = torch.softmax(q @ k.transpose(-1, -2) / DH**0.5, -1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, N, H * DH))


def _setup(kv_heads=HK):
    torch.manual_seed(0)
    layer = GQALayer().double()
    group = SymmetryGroup(attention_parts(AttentionSite("attn", layer, qk_group_for(layer.rotary, DH), kv_heads)))
    x = torch.randn(3, N, D, dtype=torch.float64)
    return layer, group, x


def test_gqa_element_is_a_symmetry_and_grad_action_matches_autograd():
    layer, group, x = _setup()
    g = group.random(torch.Generator().manual_seed(1))
    assert g.qk[0].shape == (HK, DH, DH)
    target = torch.randn(3, N, D, dtype=torch.float64)

    def loss():
        return ((layer(x) - target) ** 2).mean()

    params = group.parameters()
    grads = dict(zip(map(id, params), torch.autograd.grad(loss(), params), strict=True))
    with torch.no_grad():
        before = layer(x)
        predicted = group.grad_action(g, grads)
        group.apply(layer, g)
        assert float((layer(x) - before).abs().max()) <= 1e-12 * float(before.abs().max())
    fresh = torch.autograd.grad(loss(), params)
    for p, gr in zip(params, fresh, strict=True):
        assert float((predicted[id(p)] - gr).abs().max()) <= 1e-10 * max(float(gr.abs().max()), 1.0)


def test_gqa_closed_form_norms_match_brute_force():
    layer, group, x = _setup()
    target = torch.randn(3, N, D, dtype=torch.float64)

    def loss():
        return ((layer(x) - target) ** 2).mean()

    params = group.parameters()
    grads = dict(zip(map(id, params), torch.autograd.grad(loss(), params), strict=True))
    cands = group.sample(4, 0.5, torch.Generator().manual_seed(2))
    closed = group.candidate_sq_norms(grads, cands)
    saved = [p.detach().clone() for p in params]
    for i in range(4):
        with torch.no_grad():
            group.apply(layer, group.pick(cands, i))
        brute = sum(float(t.pow(2).sum()) for t in torch.autograd.grad(loss(), params))
        assert abs(float(closed[i]) - brute) <= 1e-9 * brute
        with torch.no_grad():
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)


def test_without_sharing_the_element_breaks_the_layer():
    """Per-query-head factors on a GQA layer: query heads 0 and 1 read key head 0 with different U (the key
    side gets U of query head 0 only), which changes the logits of query head 1."""
    layer, group, x = _setup()
    u = group.sites[0].qk.random((H,), torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = layer(x)
        w, b = layer.q_proj.weight.view(H, DH, D), layer.q_proj.bias.view(H, DH)
        layer.q_proj.weight.copy_((u @ w).reshape(H * DH, D))
        layer.q_proj.bias.copy_((u @ b[..., None])[..., 0].reshape(-1))
        uk = torch.linalg.inv(u[0::2]).transpose(-1, -2)  # key head g gets the factor of query head 2g
        layer.k_proj.weight.copy_((uk @ layer.k_proj.weight.view(HK, DH, D)).reshape(HK * DH, D))
        layer.k_proj.bias.copy_((uk @ layer.k_proj.bias.view(HK, DH)[..., None])[..., 0].reshape(-1))
        assert float((layer(x) - before).abs().max()) > 1e-3
