"""Vision-language models whose language model is of a supported family (Gemma 3's Gemma3ForConditionalGeneration,
LLaVA over Llama): the family is read from config.get_text_config(); the rotary parts, FAVOR+ / PLASH and the group act
on the language model's attention layers only, and the vision tower keeps its own attention."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import float64_reference, ids, logits  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules, model_family  # noqa: E402

_TEXT = dict(
    vocab_size=300,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=128,
    initializer_range=0.2,
)
_VISION = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
)


def _model(kind: str, dtype=torch.float64, seed: int = 0, **text):
    """Built in `dtype` (its non-persistent buffers too: Gemma's embedding scale sqrt(d) is computed at build time)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return _build(kind, seed, **text).eval()
    finally:
        torch.set_default_dtype(default)


def _build(kind: str, seed: int, **text):
    import transformers as tf

    torch.manual_seed(seed)
    if kind == "gemma3":  # a sliding layer (base 1e4) and a full layer (base 1e6), window covering 24 tokens
        cfg = tf.Gemma3Config(
            text_config={
                **_TEXT,
                "layer_types": ["sliding_attention", "full_attention"],
                "sliding_window": 64,
                "query_pre_attn_scalar": 12,
                **text,
            },
            vision_config=_VISION,
            mm_tokens_per_image=4,
            image_token_index=299,
            boi_token_index=297,
            eoi_token_index=298,
        )
        return tf.Gemma3ForConditionalGeneration(cfg)
    cfg = tf.LlavaConfig(
        text_config={"model_type": "llama", **_TEXT, **text},
        vision_config={"model_type": "clip_vision_model", **_VISION, "projection_dim": 16},
        image_token_index=299,
    )
    return tf.LlavaForConditionalGeneration(cfg)


@pytest.mark.parametrize("kind,family", [("gemma3", "gemma3_text"), ("llava", "llama")])
@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
def test_parity_with_the_native_model(kind, family, positional):
    """RoPE, STRING (P = I) and ESPR (commuting init) patched into the language model equal its native RoPE (float64,
    HF's table computed in float64); two language-model layers get parts, nothing in the vision tower."""
    x = ids(n=24, vocab=290)
    native = float64_reference(_model(kind))
    assert model_family(native) == family
    patched = hf.patch_positional(_model(kind), positional)
    assert len(hf.rotary_parts(patched)) == 2
    assert all(".language_model." in n for n, m in patched.named_modules() if hasattr(m, "rotary"))
    assert (logits(float64_reference(patched), x) - logits(native, x)).abs().max().item() <= 1e-10


@pytest.mark.parametrize("kind", ["gemma3", "llava"])
def test_group_invariance_and_favor_on_the_language_model_only(kind):
    """A random group element keeps the logits (float64); FAVOR+ goes into the language model's layers and the vision
    tower keeps its implementation; a training step reaches the first layer's projections."""
    x = ids(n=24, vocab=290)
    model = float64_reference(hf.patch_positional(_model(kind), "string", init_scale=0.3))
    ref = logits(model, x)
    group = hf.symmetry_group(model, ffn=True)
    group.apply(model, group.random(torch.Generator().manual_seed(1)))
    assert ((logits(model, x) - ref).abs().max() / ref.abs().max()).item() <= 1e-10
    fav = hf.configure(_model(kind, torch.float32), "favor", n_features=32)
    assert fav.config.get_text_config()._attn_implementation == "symformer_favor"
    assert fav.config.vision_config._attn_implementation != "symformer_favor"
    assert len([a for a in attention_modules(fav) if hasattr(a, "symformer_core")]) == 2
    fav.train()
    fav(x, labels=x).loss.backward()
    assert attention_modules(fav)[0].q_proj.weight.grad is not None


def test_patched_multimodal_model_saves_and_reloads(tmp_path):
    from transformers import Gemma3ForConditionalGeneration

    x = ids(n=24, vocab=290)
    model = hf.patch_positional(_model("gemma3"), "string", init_scale=0.3)
    model.save_pretrained(tmp_path)
    again = hf.from_pretrained(Gemma3ForConditionalGeneration, tmp_path, dtype=torch.float64).eval()
    assert len(hf.rotary_parts(again)) == 2
    assert (logits(again, x) - logits(model, x)).abs().max().item() <= 1e-12
    plain = Gemma3ForConditionalGeneration.from_pretrained(tmp_path, dtype=torch.float64).eval()  # issue 58 item 1
    with pytest.raises(RuntimeError, match="without its symformer positional part"):
        logits(plain, x)


@pytest.mark.parametrize("kind", ["gemma3", "llava"])
def test_a_plain_load_of_a_multimodal_folder_with_cores_fails_loudly(kind, tmp_path):
    """The saved implementation names the language model's sub-config at the top level too (a load otherwise sets the
    top-level one on every sub-config, and the plain model would run sdpa without the cores: issue 58 item 1)."""
    x = ids(n=12, vocab=290)
    model = hf.configure(_model(kind), "favor", n_features=16, seed=0)
    model.save_pretrained(tmp_path)
    cls = type(model).__mro__[1]
    again = hf.from_pretrained(cls, tmp_path, dtype=torch.float64).eval()
    assert (logits(again, x) - logits(model, x)).abs().max().item() <= 1e-12
    with pytest.raises(RuntimeError, match="without its symformer favor cores"):
        logits(cls.from_pretrained(tmp_path, dtype=torch.float64).eval(), x)
