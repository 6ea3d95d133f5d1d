"""Teleportation on HF Llama-family models: the GQA symmetry group (U shared by the query heads of one key head),
float64 invariance, the closed-form gradient action against autograd and brute force, and a plain-loop callback."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import (  # noqa: E402
    check_gradient_action,
    float64_reference,
    ids,
    lm_loss,
    teleport_in_plain_loop,
    tiny,
)

from symformer.experiments.hf import QK_NORM_FAMILIES  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf import teleport as hf_teleport  # noqa: E402
from symformer.integrations.hf._common import attention_modules, fused_qkv, out_proj, qk_norms  # noqa: E402
from symformer.teleport import GroupElement, symmetry_group  # noqa: E402

CASES = [
    ("llama", None, {}),
    ("llama", "rope", {}),
    ("mistral", "string", {"init_scale": 0.3}),
    ("qwen2", "espr", {"init_scale": 0.05}),
    ("llama", "circulant_string", {}),
    ("gemma", None, {}),
    ("gemma", "string", {"init_scale": 0.3}),
    ("mixtral", None, {}),
    ("gemma2", "espr", {"init_scale": 0.05}),
    ("phi3", None, {}),
    ("phi3", "string", {"init_scale": 0.3}),
    ("gpt_neox", None, {}),
    ("gpt_neox", "string", {"init_scale": 0.3}),
    ("olmo", None, {}),
    ("granite", None, {}),
    ("smollm3", "string", {"init_scale": 0.3}),
    ("seed_oss", None, {}),
    ("stablelm", "string", {"init_scale": 0.3}),
    ("starcoder2", None, {}),
    ("phi", "string", {"init_scale": 0.3}),
    ("arcee", None, {}),
    ("qwen2_moe", "espr", {"init_scale": 0.05}),
    ("phimoe", None, {}),
    ("granitemoe", None, {}),
    ("glm", "string", {"init_scale": 0.3}),
    ("glm4", None, {}),
    ("cohere", None, {}),
    ("cohere2", "string", {"init_scale": 0.3}),
    ("cohere2_moe", None, {}),
    ("ernie4_5", "string", {"init_scale": 0.3}),
    ("ernie4_5_moe", None, {}),
    ("gpt_oss", None, {}),
    ("gpt_oss", "string", {"init_scale": 0.3}),
    ("helium", "string", {"init_scale": 0.3}),
    ("ministral", None, {}),
    ("vaultgemma", "espr", {"init_scale": 0.05}),
    ("nemotron", "string", {"init_scale": 0.3}),
    ("hyperclovax", None, {}),
    ("jais2", None, {}),
    ("solar_open", None, {}),
    ("glm4_moe", "string", {"init_scale": 0.3}),
    ("granitemoeshared", None, {}),
    ("ministral3", "string", {"init_scale": 0.3}),
    ("cwm", "string", {"init_scale": 0.3}),
]


def _model(family, positional, opts, kv_heads=2):
    model = tiny(family, torch.float64, kv_heads=kv_heads, attention_bias=family in ("llama", "deepseek_v3"))
    model = model if positional is None else hf.patch_positional(model, positional, **opts)
    return float64_reference(model)  # float64 norms and rotary table: invariance is then read at float64 rounding


QWEN3 = [
    ("qwen3", None, {}),
    ("qwen3", "string", {"init_scale": 0.3}),
    ("qwen3", "espr", {"init_scale": 0.05}),
    ("qwen3_moe", None, {}),
    ("gemma3_text", None, {}),
    ("gemma3_text", "string", {"init_scale": 0.3}),
    ("olmo2", None, {}),
    ("olmo2", "string", {"init_scale": 0.3}),
    ("olmo3", "espr", {"init_scale": 0.05}),
    ("olmoe", None, {}),
    ("exaone4", None, {}),
    ("exaone4", "string", {"init_scale": 0.3}),
    ("apertus", None, {}),
    ("flex_olmo", None, {}),
    ("minimax_m2", "string", {"init_scale": 0.3}),
    ("exaone_moe", None, {}),
    ("exaone_moe", "string", {"init_scale": 0.3}),
    ("dots1", None, {}),
    ("apertus1p5_text", "string", {"init_scale": 0.3}),
    ("lfm2", None, {}),
    ("lfm2", "string", {"init_scale": 0.3}),
]


def _qwen3(positional=None, opts=None, seed=5, family="qwen3"):
    """Qwen3 (or another family with q/k norms: QK_NORM_FAMILIES) with generic q/k norm weights (HF starts them at
    1, where any orthogonal pair rotation would pass)."""
    model = _model(family, positional, opts or {})
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for attn in attention_modules(model):  # LFM2: the attention layers only
            for norm in qk_norms(attn):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=gen, dtype=torch.float64))
    return model


@pytest.mark.parametrize("family,positional,opts", CASES)
def test_output_invariant_under_random_element(family, positional, opts):
    model, x = _model(family, positional, opts), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    g = group.random(torch.Generator().manual_seed(1))
    kv = 4 if family == "gpt_neox" else 2  # GPT-NeoX has no GQA
    assert g.qk[0].shape == (kv, 8, 8)  # one factor per KEY head: shared by the query heads reading it
    group.apply(model, g)
    with torch.no_grad():
        out = model(x).logits
    assert ((out - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_invariance_can_fail():
    """Negative controls: a GL(d_h) factor on a RoPE model, or different U for two query heads of one group."""
    model, x = _model("llama", "rope", {}), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model)
    gen = torch.Generator().manual_seed(2)
    site = group.sites[0]
    eye = torch.eye(8, dtype=torch.float64)
    g = group.identity()
    g.qk[0] = eye + 0.3 * torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)  # not in H(d_h)
    saved = [p.detach().clone() for p in group.parameters()]
    group.apply(model, g)
    with torch.no_grad():
        assert (model(x).logits - ref).abs().max() > 1e-4
        for p, s in zip(group.parameters(), saved):
            p.copy_(s)
        u = site.qk.random((1,), gen)[0]
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[:8] = u @ attn.q_proj.weight[:8]
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
        assert (model(x).logits - ref).abs().max() > 1e-4  # query head 1 also reads key head 0 but kept I


def test_teleport_symmetry_group_dispatches_and_refuses_approximate_cores():
    model = _model("qwen2", "string", {"init_scale": 0.2})
    hf_teleport.register_hf_groups()  # explicit: symformer.teleport's entry point then builds the HF groups
    group = symmetry_group(model)
    assert type(group).__name__ == "GQASymmetryGroup" and {s.qk.kind for s in group.sites} == {"string"}
    hf.configure(model, "favor", n_features=16)
    with pytest.raises(ValueError, match="exact softmax"):
        hf.symmetry_group(model)


@pytest.mark.parametrize(
    "family,positional",
    [
        ("llama", None),
        ("llama", "espr"),
        ("qwen3", None),
        ("gemma", None),
        ("mixtral", None),
        ("qwen3_moe", None),
        ("gemma2", None),
        ("gemma3_text", None),
        ("olmo2", None),
        ("olmoe", None),
        ("phi3", None),
        ("gpt_neox", None),
        ("smollm3", None),
        ("exaone4", None),
        ("phi", None),
        ("granite", None),
        ("qwen2_moe", None),
        ("apertus", None),
        ("glm", None),
        ("cohere", None),
        ("cohere2_moe", None),
        ("ernie4_5_moe", None),
        ("gpt_oss", "string"),
        ("helium", None),
        ("nemotron", None),
        ("solar_open", None),
        ("flex_olmo", None),
        ("minimax_m2", None),
        ("glm4_moe", None),
        ("ministral3", None),
        ("deepseek_v2", None),
        ("deepseek_v3", None),
        ("glm4_moe_lite", "string"),
        ("longcat_flash", None),
        ("hy_v3", None),
        ("kolibri1", None),
        ("mistral4", "string"),
        ("minicpm3", None),
        ("dots1", None),
        ("cwm", None),
        ("apertus1p5_text", None),
        ("lfm2", None),
    ],
)
def test_gradient_action_and_norms_match_autograd(family, positional):
    """grad L(g theta) from autograd equals grad_action(g, grad L(theta)); the inverse undoes g; closed-form
    candidate norms equal the brute-force ones (apply, backward, restore), GQA, the gated-MLP rescaling and
    Qwen3's q/k-norm scalings included."""
    if family in QK_NORM_FAMILIES:
        model = _qwen3(family=family)
    else:
        model = _model(family, positional, {"init_scale": 0.05} if positional else {})
    check_gradient_action(model, family in QK_NORM_FAMILIES)


def test_hf_teleport_in_ateleport_in_plain_loop():
    model = hf.patch_positional(tiny("llama", kv_heads=2), "string", init_scale=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    tele = teleport_in_plain_loop(model, opt, 6, 2)
    assert [e["step"] for e in tele.log] == [2, 3]
    assert all(e["skipped"] == 0 for e in tele.log)
    with pytest.warns(DeprecationWarning, match="means start_step=5"), pytest.raises(ValueError, match="start_step"):
        hf.HFTeleport(model, opt, lm_loss, total_steps=3, step=5, steps=2)  # the old name of PlainLoopTeleport


@pytest.mark.parametrize("family,positional,opts", QWEN3)
def test_qwen3_element_is_a_symmetry_through_the_query_key_norms(family, positional, opts):
    model, x = _qwen3(positional, opts, family=family), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    site, scaling, attn = group.sites[0], group.part("norm")[0], attention_modules(model)[0]  # LFM2: layer 1 first
    norms = qk_norms(attn)
    assert site.qk.kind == "trivial" and scaling.site is site and scaling.q_norm is norms[0].weight
    if positional is None:  # native RoPE, half pairing: one block per pair (u, u + Dh/2)
        assert scaling.blocks.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    # OLMo 2 / 3, OLMoE, FlexOLMo, MiniMax-M2: one norm over all heads, one d per key head
    assert scaling.per_head == (family.startswith("olmo") or family in ("flex_olmo", "minimax_m2"))
    g = group.random(torch.Generator().manual_seed(1))
    assert g.norm[0].shape == (scaling.n_blocks,)
    assert scaling.n_blocks == (int(scaling.blocks.max()) + 1) * (2 if scaling.per_head else 1)
    moved = [norms[0].weight, norms[1].weight, attn.v_proj.weight, out_proj(attn).weight]
    before = [p.detach().clone() for p in moved]
    group.apply(model, g)
    assert all((p - b).abs().max() > 1e-3 for p, b in zip(moved, before))  # (W_Q / W_K move only by permutation)
    with torch.no_grad():
        out = model(x).logits
    assert ((out - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_qwen3_negative_controls():
    """A norm scaling that is not constant on a RoPE pair, or an H(d_h) factor on W_Q / W_K (the Llama-family
    Q/K action, which the norms block), changes the logits."""
    model, x = _qwen3(), ids()
    with torch.no_grad():
        ref = model(x).logits
        attn = model.model.layers[0].self_attn
        saved = attn.q_norm.weight.clone()
        d = torch.ones(8, dtype=torch.float64)
        d[0] = 1.5  # pair (0, 4) split
        attn.q_norm.weight.mul_(d)
        attn.k_norm.weight.div_(d)
        assert (model(x).logits - ref).abs().max() > 1e-4
        attn.q_norm.weight.copy_(saved)
        attn.k_norm.weight.mul_(d)
        assert (model(x).logits - ref).abs().max() <= 1e-10 * ref.abs().max()
    site = hf.symmetry_group(_model("qwen2", None, {})).sites[0]  # the same dims without the norms
    u = site.qk.random((1,), torch.Generator().manual_seed(3))[0]
    with torch.no_grad():
        attn.q_proj.weight[:16] = torch.block_diag(u, u) @ attn.q_proj.weight[:16]  # both query heads of group 0
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
        assert (model(x).logits - ref).abs().max() > 1e-4


def test_qwen3_teleports_in_ateleport_in_plain_loop():
    model = _qwen3().to(torch.float32)
    tele = teleport_in_plain_loop(model, torch.optim.Adam(model.parameters(), lr=1e-3), 4, 1)
    assert [e["step"] for e in tele.log] == [1, 2] and all(e["skipped"] == 0 for e in tele.log)


def test_qwen3_zhao_ascent_moves_the_norm_weights_and_keeps_the_loss():
    from symformer.teleport import zhao_teleport

    model, x = _qwen3(), ids()
    group = hf.symmetry_group(model)
    w0 = model.model.layers[0].self_attn.q_norm.weight.detach().clone()
    model.zero_grad()
    before = lm_loss(model, x)
    before.backward()
    out = zhao_teleport(model, group, lambda: lm_loss(model, x), lr=1e-2, steps=3)
    assert out.applied and out.best_norm > out.ref_norm
    assert (model.model.layers[0].self_attn.q_norm.weight - w0).abs().max() > 1e-4
    with torch.no_grad():
        assert abs(lm_loss(model, x).item() - before.item()) <= 1e-10
        w1 = model.model.layers[0].self_attn.q_norm.weight.detach().clone()
        g = group.identity()
        group.apply(model, GroupElement(g.qk, g.vo))  # an element without a norm part leaves the norms alone
        assert torch.equal(model.model.layers[0].self_attn.q_norm.weight, w1)


def test_qwen3_float32_string_blocks_follow_the_learned_rotation():
    """float32 (the basis is then exact only to float32 rounding): STRING with P = I gives the RoPE pairs; once
    training moves P, refresh() recomputes the blocks (generic P: one block, a scalar) and teleports still pass
    the invariance check."""
    assert hf.symmetry_group(_qwen3("string", {"init_scale": 0.3}).float()).part("norm")[0].blocks.tolist() == [0] * 8
    model = _qwen3("string", {"init_scale": 0.0}).float()
    assert hf.symmetry_group(model).part("norm")[0].blocks.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    tele = teleport_in_plain_loop(model, torch.optim.Adam(model.parameters(), lr=1e-2), 5, 1)
    assert [e["step"] for e in tele.log] == [1, 2] and all(e["skipped"] == 0 for e in tele.log)
    assert tele.group.part("norm")[0].blocks.tolist() == [0] * 8


def test_moe_experts_are_rescaled_per_expert_and_the_rescaling_can_fail():
    """Fused 3-D expert weights (Mixtral, Qwen3-MoE): up rows * s, down columns / s per expert keep the logits (and
    move the weights); scaling a gate row instead (act is not linear) changes them."""
    model, x = _model("mixtral", None, {}), ids()
    group = hf.symmetry_group(model, ffn=True)
    experts = model.model.layers[0].mlp.experts
    assert len(group.experts) == 2 and group.experts[0].gate_up is experts.gate_up_proj
    assert hf.symmetry_group(model).experts == []  # ffn=False: attention only
    with torch.no_grad():
        ref = model(x).logits
        before = experts.gate_up_proj.detach().clone()
        g = group.identity()
        g.experts[0] = torch.exp(
            0.5 * torch.randn(group.experts[0].shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        )
        group.apply(model, g)
        assert (experts.gate_up_proj - before).abs().max() > 1e-3
        assert (model(x).logits - ref).abs().max() <= 1e-10 * ref.abs().max()
        experts.gate_up_proj[:, : group.experts[0].shape[1]] *= 1.5  # the gate rows (the first I of 2 I)
        assert (model(x).logits - ref).abs().max() > 1e-4


def test_olmo_norm_scalings_are_per_key_head_and_follow_the_head_permutation():
    """OLMo 2's q/k norms span all heads (weights (H Dh,), (H_kv Dh,)): a query head reads its key head's scaling;
    different key heads may take different scalings. Negative controls: two query heads of one key head scaled
    differently, or heads permuted in W_Q / W_K / W_V / W_O but not in the norm weights, change the logits."""
    model, x = _qwen3(family="olmo2"), ids()
    scaling = hf.symmetry_group(model).part("norm")[0]
    assert scaling.index(False).view(4, 8)[:, 0].tolist() == [0, 0, 4, 4]  # query heads 0, 1 read key head 0
    assert scaling.index(True).view(2, 8)[:, 0].tolist() == [0, 4]
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        ref = model(x).logits
        saved = [p.clone() for p in (attn.q_norm.weight, attn.k_norm.weight)]
        d = torch.tensor([1.5, 0.5], dtype=torch.float64).repeat_interleave(8)  # per key head, constant on pairs
        attn.q_norm.weight.copy_(saved[0] * d.view(2, 1, 8).expand(2, 2, 8).reshape(-1))
        attn.k_norm.weight.div_(d)
        assert (model(x).logits - ref).abs().max() <= 1e-10 * ref.abs().max()
        apart = torch.tensor([1.5, 0.5, 0.5, 0.5], dtype=torch.float64).repeat_interleave(8)
        attn.q_norm.weight.copy_(saved[0] * apart)
        assert (model(x).logits - ref).abs().max() > 1e-4  # query heads 0 and 1 of key head 0 scaled apart
        attn.q_norm.weight.copy_(saved[0])
        attn.k_norm.weight.copy_(saved[1])
    group = hf.symmetry_group(model)
    g = group.identity()
    g.perm = [torch.tensor([1, 0]), None]
    group.apply(model, g)
    with torch.no_grad():
        assert (model(x).logits - ref).abs().max() <= 1e-10 * ref.abs().max()
        attn.q_norm.weight.copy_(saved[0])  # the projections' heads moved, the norm weights' did not
        attn.k_norm.weight.copy_(saved[1])
        assert (model(x).logits - ref).abs().max() > 1e-4


@pytest.mark.parametrize("family", ["olmoe", "olmo"])
def test_olmo_clip_qkv_is_followed_by_the_patch_and_refused_by_teleport(family):
    """OLMoE's and OLMo's clip_qkv clamps q, k, v (after the norms): the patched forward clamps too (parity with a
    clip that bites), and the symmetry group refuses it by name (clamp(U q) != U clamp(q))."""
    x = ids()
    with torch.no_grad():
        ref = tiny(family, clip_qkv=0.3)(x).logits
        free = tiny(family)(x).logits
        out = hf.patch_positional(tiny(family, clip_qkv=0.3), "rope")(x).logits
    assert (free - ref).abs().max() > 1e-3  # the clip changes the model
    assert (out - ref).abs().max() <= 1e-5
    with pytest.raises(ValueError, match=r"^config\.clip_qkv: got 0\.3"):
        hf.symmetry_group(tiny(family, clip_qkv=0.3))


def test_phi3_fused_projections_are_acted_on_through_their_row_blocks():
    """Phi-3 fuses W_Q, W_K, W_V into qkv_proj and gate / up into gate_up_proj: the group acts on row blocks of the
    fused weights (FusedRows) and rescales the up rows of gate_up_proj (FusedExperts, 2-D); parameters() lists each
    fused weight once. A qkv bias (added here; Phi-3 has none) moves with its rows: invariance, the gradient action
    against autograd and the closed-form norms against brute force."""
    from torch import nn

    model = _model("phi3", None, {})
    gen = torch.Generator().manual_seed(0)
    for layer in model.model.layers:
        lin = layer.self_attn.qkv_proj
        lin.bias = nn.Parameter(0.1 * torch.randn(lin.out_features, generator=gen, dtype=torch.float64))
    group = hf.symmetry_group(model, ffn=True)
    ps, attn = group.parameters(), model.model.layers[0].self_attn
    assert len({id(p) for p in ps}) == len(ps)
    assert any(p is attn.qkv_proj.weight for p in ps) and any(p is attn.qkv_proj.bias for p in ps)
    assert [x.shape for x in group.experts] == [(64,), (64,)]
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
    before = attn.qkv_proj.weight.detach().clone()
    group.apply(model, group.random(torch.Generator().manual_seed(1)))
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    assert (attn.qkv_proj.weight - before).abs().max() > 1e-3  # in place, in the model's own parameter
    check_gradient_action(model, False)


def test_phi3_negative_control_on_the_gate_rows():
    """Scaling gate rows of the fused gate_up_proj (act is not linear) changes the logits."""
    model, x = _model("phi3", None, {}), ids()
    with torch.no_grad():
        ref = model(x).logits
        mlp = model.model.layers[0].mlp
        mlp.gate_up_proj.weight[:64] *= 1.5
        mlp.down_proj.weight.div_(1.5)
        assert (model(x).logits - ref).abs().max() > 1e-4


PARTIAL = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}


@pytest.mark.parametrize("positional", [None, "string"])
def test_partial_rotary_group_is_h_on_the_rotated_block_and_gl_on_the_rest(positional):
    """Phi-4-mini rotates part of each head (here 4 of 8 coordinates): the Q/K group is H (or STRING's P H P^T) on
    the rotated block times GL on the pass-through block (BlockGroup). Invariance, the gradient action and the
    closed-form norms hold; a U mixing the two blocks changes the logits."""
    model = tiny("phi3", torch.float64, rope_parameters=PARTIAL, init=0.2)
    model = float64_reference(model if positional is None else hf.patch_positional(model, positional, init_scale=0.3))
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    qk = group.sites[0].qk
    assert qk.kind.startswith("partial-") and qk.dimension == 4 + 16  # 2 pairs x (a, b) + GL(4)
    g = group.random(torch.Generator().manual_seed(1))
    assert (g.qk[0][..., :4, 4:].abs().max() == 0) and (g.qk[0][..., 4:, 4:] - torch.eye(4)).abs().max() > 0.1
    group.apply(model, g)
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
        attn = model.model.layers[0].self_attn
        u = torch.eye(8, dtype=torch.float64)
        u[0, 5] = 0.5  # pass-through coordinate 5 leaks into rotated coordinate 0
        w = attn.qkv_proj.weight
        w[:16] = torch.block_diag(u, u) @ w[:16]
        w[32:40] = torch.linalg.inv(u).T @ w[32:40]
        assert (model(x).logits - ref).abs().max() > 1e-4
    check_gradient_action(float64_reference(tiny("phi3", torch.float64, rope_parameters=PARTIAL, init=0.2)), False)


@pytest.mark.parametrize("family", ["gpt_neox", "phi3"])
def test_fused_blocks_follow_training_and_casts_after_the_group_is_built(family):
    """The row blocks the sites read are refreshed from the fused parameter before each transform: weights changed
    in place after the group was built (a training step) are the ones transformed, and a cast of the model keeps
    the group working (its blocks take the new dtype). Phi-3's consecutive blocks are views of qkv_proj (no copy
    of the weights per layer); NeoX's head-interleaved rows are copies."""
    model, x = _model(family, None, {}), ids()
    group = hf.symmetry_group(model, ffn=True)
    fused = [f.param for f in group.fused]  # qkv weights (and NeoX's biases)
    assert {id(fused_qkv(m)[0].weight) for m in model.modules() if fused_qkv(m)} <= {id(w) for w in fused}
    for f in group.fused:
        shared = {b.untyped_storage().data_ptr() == f.param.untyped_storage().data_ptr() for b in f.blocks}
        assert shared == {family == "phi3"}
    with torch.no_grad():
        for w in fused:  # a "training step" after the group
            w.add_(0.05 * torch.randn_like(w))
        ref = model(x).logits
    group.apply(model, group.random(torch.Generator().manual_seed(2)))
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    model.float()
    with torch.no_grad():
        ref = model(x).logits
    group.apply(model, group.random(torch.Generator().manual_seed(3), scale=0.2))
    assert group.fused[0].blocks[0].dtype == torch.float32
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-4


@pytest.mark.parametrize("family", ["smollm3", "exaone4", "cohere2", "exaone_moe"])
def test_nope_layers_stay_unrotated_and_get_gl(family):
    """SmolLM3's NoPE layers and EXAONE 4's and Cohere 2's global layers apply no rotation: patch_positional leaves
    them as they are (no part) and the group gives them GL(d_h); a generic GL element on them keeps the logits."""
    model = hf.patch_positional(tiny(family, torch.float64), "string", init_scale=0.3)
    layers = [layer.self_attn for layer in model.model.layers]
    assert hasattr(layers[0], "rotary") and not hasattr(layers[1], "rotary")
    assert len(hf.rotary_parts(model)) == 1
    group = hf.symmetry_group(float64_reference(model))
    assert group.sites[1].qk.kind in ("gl", "trivial")  # EXAONE 4: q/k norms, the Q/K part acts on them
    if family not in ("exaone4", "exaone_moe"):
        assert group.sites[1].qk.dimension == 64


def test_layer_options_the_integration_does_not_follow_are_refused():
    """StableLM's and Phi's qk_layernorm (per-head LayerNorms with biases on q and k) are refused by the patch and
    the group by name; an MLP with up and down projections but no gate is not given the gated-MLP rescaling."""
    for family in ("stablelm", "phi"):
        with pytest.raises(ValueError, match=r"^config\.qk_layernorm: got True"):
            hf.patch_positional(tiny(family, qk_layernorm=True), "rope")
        with pytest.raises(ValueError, match=r"^config\.qk_layernorm: got True"):
            hf.symmetry_group(tiny(family, qk_layernorm=True))
    model = tiny("llama")
    assert len(hf.symmetry_group(model, ffn=True).ffns) == 2
    del model.model.layers[0].mlp.gate_proj  # down(act(up x)) is not linear in up
    assert len(hf.symmetry_group(model, ffn=True).ffns) == 1


def _cohere_qk_norm(positional=None, seed=5):
    """Cohere with use_qk_norm (Command R+): per-head LayerNorms, weights (H, Dh) and (H_kv, Dh), drawn around 1."""
    model = tiny("cohere", torch.float64, use_qk_norm=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=gen, dtype=torch.float64))
    opts = {"init_scale": 0.3} if positional == "string" else {}
    model = model if positional is None else hf.patch_positional(model, positional, **opts)
    return float64_reference(model)


@pytest.mark.parametrize("positional", [None, "string"])
def test_cohere_qk_layernorm_scalings_keep_the_logits_and_match_autograd(positional):
    """Cohere's q/k LayerNorms centre and scale each head before the weights multiply, so (as for Qwen3's RMSNorms)
    no U passes through W_Q / W_K, and w_q <- d w_q, w_k <- w_k / d with diag(d) in the rotary's group keeps every
    logit; the weights are per head, (H, Dh): one d per key head, and they follow a head permutation. The gradient
    action and closed-form norms match autograd and brute force."""
    model, x = _cohere_qk_norm(positional), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    site, scaling = group.sites[0], group.part("norm")[0]
    assert site.qk.kind == "trivial" and scaling.q_norm.shape == (4, 8) and scaling.per_head
    if positional is None:  # native RoPE, interleaved pairs (2u, 2u + 1)
        assert scaling.blocks.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    before = scaling.q_norm.detach().clone()
    g = group.random(torch.Generator().manual_seed(1))
    g.perm = [torch.arange(s.n_heads).flip(0) for s in group.sites]  # the weights must follow the heads
    group.apply(model, g)
    assert (scaling.q_norm - before).abs().max() > 1e-3
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    check_gradient_action(_cohere_qk_norm(positional), True)


def test_cohere_qk_layernorm_parity_and_negative_control():
    """The patched forward applies the per-head q/k LayerNorms where HF does (patched RoPE equals the native one);
    a norm scaling that splits an interleaved RoPE pair changes the logits."""
    model, x = _cohere_qk_norm(), ids()
    with torch.no_grad():
        ref = model(x).logits
        assert (_cohere_qk_norm("rope")(x).logits - ref).abs().max() <= 1e-12
        attn = model.model.layers[0].self_attn
        d = torch.ones(8, dtype=torch.float64)
        d[0] = 1.5  # coordinate 0 pairs with 1 in Cohere's layout
        attn.q_norm.weight.mul_(d)
        attn.k_norm.weight.div_(d)
        assert (model(x).logits - ref).abs().max() > 1e-4


@pytest.mark.parametrize("positional", [None, "string"])
def test_yarn_model_group_keeps_the_logits(positional):
    """A YaRN model (cos and sin carry attention_scaling: a scalar on q and k) has the same group as its rotation."""
    yarn = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 32}
    model = tiny("llama", torch.float64, rope_parameters=yarn)
    model = float64_reference(model if positional is None else hf.patch_positional(model, positional, init_scale=0.3))
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    group.apply(model, group.random(torch.Generator().manual_seed(3), scale=0.2))
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_gpt_oss_sinks_follow_the_head_permutation():
    """GPT-OSS adds one sink logit per query head to the softmax denominator: U and V leave it alone, but a head
    permutation must carry it along (the logits stay); permuting the heads without the sinks changes them."""
    model, x = _model("gpt_oss", None, {}), ids()
    with torch.no_grad():
        model.model.layers[0].self_attn.sinks.copy_(torch.tensor([-2.0, 0.0, 1.5, 3.0], dtype=torch.float64))
        ref = model(x).logits
    group = hf.symmetry_group(model)
    assert all(c.carried[0] is a.self_attn.sinks for c, a in zip(group.part("perm"), model.model.layers))
    g = group.random(torch.Generator().manual_seed(2), scale=0.2)
    g.perm = [torch.tensor([1, 0]) for _ in group.sites]
    sinks = model.model.layers[0].self_attn.sinks.detach().clone()
    group.apply(model, g)
    assert torch.equal(model.model.layers[0].self_attn.sinks, sinks[[2, 3, 0, 1]])  # key head 1's query heads first
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
        model.model.layers[0].self_attn.sinks.copy_(sinks)  # the sinks left behind
        assert (model(x).logits - ref).abs().max() > 1e-4
