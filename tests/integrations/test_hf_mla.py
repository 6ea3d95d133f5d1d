"""Multi-head latent attention (DeepSeek-V3, GLM-4.7-Flash): the rotary parts act on the rope blocks only, one
shared rotated key block serves every head, and YaRN's magnitude scales those blocks, not the logit. The generic
family tests (parity in float64, left padding, far positions, FAVOR+ / PLASH training, exact_float64) run on both
MLA families too; these add the MLA-specific controls."""

from __future__ import annotations

import math

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import float64_reference, ids, logits, teleport_in_plain_loop, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules, check_layer, rope_pairing  # noqa: E402

DSA = ("deepseek_v32", "glm_moe_dsa")  # MLA with DeepSeek sparse attention (an indexer picks each query's keys)
MLA = ("deepseek_v2", "deepseek_v3", "glm4_moe_lite", "longcat_flash", "mistral4", "minicpm3", *DSA)


def _gap(model, ref, x) -> float:
    return (logits(float64_reference(model), x) - ref).abs().max().item()


@pytest.mark.parametrize("family", MLA)
def test_the_part_rotates_the_rope_block_with_the_models_table(family):
    """The part is built on qk_rope_head_dim coordinates (no PartialRotary: the rope block is the last of the head),
    from the model's own frequencies, in its pairing (DeepSeek-V3 here: interleaved; GLM-4.7-Flash here: halves)."""
    model = hf.patch_positional(tiny(family, torch.float64), "rope")
    attn = attention_modules(model)[0]
    assert type(attn.rotary).__name__ == "RoPE" and attn.rotary.head_dim == attn.qk_rope_head_dim == 4
    pairing = "half" if family in ("glm4_moe_lite", "minicpm3") else "interleaved"  # V2: complex pairs; V3 and
    # Mistral 4 here: rope_interleave
    assert attn.rotary.pairing == pairing == rope_pairing(model.config)
    assert torch.equal(attn.rotary.beta[:, 0], model.model.rotary_emb.inv_freq.to(torch.float64))


@pytest.mark.parametrize("family", MLA)
def test_parity_needs_the_models_pairing(family):
    """Negative control for the pairing: the other layout rotates other coordinate pairs and the logits move."""
    x = ids(n=24)
    ref = logits(float64_reference(tiny(family, torch.float64)), x)
    own = rope_pairing(tiny(family).config)
    other = "half" if own == "interleaved" else "interleaved"
    assert _gap(hf.patch_positional(tiny(family, torch.float64), "rope"), ref, x) <= 1e-10
    assert _gap(hf.patch_positional(tiny(family, torch.float64), "rope", pairing=other), ref, x) > 1e-3


def test_yarn_magnitude_scales_the_rope_blocks_not_the_logit():
    """The tiny DeepSeek-V3 uses YaRN with mscale != mscale_all_dim: HF's cos and sin carry m = 1.065 (the rope
    blocks only) and its logit scale carries mscale_all_dim^2. Parity holds with m on the blocks; without it, or with
    m^2 on the whole logit (the rule for full-head rotations), it fails."""
    x = ids(n=24)
    ref = logits(float64_reference(tiny("deepseek_v3", torch.float64)), x)
    model = hf.patch_positional(tiny("deepseek_v3", torch.float64), "string", init_scale=0.0)
    layers = attention_modules(model)
    m = layers[0].rotary_magnitude
    assert m == pytest.approx(model.model.rotary_emb.attention_scaling) and abs(m - 1) > 0.05
    assert layers[0].scaling != pytest.approx(1 / math.sqrt(layers[0].qk_head_dim))  # mscale_all_dim^2 on the logit
    assert _gap(model, ref, x) <= 1e-10
    for attn in layers:
        attn.rotary_magnitude = 1.0
    assert _gap(model, ref, x) > 1e-3
    for attn in layers:
        attn.scaling *= m * m
    assert _gap(model, ref, x) > 1e-3


@pytest.mark.parametrize("family", MLA)
def test_decoding_with_the_latent_cache_matches_the_native_model(family):
    """The cache holds the latent and the rotated key block (transformers 5.x): greedy decoding of the patched
    model equals the native one, and a cached step's logits equal the full forward's in float64."""
    x = ids(n=8)
    native = tiny(family).generate(x, max_new_tokens=6, do_sample=False)
    assert torch.equal(hf.patch_positional(tiny(family), "rope").generate(x, max_new_tokens=6, do_sample=False), native)
    # DSA: both layers dense. HF's routers score in float32, so a cached step can round a routing weight apart from
    # the full forward's (~1e-8 on this data: native GLM-5 reads 2.6e-8), which says nothing about the cache
    dense = {"first_k_dense_replace": 2} if family in DSA else {}
    model = float64_reference(hf.patch_positional(tiny(family, torch.float64, **dense), "string", init_scale=0.3))
    with torch.no_grad():
        full = model(x).logits
        first = model(x[:, :5], use_cache=True)
        step = model(x[:, 5:], cache=first.past_key_values, use_cache=True).logits
    assert (step - full[:, 5:]).abs().max().item() <= 1e-12


def test_a_trained_part_reloads_from_a_saved_folder(tmp_path):
    import transformers

    model = hf.patch_positional(tiny("deepseek_v3"), "string", init_scale=0.1)
    with torch.no_grad():
        for p in attention_modules(model)[1].rotary.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    loaded = hf.from_pretrained(transformers.DeepseekV3ForCausalLM, tmp_path).eval()
    x = ids()
    assert attention_modules(loaded)[0].rotary_magnitude == attention_modules(model)[0].rotary_magnitude
    assert (logits(loaded, x) - logits(model.eval(), x)).abs().max().item() == 0.0


def _first_attention_output(model, x) -> torch.Tensor:
    """The first attention layer's output (before any MoE routing, whose discrete top-k choice turns small
    differences into jumps: LongCat-Flash's zero experts flip at 4096 features)."""
    out = []
    handle = attention_modules(model)[0].register_forward_hook(lambda mod, args, res: out.append(res[0]))
    try:
        logits(model, x)
    finally:
        handle.remove()
    return out[0]


@pytest.mark.parametrize("family", MLA)
def test_favor_approaches_softmax_with_narrow_values(family):
    """FAVOR+ takes MLA's values (6 coordinates) narrower than its queries and keys (12): the first layer's error to
    the exact softmax falls as the features grow (fixed seeds; T7.4's variance shrinks like 1 / n_features)."""
    x = ids(n=24)
    ref = _first_attention_output(tiny(family, torch.float64, init=0.05), x)
    errs = [
        (
            _first_attention_output(
                hf.configure(tiny(family, torch.float64, init=0.05), "favor", n_features=n, seed=0), x
            )
            - ref
        )
        .abs()
        .max()
        .item()
        / ref.abs().max().item()
        for n in (16, 4096)
    ]
    assert errs[1] < errs[0] / 4 and errs[1] < 2e-2


def test_an_older_mla_layout_is_refused_by_name():
    """transformers releases whose MLA caches expanded keys (no expand_kv) follow another forward: refused."""

    class Config:
        model_type = "deepseek_v3"  # an MLA family (its record says mla), its layer from such a release

    class OldMLA(torch.nn.Module):
        config = Config()
        kv_a_proj_with_mqa = None

    with pytest.raises(ValueError, match=r"^model: got 'OldMLA without expand_kv"):
        check_layer(OldMLA())


@pytest.mark.parametrize("family", MLA)
def test_espr_is_refused_on_the_rope_block(family):
    with pytest.raises(ValueError, match=r"^positional: got 'espr'.*\(4 of 12 coordinates\)"):
        hf.patch_positional(tiny(family), "espr")


# ---------------------------------------------------------------- the symmetry group
def _model(family, positional=None, **opts):
    model = tiny(family, torch.float64, attention_bias=True)  # kv_a_proj_with_mqa's bias: its rope rows move too
    return float64_reference(model if positional is None else hf.patch_positional(model, positional, **opts))


@pytest.mark.parametrize(
    "family,positional,opts",
    [(f, p, o) for f in MLA for p, o in ((None, {}), ("string", {"init_scale": 0.3}), ("circulant_string", {}))],
)
def test_logits_invariant_under_a_random_element(family, positional, opts):
    """Two sites per layer: GL(nope) per head on the query / key nope blocks with GL(v) per head on the values and
    output columns, and one element of the rotary's group on the rope blocks, shared by the heads (a single key
    head); gated-MLP, shared-expert and per-expert rescalings with ffn=True. float64, generic element."""
    model, x = _model(family, positional, **opts), ids(n=24)
    ref = logits(model, x)
    group = hf.symmetry_group(model, ffn=True)
    nope, rope = group.sites[:2]
    values = {id(c.site): c.dim for c in group.part("vo")}  # the rope site has no values, so no V/O factor
    assert (nope.head_dim, values.get(id(nope)), nope.n_heads, rope.head_dim, values.get(id(rope)), rope.n_heads) == (
        8,
        6,
        4,
        4,
        None,
        1,
    )
    assert not [c for c in group.part("perm")]  # the two sites share each head: no permutation
    assert rope.qk.kind == {None: "h", "string": "string", "circulant_string": "commutant"}[positional]
    before = [p.detach().clone() for p in group.parameters()]
    group.apply(model, group.random(torch.Generator().manual_seed(1)))
    moved = max((p - b).abs().max().item() for p, b in zip(group.parameters(), before, strict=True))
    assert moved > 0.1 and ((logits(model, x) - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_invariance_needs_the_rotary_group_and_one_factor_for_all_heads():
    """Negative controls: a GL factor on the rope blocks (not in H), and a rope factor for one query head only (the
    key block is shared, so the other heads read it through U^{-T} without U on their queries)."""
    model, x = _model("deepseek_v3"), ids(n=24)
    ref = logits(model, x)
    group = hf.symmetry_group(model)
    saved = [p.detach().clone() for p in group.parameters()]
    g = group.identity()
    gen = torch.Generator().manual_seed(2)
    g.qk[1] = torch.eye(4, dtype=torch.float64) + 0.3 * torch.randn(1, 4, 4, generator=gen, dtype=torch.float64)
    group.apply(model, g)
    assert (logits(model, x) - ref).abs().max().item() > 1e-4
    with torch.no_grad():
        for p, s in zip(group.parameters(), saved, strict=True):
            p.copy_(s)
        u = group.sites[1].qk.random((1,), gen)[0]  # in H: fine for every head at once, not for one alone
        attn = model.model.layers[0].self_attn
        rope_rows = slice(8, 12)  # head 0's rope block in q_b_proj (rows [nope; rope] per head)
        attn.q_b_proj.weight[rope_rows] = u @ attn.q_b_proj.weight[rope_rows]
        k = attn.kv_a_proj_with_mqa
        k.weight[16:] = torch.linalg.inv(u).T @ k.weight[16:]
        k.bias[16:] = torch.linalg.inv(u).T @ k.bias[16:]
    assert (logits(model, x) - ref).abs().max().item() > 1e-4


def test_hf_teleport_trains_an_mla_model_in_a_plain_loop():
    model = hf.patch_positional(tiny("deepseek_v3"), "string", init_scale=0.1)
    tele = teleport_in_plain_loop(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), 6, 2)
    assert [e["step"] for e in tele.log] == [2, 3] and all(e["skipped"] == 0 for e in tele.log)


def test_zhao_ascent_on_mla_whose_values_are_narrower_than_the_nope_blocks():
    """Zhao's ascent builds V/O factors in each site's value group: the tiny config's v_head_dim (6) differs from
    qk_nope_head_dim (8), and the rope site has no values (a head_dim-sized factor there fails on the value rows)."""
    from symformer.teleport import zhao_teleport

    model, x = float64_reference(tiny("deepseek_v3", torch.float64)), ids()
    assert (model.config.v_head_dim, model.config.qk_nope_head_dim) == (6, 8)
    group = hf.symmetry_group(model)
    model.zero_grad()
    before = model(x, labels=x).loss
    before.backward()
    out = zhao_teleport(model, group, lambda: model(x, labels=x).loss, lr=1e-2, steps=3)
    assert out.applied and out.best_norm > out.ref_norm
    with torch.no_grad():
        assert abs(model(x, labels=x).loss.item() - before.item()) <= 1e-10
