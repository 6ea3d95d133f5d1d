"""save_pretrained / from_pretrained of HF models configured with FAVOR+ or PLASH (hf.reload): the implementation,
its options and every core's buffers and parameters come back, alone and with a patched positional part, in float32
(logits exactly equal) and with dtype=torch.bfloat16 (the FAVOR+ features stay a float32 master), and the reloaded
model still generates with its state cache."""

import copy

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import ids, logits, tiny  # noqa: E402

from symformer.attention.favor import FavorAttention  # noqa: E402
from symformer.attention.plash import PlashAttention  # noqa: E402
from symformer.integrations import hf  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 2},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2},
}


def _cores(model):
    return [layer.self_attn.symformer_core for layer in model.model.layers]


def _trained(kind, positional):
    """A configured model whose cores hold values their constructor would not draw again: a reload that rebuilt
    them from the recorded options instead of loading them would differ."""
    model = tiny("llama")
    if positional:
        hf.patch_positional(model, positional, init_scale=0.1)
    hf.configure(model, kind, **OPTIONS[kind])
    with torch.no_grad():
        for core in _cores(model):
            if kind == "favor":
                core.redraw()
            else:
                for p in core.parameters():
                    p.add_(0.05 * torch.randn_like(p))
    return model


def _saved(tmp_path, kind, positional):
    model = _trained(kind, positional)
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("positional", [None, "string"])
@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_pretrained_favor_plash_reload_exactly(tmp_path, kind, positional):
    import transformers

    model = _saved(tmp_path, kind, positional)
    x = ids(n=12)
    for loaded in (hf.from_pretrained(transformers.LlamaForCausalLM, tmp_path), type(model).from_pretrained(tmp_path)):
        assert loaded.config._attn_implementation == f"symformer_{kind}"
        assert loaded.config.symformer_attention == {"attention": kind, **OPTIONS[kind]}
        assert (positional is None) == (not hf.rotary_parts(loaded))
        for a, b in zip(_cores(model), _cores(loaded), strict=True):
            assert type(a) is type(b) and not b.training
            sa, sb = a.state_dict(), b.state_dict()
            assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
        assert (logits(loaded, x) - logits(model, x)).abs().max().item() == 0.0
    # generate() of the reload keeps decoding states (hf.cache) and decodes the original's tokens
    out = loaded.generate(x[:, :5], max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
    assert type(cache.layers[0]).__name__ == "StateLayer"
    assert torch.equal(out.sequences, model.generate(x[:, :5], max_new_tokens=4, do_sample=False))


@pytest.mark.parametrize("positional", [None, "string"])
@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_pretrained_favor_plash_reload_in_bfloat16(tmp_path, kind, positional):
    """dtype=torch.bfloat16 gives the bf16 original: weights rounded once, FAVOR+ features and positional parts
    float32 masters. The original's `.to(bfloat16)` also rounds the model's rotary inv_freq (from_pretrained keeps
    it float32, as HF computes it), so the reference gets its float32 table back."""
    import transformers

    model = _saved(tmp_path, kind, positional)
    ref = copy.deepcopy(model).to(torch.bfloat16)
    ref.model.rotary_emb.inv_freq = model.model.rotary_emb.inv_freq.clone()
    loaded = hf.from_pretrained(transformers.LlamaForCausalLM, tmp_path, dtype=torch.bfloat16)
    core = _cores(loaded)[1]
    if kind == "favor":
        assert core.features.dtype == torch.float32 and torch.equal(core.features, _cores(model)[1].features)
    else:
        assert core.prototypes.dtype == torch.bfloat16
    x = ids(n=12)
    out = logits(loaded, x)
    assert out.dtype == torch.bfloat16
    assert (out.float() - logits(ref, x).float()).abs().max().item() == 0.0


def test_pretrained_attn_implementation_argument(tmp_path):
    """The recorded implementation may be named (it raised for PLASH); another symformer one is refused; a
    transformers one wins and drops the record, so the model is a plain one."""
    import transformers

    _saved(tmp_path, "plash", None)
    cls = transformers.LlamaForCausalLM
    assert (
        hf.from_pretrained(cls, tmp_path, attn_implementation="symformer_plash").config._attn_implementation
        == "symformer_plash"
    )
    with pytest.raises(ValueError, match=r"^attn_implementation: got 'symformer_favor', expected 'symformer_plash'"):
        hf.from_pretrained(cls, tmp_path, attn_implementation="symformer_favor")
    plain = hf.from_pretrained(cls, tmp_path, attn_implementation="eager")
    assert plain.config._attn_implementation == "eager" and not plain.config.symformer_attention
    assert not hasattr(plain.model.layers[0].self_attn, "symformer_core")


def test_pretrained_favor_built_on_first_use_reloads(tmp_path):
    """A model built with attn_implementation="symformer_favor" and never configured records the cores it builds on
    first use, so hf.from_pretrained rebuilds them and loads their (redrawn) features."""
    import transformers

    model = tiny("llama", attn_implementation="symformer_favor", symformer_attention={"n_features": 16})
    x = ids(n=12)
    logits(model, x)
    assert model.config.symformer_attention == {"attention": "favor", "n_features": 16}
    _cores(model)[0].redraw()
    model.save_pretrained(tmp_path)
    loaded = hf.from_pretrained(transformers.LlamaForCausalLM, tmp_path)
    assert torch.equal(_cores(loaded)[0].features, _cores(model)[0].features)
    assert (logits(loaded, x) - logits(model, x)).abs().max().item() == 0.0


def test_configure_builds_cores_in_the_models_mode():
    model = hf.configure(tiny("llama"), "plash", **OPTIONS["plash"])  # tiny() is in eval mode
    assert not any(m.training for core in _cores(model) for m in core.modules())


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_favor_plash_cores_build_on_the_meta_device(kind):
    """from_pretrained builds models on the meta device: the seeded draws run on the CPU and move there."""
    make = (
        (lambda: FavorAttention(8, n_features=16, seed=3))
        if kind == "favor"
        else (lambda: PlashAttention(8, n_heads=4, M=4, D_k=8, mixer_heads=2, seed=3))
    )
    with torch.device("meta"):
        meta = make()
    cpu = make()
    assert all(t.device.type == "meta" for t in (*meta.parameters(), *meta.buffers()))
    assert meta.state_dict().keys() == cpu.state_dict().keys()
    assert all(meta.state_dict()[k].shape == v.shape for k, v in cpu.state_dict().items())
