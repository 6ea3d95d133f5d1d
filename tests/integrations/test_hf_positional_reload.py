"""A folder saved from a model with a positional patch and no attention cores (issue 58, item 1): its config.json names
transformers' implementation under a symformer name (hf.reload.SAVED_POSITIONAL), `hf.from_pretrained` restores the
part and runs transformers' own implementation, and a plain transformers load fails loudly instead of returning a
model that rotates with the native RoPE and has dropped the part's parameters."""

import json

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import ids, logits, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf.reload import SAVED_POSITIONAL  # noqa: E402

FAMILIES = ("llama", "qwen2", "mistral", "gemma2")


def _saved(family, tmp_path, attn_implementation=None):
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # buffers computed at build (Gemma's embedding scale) as a float64 load has
    try:
        model = tiny(family, torch.float64, seed=0)
    finally:
        torch.set_default_dtype(default)
    if attn_implementation:
        model.set_attn_implementation(attn_implementation)
    model = hf.patch_positional(model, "string", init_scale=0.3, seed=1)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_restored_and_plain_loads(family, tmp_path):
    import transformers as tf

    model = _saved(family, tmp_path)
    base = model.config._attn_implementation  # gemma2: eager
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["attn_implementation"] == SAVED_POSITIONAL[base]
    x = ids(n=13)
    again = hf.from_pretrained(tf.AutoModelForCausalLM, tmp_path, dtype=torch.float64).eval()
    assert again.config._attn_implementation == base  # transformers' own implementation, not the guard
    assert (logits(again, x) - logits(model, x)).abs().max().item() <= 1e-12
    plain = tf.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    with pytest.raises(RuntimeError, match="^model: got .*without its symformer positional part.*hf.from_pretrained"):
        logits(plain, x)


def test_the_restored_model_saves_the_same_name(tmp_path):
    import transformers as tf

    _saved("llama", tmp_path / "a")
    again = hf.from_pretrained(tf.LlamaForCausalLM, tmp_path / "a", dtype=torch.float64)
    again.save_pretrained(tmp_path / "b")
    assert json.loads((tmp_path / "b" / "config.json").read_text())["attn_implementation"] == "symformer_sdpa"


def test_eager_is_kept_and_asked_implementations_win(tmp_path):
    import transformers as tf

    model = _saved("llama", tmp_path / "eager", attn_implementation="eager")
    assert json.loads((tmp_path / "eager" / "config.json").read_text())["attn_implementation"] == "symformer_eager"
    x = ids(n=9)
    again = hf.from_pretrained(tf.LlamaForCausalLM, tmp_path / "eager", dtype=torch.float64)
    assert again.config._attn_implementation == "eager"
    asked = hf.from_pretrained(tf.LlamaForCausalLM, tmp_path / "eager", dtype=torch.float64, attn_implementation="sdpa")
    assert asked.config._attn_implementation == "sdpa" and len(hf.rotary_parts(asked)) == 2
    assert (logits(again.eval(), x) - logits(model, x)).abs().max().item() <= 1e-12
    model.set_attn_implementation("sdpa")  # Llama's eager softmax runs in float32: compare sdpa with sdpa
    assert (logits(asked.eval(), x) - logits(model, x)).abs().max().item() <= 1e-12


def test_unregistered_names_are_refused_by_transformers(tmp_path):
    import transformers as tf
    from transformers import AttentionInterface

    _saved("llama", tmp_path)
    fn = AttentionInterface._global_mapping.pop("symformer_sdpa")
    try:
        with pytest.raises(Exception, match="symformer_sdpa"):
            tf.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float64)
    finally:
        AttentionInterface._global_mapping["symformer_sdpa"] = fn


def test_a_patched_layer_run_through_the_guard_is_transformers_own(tmp_path):
    """Setting the saved name on a patched model by hand runs it as sdpa (the guard raises only without a part)."""
    model = _saved("llama", tmp_path)
    x = ids(n=9)
    ref = logits(model, x)
    model.set_attn_implementation("symformer_sdpa")
    assert (logits(model, x) - ref).abs().max().item() <= 1e-12
