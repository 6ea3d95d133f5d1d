"""Hybrid families: LFM2 (short-convolution layers between attention layers) and Qwen3-Next (Gated DeltaNet layers,
and full-attention layers with an output gate from q_proj); and AFMoE's output gate (its own gate_proj), with their
symmetry group (a diagonal V/O factor, the gate rows following a head permutation). Only the
attention layers are patched; the others keep their own caches. The generic family tests (parity, padding, far
positions, cores, exact_float64) run on all three."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import check_gradient_action, float64_reference, ids, teleport_in_plain_loop, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules, qk_norms  # noqa: E402


@pytest.mark.parametrize("family", ["lfm2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"])
def test_greedy_decoding_with_the_cache_equals_the_native_model(family):
    """RoPE patched in: the same tokens as the native model, decoding step by step through the hybrid cache."""
    x = ids(batch=1, n=8)
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    native = tiny(family, torch.float64).generate(x, **kw)
    patched = hf.patch_positional(tiny(family, torch.float64), "rope")
    assert len(attention_modules(patched)) == 1  # layer 0 is a convolution / a Gated DeltaNet, left alone
    assert torch.equal(patched.generate(x, **kw), native)


def test_qwen3_next_output_gate_is_applied():
    """The gate splits from q_proj head by head ([q_h; g_h]); with the gate rows moved, the patched model follows the
    native one (the gate is read, not dropped)."""
    x = ids(n=16)
    native, patched = tiny("qwen3_next", torch.float64), hf.patch_positional(tiny("qwen3_next", torch.float64), "rope")
    for model in (native, patched):
        with torch.no_grad():
            _gate_rows(model, 0).mul_(3.0)
    with torch.no_grad():
        a, b = native(x).logits, patched(x).logits
        before = tiny("qwen3_next", torch.float64)(x).logits
    assert (a - b).abs().max().item() <= 1e-6 and (a - before).abs().max().item() > 1e-3


def _gate_rows(model, layer: int) -> torch.Tensor:
    """A view of the gate's weight rows of one attention layer: AFMoE's gate_proj; Qwen3-Next / Qwen3.5: rows
    2 Dh h + Dh ... 2 Dh (h + 1) of q_proj."""
    attn = attention_modules(model)[layer]
    if hasattr(attn, "gate_proj"):
        return attn.gate_proj.weight
    return attn.q_proj.weight.view(attn.config.num_attention_heads, 2, attn.head_dim, -1)[:, 1]


def _gated(family, positional=None):
    """A gated family in float64 with generic q/k norm weights (HF starts them at 1)."""
    model = tiny(family, torch.float64)
    model = float64_reference(model if positional is None else hf.patch_positional(model, positional, init_scale=0.05))
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for attn in attention_modules(model):
            for norm in qk_norms(attn):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=gen, dtype=torch.float64))
    return model


@pytest.mark.parametrize(
    "family,positional",
    [("qwen3_next", None), ("qwen3_5_text", "string"), ("qwen3_5_moe_text", None), ("afmoe", None), ("afmoe", "espr")],
)
def test_gated_families_teleport_with_a_diagonal_value_factor(family, positional):
    """sigmoid(g) * (A V D) = (sigmoid(g) * A V) D for diagonal D: a generic element (heads swapped, the gate rows
    with them; random diagonal V/O factors with both signs) keeps the logits; the gradient action, the inverse and
    the closed-form candidate norms match autograd and brute force."""
    model, x = _gated(family, positional), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    assert {c.group.kind for c in group.part("vo")} == {"diagonal"}
    g = group.random(torch.Generator().manual_seed(1))
    g.perm = [torch.arange(s.n_heads).flip(0) for s in group.sites]
    v = g.vo[0]
    assert torch.equal(v, torch.diag_embed(torch.diagonal(v, dim1=-2, dim2=-1))) and (v < 0).any()
    gate = _gate_rows(model, 0).detach().clone()
    group.apply(model, g)
    assert (_gate_rows(model, 0) - gate).abs().max() > 1e-3  # the gate rows moved with their heads
    with torch.no_grad():
        assert ((model(x).logits - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    check_gradient_action(model, True)


@pytest.mark.parametrize("family", ["qwen3_next", "afmoe"])
def test_output_gate_negative_controls(family):
    """A generic GL(d_h) V/O factor, or a head permutation that leaves the gate rows behind, changes the logits."""
    model, x = _gated(family), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model)
    saved = [p.detach().clone() for p in group.parameters()]
    g = group.identity()
    g.vo[0] = g.vo[0] + 0.3 * torch.randn(
        g.vo[0].shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )  # not diagonal
    group.apply(model, g)
    with torch.no_grad():
        assert (model(x).logits - ref).abs().max() > 1e-4
        for p, s in zip(group.parameters(), saved, strict=True):
            p.copy_(s)
    g = group.identity()
    g.perm = [torch.arange(s.n_heads).flip(0) for s in group.sites]
    gate = _gate_rows(model, 0).detach().clone()
    group.apply(model, g)
    with torch.no_grad():
        _gate_rows(model, 0).copy_(gate)  # the gate stays with the old head order
        assert (model(x).logits - ref).abs().max() > 1e-4


def test_afmoe_reads_its_gate_and_rotates_only_its_local_layers():
    """AFMoE: the gate from its own gate_proj (scaling it moves native and patched alike), and a part in the local
    (sliding) layer only: the global layer is NoPE and keeps no part."""
    x = ids(n=16)
    native, patched = (
        tiny("afmoe", torch.float64),
        hf.patch_positional(tiny("afmoe", torch.float64), "string", init_scale=0.0),
    )
    assert [hasattr(a, "rotary") for a in attention_modules(patched)] == [True, False]
    for model in (native, patched):
        with torch.no_grad():
            attention_modules(model)[1].gate_proj.weight.mul_(3.0)
    with torch.no_grad():
        a, b = native(x).logits, patched(x).logits
        before = tiny("afmoe", torch.float64)(x).logits
    assert (a - b).abs().max().item() <= 1e-6 and (a - before).abs().max().item() > 1e-3


def test_qwen3_5_multimodal_table_in_float64_and_grid_positions_refused():
    """exact_float64's table follows HF's recomposition of the three position streams (T, H, W) on an image-like
    grid (a wrong mrope_section does not); the parts take text positions (three equal streams) and refuse a grid."""
    import transformers as tf

    from symformer.integrations.hf._common import token_positions
    from symformer.integrations.hf.exact import Float64MropeTable

    cfg = tf.Qwen3_5TextConfig(
        hidden_size=64,
        num_attention_heads=4,
        head_dim=16,
        num_key_value_heads=2,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e4,
            "partial_rotary_factor": 1.0,
            "mrope_section": [3, 3, 2],
        },
    )
    hf_table = [m for m in tf.Qwen3_5ForCausalLM(cfg).modules() if type(m).__name__.endswith("RotaryEmbedding")][0]
    gen = torch.Generator().manual_seed(0)
    grid = torch.randint(0, 50, (3, 2, 12), generator=gen)  # three streams that differ, as an image grid's
    x = torch.zeros(1, dtype=torch.float32)
    ref = hf_table(x, grid)
    ours = Float64MropeTable(hf_table.inv_freq, [3, 3, 2])(x.double(), grid)
    wrong = Float64MropeTable(hf_table.inv_freq, [8, 0, 0])(x.double(), grid)  # every frequency from T
    assert all((a.double() - b).abs().max().item() <= 1e-5 for a, b in zip(ref, ours))
    assert (ref[0].double() - wrong[0]).abs().max().item() > 1e-2
    q = torch.zeros(2, 4, 12, 16)
    text = torch.arange(12).expand(3, 2, 12)
    assert torch.equal(token_positions(text, None, None, q), torch.arange(12.0).expand(2, 12)[..., None])
    with pytest.raises(ValueError, match=r"^position_ids: got 'multimodal"):
        token_positions(grid, None, None, q)


def test_gated_family_teleports_in_a_plain_loop():
    """HFTeleport on Qwen3-Next in float32 with Adam: both teleports applied (none skipped by the loss guard)."""
    model = tiny("qwen3_next")
    tele = teleport_in_plain_loop(model, torch.optim.Adam(model.parameters(), lr=1e-3), 4, 1)
    assert [e["step"] for e in tele.log] == [1, 2] and all(e["skipped"] == 0 for e in tele.log)
