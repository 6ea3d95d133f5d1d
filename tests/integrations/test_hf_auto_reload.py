"""Reloading a FAVOR+ / PLASH model saved with save_pretrained (safetensors, a tmp folder; issue 58, item 1):
`hf.from_pretrained(AutoModelForCausalLM, folder)` restores the cores (logits equal the saved model's), and a plain
transformers load of the folder fails loudly, never returning a plain SDPA model."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2, "seed": 0},
}


@pytest.fixture(params=["favor", "plash"])
def saved(request, tmp_path):
    kind = request.param
    model = hf.configure(tiny("llama", torch.float64, seed=0), attention=kind, **OPTIONS[kind])
    if kind == "favor":
        for m in model.modules():  # features that a fresh draw from the recorded seed would not give
            if type(m).__name__ == "FavorAttention":
                m.redraw()
    model.save_pretrained(tmp_path, safe_serialization=True)
    ids = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids).logits
    return kind, tmp_path, ids, ref


def test_auto_class_restores_the_cores(saved):
    import transformers as tf

    kind, folder, ids, ref = saved
    assert (folder / "model.safetensors").is_file()
    model = hf.from_pretrained(tf.AutoModelForCausalLM, folder, dtype=torch.float64)
    assert isinstance(model, tf.LlamaForCausalLM) and type(model).__name__ == "SymformerLlamaForCausalLM"
    assert type(model.model.layers[0].self_attn.symformer_core).__name__ == f"{kind.capitalize()}Attention"
    with torch.no_grad():
        assert (model(ids).logits - ref).abs().max() < 1e-12


@pytest.mark.parametrize("loader", ["LlamaForCausalLM", "AutoModelForCausalLM"])
def test_plain_load_fails_loudly(saved, loader):
    """symformer's implementations registered (hf.configure ran in this process): the load gives a model whose
    forward raises naming hf.from_pretrained; unregistered, transformers refuses the unknown implementation."""
    import transformers as tf

    kind, folder, ids, _ = saved
    hf.register()
    model = getattr(tf, loader).from_pretrained(folder, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="^model: got .*without its symformer .* cores.*hf.from_pretrained"):
        model(ids)
    from transformers import AttentionInterface

    impl = hf.IMPLEMENTATIONS[kind]
    saved_fn = AttentionInterface._global_mapping.pop(impl)
    try:
        with pytest.raises(Exception, match=impl):
            getattr(tf, loader).from_pretrained(folder, dtype=torch.float64)
    finally:
        AttentionInterface._global_mapping[impl] = saved_fn


def test_attn_implementation_sdpa_still_loads_a_plain_model(saved):
    """Asking for a transformers implementation loads the folder as a plain model, by choice (hf.reload)."""
    import transformers as tf

    _, folder, ids, ref = saved
    model = hf.from_pretrained(tf.AutoModelForCausalLM, folder, dtype=torch.float64, attn_implementation="sdpa")
    with torch.no_grad():
        assert model(ids).logits.shape == ref.shape
