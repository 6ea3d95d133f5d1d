"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): MLA whose queries each read only the top-k keys chosen by an
indexer with its own projections and its own (native) RoPE. The shared family tests run these models with
index_topk 64, where every key is chosen; here index_topk is 6, so sequences of 24 tokens attend sparsely."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import check_gradient_action, float64_reference, ids, logits, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules  # noqa: E402

DSA = ("deepseek_v32", "glm_moe_dsa")
SPARSE = {"index_topk": 6}
DENSE_MLP = {"first_k_dense_replace": 2}  # no MoE: HF's float32 routers would round apart at 1e-8 (test_hf_mla)


def _sparse(family, dtype=torch.float64, **kw):
    return tiny(family, dtype, **SPARSE, **kw)


def _selections(model, x) -> list[torch.Tensor]:
    """The top-k indices of every layer that runs an indexer (GLM-5's shared layers reuse the previous one's)."""
    out: list[torch.Tensor] = []
    hooks = [
        a.indexer.register_forward_hook(lambda mod, args, res: out.append(res))
        for a in attention_modules(model)
        if a.indexer is not None
    ]
    try:
        logits(model, x)
    finally:
        for h in hooks:
            h.remove()
    return out


@pytest.mark.parametrize("family", DSA)
def test_sparse_parity_and_the_selection_matters(family):
    """With 6 of up to 24 keys per query the patched RoPE model equals HF's in float64. Negative control: the same
    patched model reading every key (the indexer's top-k raised to 64) moves the logits, so the selection is applied
    by the patched forward, not skipped."""
    x = ids(n=24)
    ref = logits(float64_reference(_sparse(family)), x)
    model = float64_reference(hf.patch_positional(_sparse(family), "rope"))
    assert (logits(model, x) - ref).abs().max().item() <= 1e-10
    for attn in attention_modules(model):
        if attn.indexer is not None:
            attn.indexer.index_topk = 64
    assert (logits(model, x) - ref).abs().max().item() > 1e-3


@pytest.mark.parametrize("family", DSA)
def test_the_indexer_keeps_the_native_rope(family):
    """A STRING part changes the attention's rotation, not the indexer's: the first layer (same input) chooses the
    same keys as the native model, and the logits differ (the attention over those keys moved)."""
    x = ids(n=24)
    native = _sparse(family)
    model = hf.patch_positional(_sparse(family), "string", init_scale=0.5)
    assert torch.equal(_selections(native, x)[0], _selections(model, x)[0])
    assert (logits(model, x) - logits(native, x)).abs().max().item() > 1e-3


@pytest.mark.parametrize("family", DSA)
def test_sparse_decoding_with_the_cache(family):
    """Greedy decoding past the top-k (8 + 10 tokens) equals the native model's, and in float64 a cached step
    (indexer keys from the cache) equals the native model's cached step. Not the full forward's: the indexer's
    scores are ReLUs, so several keys can tie at 0 for the last places, and topk breaks the tie by layout (GLM-5
    here: a query of the second sequence picks another zero-score key in the cached step, 0.53 in the logits,
    natively as patched)."""
    x = ids(n=8)
    native = _sparse(family, torch.float32).generate(x, max_new_tokens=10, do_sample=False)
    patched = hf.patch_positional(_sparse(family, torch.float32), "rope")
    assert torch.equal(patched.generate(x, max_new_tokens=10, do_sample=False), native)
    y = ids(n=14)
    steps = []
    for model in (_sparse(family, **DENSE_MLP), hf.patch_positional(_sparse(family, **DENSE_MLP), "rope")):
        model = float64_reference(model)
        with torch.no_grad():
            first = model(y[:, :9], use_cache=True)
            steps.append(model(y[:, 9:], cache=first.past_key_values, use_cache=True).logits)
    assert (steps[1] - steps[0]).abs().max().item() <= 1e-12


@pytest.mark.parametrize("family", DSA)
@pytest.mark.parametrize("positional", [None, "string"])
def test_the_group_leaves_the_sparse_model_unchanged(family, positional):
    """The MLA group moves q_b_proj, kv_b_proj, the rope rows of kv_a_proj_with_mqa and o_proj, none of which the
    indexer reads (it reads the hidden states and the normed query latent): logits and selections are unchanged."""
    base = _sparse(family, attention_bias=True, **DENSE_MLP)
    model = float64_reference(base if positional is None else hf.patch_positional(base, positional, init_scale=0.3))
    x = ids(n=24)
    ref, picks = logits(model, x), _selections(model, x)
    group = hf.symmetry_group(model, ffn=True)
    group.apply(model, group.random(torch.Generator().manual_seed(1)))
    assert ((logits(model, x) - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    assert all(torch.equal(a, b) for a, b in zip(_selections(model, x), picks, strict=True))


@pytest.mark.parametrize("family,positional", [("deepseek_v32", None), ("glm_moe_dsa", "string")])
def test_gradient_action_and_norms_with_a_sparse_selection(family, positional):
    """The gradient action, the inverse and the closed-form candidate norms (tests/integrations/_hf_models.py) on 8
    tokens with top 6: the selection is a no_grad choice the group leaves unchanged."""
    model = _sparse(family, **DENSE_MLP)
    check_gradient_action(
        float64_reference(model if positional is None else hf.patch_positional(model, positional, init_scale=0.05)),
        False,
    )


@pytest.mark.parametrize("family", DSA)
@pytest.mark.parametrize("patched", [False, True])
@pytest.mark.parametrize("core,opts", [("favor", {"n_features": 64}), ("plash", {"M": 4})])
def test_cores_refuse_a_sparse_selection_and_run_a_dense_one(family, patched, core, opts):
    """FAVOR+ and PLASH cannot drop keys per query: a selection that drops earlier keys (24 tokens, top 6) is a
    ValueError naming the mask, never dense attention in its place; up to 6 tokens the selection keeps every earlier
    key (causal), and the core runs (native forward, or patched: both hand the indices on)."""
    model = _sparse(family, torch.float32)
    if patched:
        model = hf.patch_positional(model, "rope")
    hf.configure(model, core, **opts)
    assert torch.isfinite(logits(model, ids(n=6))).all()
    with pytest.raises(ValueError, match=r"^attention_mask: got 'a mask that is neither causal nor key padding"):
        logits(model, ids(n=24))
