"""Hunyuan normalises q and k per head AFTER the rotation (query_layernorm, key_layernorm, weights (Dh,) shared by
the heads). The patch applies them where HF does; the group scales the norm weights by any positive d per coordinate
(the logits see only w_q * w_k) and moves no W_Q / W_K. The generic family tests (parity, padding, far positions,
cores, exact_float64) run on both Hunyuan families too."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import check_gradient_action, float64_reference, ids, logits, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules  # noqa: E402

HUNYUAN = ("hunyuan_v1_dense", "hunyuan_v1_moe")


def _model(family, positional=None, seed=5, **opts):
    """float64, generic norm weights (HF starts them at 1, where the Qwen3 rule would pass too)."""
    model = tiny(family, torch.float64, attention_bias=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for attn in attention_modules(model):
            for norm in (attn.query_layernorm, attn.key_layernorm):
                norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=gen, dtype=torch.float64))
    model = model if positional is None else hf.patch_positional(model, positional, **opts)
    return float64_reference(model)


PARTS = ((None, {}), ("string", {"init_scale": 0.3}), ("espr", {"init_scale": 0.05}))


@pytest.mark.parametrize("family,positional,opts", [(f, p, o) for f in HUNYUAN for p, o in PARTS])
def test_logits_invariant_under_a_random_element(family, positional, opts):
    """Generic d on every coordinate (not constant on the RoPE pairs), GL(d_h) on V/O, head permutations, MLP and
    expert rescalings: the logits stay to float64 rounding, for the native RoPE and patched STRING / ESPR alike."""
    model, x = _model(family, positional, **opts), ids(n=24)
    ref = logits(model, x)
    group = hf.symmetry_group(model, ffn=True)
    g = group.random(torch.Generator().manual_seed(1))
    d = g.norm[0]
    assert d.shape == (8,) and (d[:4] - d[4:]).abs().min() > 1e-3  # differs across each RoPE pair (u, u + 4)
    assert group.dependent_parameters() == []  # the group does not depend on the rotation: STRING's P trains freely
    group.apply(model, g)
    assert ((logits(model, x) - ref).abs().max() / ref.abs().max()).item() <= 1e-10


@pytest.mark.parametrize("family,positional", [("hunyuan_v1_dense", None), ("hunyuan_v1_moe", "string")])
def test_gradient_action_and_norms_match_autograd(family, positional):
    check_gradient_action(_model(family, positional, **({"init_scale": 0.05} if positional else {})), True)


def test_an_h_factor_on_the_projections_breaks_the_logits():
    """Negative control: U in H(d_h) on W_Q / U^{-T} on W_K keeps a plain RoPE model's logits (test_hf_teleport), but
    here the norms sit between U and the logit (rms(U q) != rms(q), w * U q != U (w * q)), so the logits move."""
    from symformer.positional import RoPE
    from symformer.teleport.qk_groups import qk_group_for

    model, x = _model("hunyuan_v1_dense"), ids(n=24)
    ref = logits(model, x)
    u = qk_group_for(RoPE(8), 8).random((1,), torch.Generator().manual_seed(2))[0]
    attn = attention_modules(model)[0]
    with torch.no_grad():
        attn.q_proj.weight[:8] = u @ attn.q_proj.weight[:8]
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
        attn.k_proj.bias[:8] = torch.linalg.inv(u).T @ attn.k_proj.bias[:8]
        attn.q_proj.bias[:8] = u @ attn.q_proj.bias[:8]
    assert (logits(model, x) - ref).abs().max().item() > 1e-4


@pytest.mark.parametrize("family", HUNYUAN)
def test_patched_parts_apply_the_norms_after_the_rotation(family):
    """Parity with the native model (float64) for RoPE, and a control: the norms applied before the rotation (the
    Qwen3 order) move the logits."""
    model, x = _model(family), ids(n=24)
    ref = logits(model, x)
    patched = _model(family, "rope")
    assert (logits(patched, x) - ref).abs().max().item() <= 1e-10
    for attn in attention_modules(patched):
        attn.q_norm, attn.k_norm = attn.query_layernorm, attn.key_layernorm  # read before the rotation
        del attn.query_layernorm, attn.key_layernorm
    assert (logits(patched, x) - ref).abs().max().item() > 1e-4
