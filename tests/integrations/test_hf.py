"""symformer.integrations.hf: attention cores through AttentionInterface, rotary parts patched into Llama-family
models (parity with the native RoPE), options, masks, save/load and bad input. Models are built from configs."""

from __future__ import annotations

import math
import sys

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import FAMILIES, float64_reference, ids, parity_error, tiny  # noqa: E402
from tests.integrations._hf_models import logits as _logits  # noqa: E402
from tests.integrations._hf_models import patched as _patched  # noqa: E402

from symformer._rng import derived_seed  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import (  # noqa: E402
    attention_modules,
    partial_rotary_factor,
)

#: families whose tiny model has one attention layer (the other is a convolution or a Gated DeltaNet)
HYBRID = ("lfm2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


# ---------------------------------------------------------------- parity (issue item 3)
@pytest.mark.parametrize("family", FAMILIES)
def test_rope_parity_float32_gqa(family):
    x = ids()
    ref = _logits(tiny(family), x)
    out = _logits(_patched(family, "rope", torch.float32), x)
    assert (out - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
def test_rope_like_parity_float64(family, positional):
    """ "rope", STRING with P = I (init_scale 0: cayley(0) = I, T3.1) and ESPR at its commuting init all equal the
    model's native RoPE; the reference computes HF's cos/sin table in float64 (HF's own is float32). Where the
    model rotates part of each head (GPT-NeoX here) ESPR is refused by name (test_partial_rotary_...)."""
    if positional == "espr" and partial_rotary_factor(tiny(family).config) < 1:
        with pytest.raises(ValueError, match=r"^positional: got 'espr'"):
            _patched(family, positional, torch.float64)
        return
    assert parity_error(family, positional) <= 1e-10


def test_parity_can_fail():
    """Negative controls: a STRING factor P != I, or a different rope base, moves the logits."""
    x = ids()
    ref = _logits(float64_reference(tiny("llama", torch.float64)), x)
    for positional, opts in (("string", {"init_scale": 0.2}), ("rope", {"base": 500.0})):
        out = _logits(float64_reference(_patched("llama", positional, torch.float64, **opts)), x)
        assert (out - ref).abs().max() > 1e-4


def test_favor_approaches_eager_as_features_grow():
    """T7.3: the FAVOR+ estimate is unbiased with variance O(1/m); with fixed seeds the logit error shrinks."""
    hf.register()
    x = ids()
    ref = _logits(tiny("llama", torch.float64, init=0.05, attn_implementation="eager"), x)
    errs = []
    for m in (64, 1024, 16384):
        model = hf.configure(tiny("llama", torch.float64, init=0.05), "favor", n_features=m, seed=0)
        assert model.config._attn_implementation == "symformer_favor"
        errs.append((_logits(model, x) - ref).abs().max().item())
    assert errs[2] < errs[1] < errs[0] and errs[2] < 5e-3, errs


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("attention", ["favor", "plash"])
def test_cores_run_and_train_in_every_layer_of_every_family(family, attention):
    """FAVOR+ built from the config; PLASH through configure (its parameters must exist before the optimizer).
    Refused by name: Gemma 2's logit soft-cap (neither kernel approximates a capped softmax) and a sliding window
    shorter than the sequence (Gemma 3's, OLMo 3's and EXAONE 4's sliding layers); with a window covering the sequence
    they run."""
    hf.register()
    window = r"^attention_mask: got .*sliding window"
    refusals = {
        "gemma2": r"^attn_logit_softcapping: got 5\.0",
        "gemma3_text": window,
        "olmo3": window,
        "exaone4": window,
        "cohere2": window,
        "cohere2_moe": window,
        "gpt_oss": r"^s_aux: got",
        "vaultgemma": r"^attn_logit_softcapping: got 50\.0",
        "exaone_moe": window,
        "cwm": window,
        "afmoe": window,
    }
    sliding = ("gemma3_text", "olmo3", "exaone4", "cohere2", "cohere2_moe", "exaone_moe", "cwm", "afmoe")
    kw = {"sliding_window": 64} if family in sliding else {}
    if family in refusals:
        model = hf.configure(tiny(family), attention, **({"n_features": 32} if attention == "favor" else {}))
        with pytest.raises(ValueError, match=refusals[family]):
            _logits(model, ids())
        if not kw:
            return
    if attention == "favor":
        model = tiny(family, attn_implementation="symformer_favor", symformer_attention={"n_features": 32}, **kw)
    else:
        model = hf.configure(tiny(family, **kw), "plash", M=4, D_k=16, causal_block=8, mixer_heads=2)
    model.train()
    x = ids()
    loss = model(x, labels=x).loss
    loss.backward()
    layers = attention_modules(model)  # model.model.layers[i].self_attn; GPT-NeoX: gpt_neox.layers[i].attention
    cores = [attn.symformer_core for attn in layers]
    # LFM2's layer 0 is a convolution, Qwen3-Next's and Qwen3.5's a Gated DeltaNet
    assert torch.isfinite(loss) and len(cores) == (1 if family in HYBRID else 2)
    assert all(type(c).__name__ == {"favor": "FavorAttention", "plash": "PlashAttention"}[attention] for c in cores)
    names = ("q_proj", "qkv_proj", "query_key_value", "q_b_proj")  # Phi-3, GPT-NeoX: fused qkv; MLA: low-rank q
    first = [getattr(layers[0], n) for n in names if getattr(layers[0], n, None) is not None]
    assert first[0].weight.grad is not None


@pytest.mark.parametrize("side", ["left", "right"])
def test_favor_key_padding_matches_sdpa_on_real_tokens(side):
    hf.register()
    x = ids()
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, :5] = 0 if side == "left" else 1
    mask[1, -6:] = 0 if side == "right" else 1
    ref = _logits(tiny("llama", torch.float64, init=0.05, attn_implementation="sdpa"), x, attention_mask=mask)
    model = hf.configure(tiny("llama", torch.float64, init=0.05), "favor", n_features=16384)
    out = _logits(model, x, attention_mask=mask)
    real = mask.bool()
    assert torch.isfinite(out).all()
    assert (out - ref)[real].abs().max().item() < 5e-3
    if side == "left":  # real tokens come after padded keys: the mask must be honoured, not dropped
        assert (out - _logits(model, x))[real].abs().max().item() > 1e-4


def test_mask_structure_reads_and_refuses():
    keep = torch.tensor([[True, True, False]])
    tril = torch.ones(3, 3, dtype=torch.bool).tril()
    assert hf.mask_structure(None, 3, 3, True) == (True, None)
    causal, k = hf.mask_structure((tril & keep[:, None, :])[:, None], 3, 3, True)
    assert causal and k.tolist() == [[[[True, True, False]]]]
    window = tril & ~torch.ones(3, 3, dtype=torch.bool).tril(-2)  # sliding window of 2
    with pytest.raises(ValueError, match="attention_mask"):
        hf.mask_structure(window[None, None], 3, 3, True)
    with pytest.raises(ValueError, match="additive bias"):
        hf.mask_structure(torch.full((1, 1, 3, 3), 0.5), 3, 3, True)
    with pytest.raises(ValueError, match="queries"):
        hf.mask_structure(None, 2, 3, True)


def test_plash_runs_after_configure_and_honours_padding():
    hf.register()
    model = hf.configure(tiny("llama"), "plash", M=4, D_k=16, causal_block=8, mixer_heads=2)
    model.train()
    x = ids()
    loss = model(x, labels=x).loss
    loss.backward()
    assert torch.isfinite(loss) and model.model.layers[0].self_attn.symformer_core.prototypes.grad is not None
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, -3:] = 0  # right padding: causally invisible to the real tokens (key padding is ours: plash_state doc)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x, attention_mask=mask).logits[0, :13], model(x).logits[0, :13], atol=1e-5)
    bare = tiny("llama", attn_implementation="symformer_plash")
    with pytest.raises(RuntimeError, match="configure"):
        bare(x)


def test_configure_records_options_and_refuses_bad_ones():
    model = hf.configure(tiny("mistral"), "favor", n_features=48, seed=3)
    assert model.config.symformer_attention == {"attention": "favor", "n_features": 48, "seed": 3}
    assert model.model.layers[1].self_attn.symformer_core.n_features == 48
    # each layer its own features (derived_seed("layer<l>", s), _rng.layer_kwargs), for FAVOR+ and PLASH alike
    seeds = [int(layer.self_attn.symformer_core.seed) for layer in model.model.layers]
    assert seeds == [derived_seed("layer0", 3), derived_seed("layer1", 3)]
    cores = [layer.self_attn.symformer_core for layer in hf.configure(tiny("llama"), "plash").model.layers]
    assert not torch.equal(cores[0].hash_0, cores[1].hash_0)
    with pytest.raises(TypeError, match=r"^seed: got 1.5, expected an integer"):
        hf.configure(tiny("llama"), "favor", seed=1.5)
    with pytest.raises(ValueError, match="attention"):
        hf.configure(tiny("llama"), "flash")
    with pytest.raises(ValueError, match="n_features"):
        hf.configure(tiny("llama"), "favor", n_features=0)


def test_register_without_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"symformer\[hf\]"):
        hf.register()


def test_register_adds_both_names():
    import transformers

    hf.register()
    mapping = transformers.AttentionInterface._global_mapping
    assert {"symformer_favor", "symformer_plash"} <= set(mapping)


# ---------------------------------------------------------------- patching: training, save/load, bad input
def test_patched_parameters_train_and_round_trip(tmp_path):
    model = _patched("llama", "string", torch.float32, init_scale=0.1)
    model.train()
    names = [n for n, _ in model.named_parameters() if "rotary" in n]
    assert "model.layers.0.self_attn.rotary.skew_param" in names
    x = ids()
    model(x, labels=x).loss.backward()
    assert model.model.layers[0].self_attn.rotary.skew_param.grad.abs().sum() > 0
    with torch.no_grad():
        model.model.layers[1].self_attn.rotary.skew_param.add_(0.05)
    model.eval()
    model.save_pretrained(tmp_path)
    import transformers

    for loaded in (type(model).from_pretrained(tmp_path), hf.from_pretrained(transformers.LlamaForCausalLM, tmp_path)):
        assert torch.equal(
            loaded.model.layers[1].self_attn.rotary.skew_param, model.model.layers[1].self_attn.rotary.skew_param
        )
        assert (_logits(loaded.eval(), x) - _logits(model, x)).abs().max().item() == 0.0


RELOAD_PARTS = [("rope", {}), ("string", {"init_scale": 0.1}), ("circulant_string", {}), ("espr", {"init_scale": 0.1})]


@pytest.mark.parametrize(
    "family,positional,opts",
    [
        (f, p, o)
        for f in ("llama", "qwen3", "gemma", "gemma3_text", "olmo2", "phi3", "gpt_neox", "gpt_oss")
        for p, o in RELOAD_PARTS
        if not (f == "gpt_neox" and p == "espr")
    ],
)  # GPT-NeoX rotates part of each head: ESPR is refused there
def test_every_part_reloads_from_a_saved_folder(tmp_path, family, positional, opts):
    """from_pretrained builds the patched model on the meta device first: the parts' construction-time value
    checks (ESPR's skew generators) must not read values there (they did: 'item() on meta tensors'), and GPT-OSS's
    YaRN magnitude must be read there too (it was lost: the meta table was skipped whole)."""
    import transformers

    model = _patched(family, positional, torch.float32, **opts)
    with torch.no_grad():
        for p in attention_modules(model)[1].rotary.parameters():
            p.add_(0.01 * torch.randn_like(p))  # trained values, not the init, must come back
    model.save_pretrained(tmp_path)
    cls = {
        "llama": transformers.LlamaForCausalLM,
        "qwen3": transformers.Qwen3ForCausalLM,
        "gemma": transformers.GemmaForCausalLM,
        "gemma3_text": transformers.Gemma3ForCausalLM,
        "olmo2": transformers.Olmo2ForCausalLM,
        "phi3": transformers.Phi3ForCausalLM,
        "gpt_neox": transformers.GPTNeoXForCausalLM,
        "gpt_oss": transformers.GptOssForCausalLM,
    }[family]
    loaded = hf.from_pretrained(cls, tmp_path).eval()
    x = ids()
    assert (_logits(loaded, x) - _logits(model.eval(), x)).abs().max().item() == 0.0


@pytest.mark.parametrize("positional", ["circulant_string", "espr"])
def test_other_parts_train_with_gqa(positional):
    model = _patched("qwen2", positional, torch.float32)
    model.train()
    x = ids()
    loss = model(x, labels=x).loss
    loss.backward()
    part = model.model.layers[0].self_attn.rotary
    assert torch.isfinite(loss) and any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())


def test_patch_bad_input():
    import transformers

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20))
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel.*llama.*mistral.*qwen2"):
        hf.patch_positional(gpt2, "rope")
    model = _patched("llama", "rope", torch.float32)
    with pytest.raises(ValueError, match="already patched"):
        hf.patch_positional(model, "string")
    odd = tiny("llama")  # transformers 5 refuses an odd head_dim in the config; older releases accept it
    for layer in odd.model.layers:
        layer.self_attn.head_dim = 7
    with pytest.raises(ValueError, match="head_dim"):
        hf.patch_positional(odd, "string")
    with pytest.raises(ValueError, match="d_act"):
        hf.patch_positional(tiny("llama"), "espr", d_act=10)
    with pytest.raises(ValueError, match="positional"):
        hf.patch_positional(tiny("llama"), "alibi")
    with pytest.raises(TypeError, match="option"):
        hf.patch_positional(tiny("llama"), "rope", nonsense=1)
    fresh = tiny("llama")
    with pytest.raises(ValueError, match="d_act"):
        hf.patch_positional(fresh, "espr", d_act=12)
    assert not hasattr(fresh.model.layers[0].self_attn, "rotary")  # a failed patch leaves the model alone


def test_generation_with_cache():
    """Decoding with the KV cache: patched RoPE generates the native model's tokens; FAVOR+ decodes (Nq = 1)."""
    x = ids(n=8)
    # Gemma 2 / 3, OLMo 3, EXAONE 4: a sliding window of 6 over 14 tokens; Phi-3, GPT-NeoX: fused qkv (NeoX:
    # layer_past); SmolLM3, EXAONE 4, Cohere 2: a NoPE layer left unpatched; Cohere, ERNIE 4.5: interleaved pairs;
    # Ministral 3: its query scaling grows past position 8 while decoding
    for family in (
        "llama",
        "gemma",
        "gemma2",
        "gemma3_text",
        "olmo2",
        "olmo3",
        "phi3",
        "gpt_neox",
        "smollm3",
        "exaone4",
        "cohere",
        "cohere2",
        "ernie4_5",
        "ministral3",
    ):
        native = tiny(family).generate(x, max_new_tokens=6, do_sample=False)
        assert torch.equal(
            _patched(family, "rope", torch.float32).generate(x, max_new_tokens=6, do_sample=False), native
        )
    hf.register()
    favor = hf.configure(tiny("mistral"), "favor", n_features=32)
    assert favor.generate(x, max_new_tokens=3, do_sample=False).shape == (2, 11)


@pytest.mark.parametrize("positional", ["rope", "string"])
def test_partial_rotary_parts_equal_the_native_partial_rope(positional):
    """Phi-4-mini rotates part of each head (partial_rotary_factor; here 4 of 8): the patch wraps the part in
    PartialRotary on those coordinates with the model's own frequencies (float64 parity); ESPR is refused by name
    (its 1/sqrt(d_act) scale is stated for a whole head), as is a rotary table of another size."""
    rope = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
    x = ids(n=24)
    ref = _logits(float64_reference(tiny("phi3", torch.float64, rope_parameters=rope)), x)
    model = hf.patch_positional(tiny("phi3", torch.float64, rope_parameters=rope), positional)
    part = model.model.layers[0].self_attn.rotary
    assert (part.head_dim, part.rotary_dim) == (8, 4)
    assert (_logits(float64_reference(model), x) - ref).abs().max().item() <= 1e-10
    with pytest.raises(ValueError, match=r"^positional: got 'espr', expected rope, string or circulant_string"):
        hf.patch_positional(tiny("phi3", rope_parameters=rope), "espr")
    odd = tiny("phi3", rope_parameters=rope)
    odd.model.rotary_emb.inv_freq = odd.model.rotary_emb.inv_freq[:1]
    with pytest.raises(ValueError, match=r"^config\.rope_parameters: got 'a rotary table of 1 frequencies'"):
        hf.patch_positional(odd, "rope")


def test_length_dependent_rope_scaling_is_refused():
    """Phi-3's 128k variants use longrope, whose cos/sin carry a magnitude factor (attention_scaling != 1) and whose
    table switches with the sequence length: refused by name, not patched as a pure rotation."""
    rope = {
        "rope_type": "longrope",
        "rope_theta": 1e4,
        "short_factor": [1.0] * 4,
        "long_factor": [2.0] * 4,
        "partial_rotary_factor": 1.0,
    }
    model = tiny("phi3", rope_parameters=rope, max_position_embeddings=8192, original_max_position_embeddings=4096)
    with pytest.raises(ValueError, match=r"^config\.rope_parameters: got \"rope_type='longrope' \(attention_scaling="):
        hf.patch_positional(model, "rope")


YARN = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 32}


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
def test_yarn_parts_equal_the_native_yarn_rope(family, positional):
    """YaRN's table is its rotation times attention_scaling m = 1 + 0.1 ln(factor) on cos and sin, i.e. q and k
    scaled by m: the parts rotate and the logit scale takes m^2; RoPE, STRING (P = I) and ESPR (commuting init)
    equal the native model in float64 (exact_float64's table carries m too)."""
    x = ids(n=24)
    ref = _logits(float64_reference(tiny(family, torch.float64, rope_parameters=YARN)), x)
    opts = {"init_scale": 0.0} if positional == "string" else {}
    model = float64_reference(
        hf.patch_positional(tiny(family, torch.float64, rope_parameters=YARN), positional, **opts)
    )
    attn = attention_modules(model)[0]
    assert abs(attn.rotary_magnitude - (1 + 0.1 * math.log(4.0))) <= 1e-12
    assert (_logits(model, x) - ref).abs().max().item() <= 1e-10
    for a in attention_modules(model):  # negative control: the rotation alone, without m^2
        del a.rotary_magnitude
    assert (_logits(model, x) - ref).abs().max().item() > 1e-4


def test_yarn_with_a_partial_rotary_embedding_is_refused():
    """With a partial rotary embedding HF's YaRN magnitude scales the rotated coordinates only, which no logit scale
    reproduces: refused by name."""
    rope = {**YARN, "partial_rotary_factor": 0.5}
    with pytest.raises(ValueError, match=r"^config\.rope_parameters: got \"rope_type='yarn' \(attention_scaling="):
        hf.patch_positional(tiny("gpt_neox", rope_parameters=rope), "rope")


@pytest.mark.parametrize(
    "family,positional,module", [("ministral3", "espr", "hf.positional"), ("mistral4", "rope", "hf.mla")]
)
def test_query_position_scaling_is_kept(monkeypatch, family, positional, module):
    """Ministral 3 (and Mistral Small 4's MLA) multiply their rotated queries by 1 + beta log(1 + floor(position /
    original_max)): the patched forward does too (float64 parity where the tiny config's original_max = 8 makes it
    > 1), and leaving it out moves the logits."""
    import importlib

    forward_module = importlib.import_module(f"symformer.integrations.{module}")
    x = ids(n=24)
    ref = _logits(float64_reference(tiny(family, torch.float64)), x)
    model = float64_reference(_patched(family, positional, torch.float64))
    assert (_logits(model, x) - ref).abs().max().item() <= 1e-10
    scale = forward_module.llama4_query_scale(model.config, torch.arange(24.0)[:, None])
    assert scale.shape == (1, 1, 24, 1) and scale[0, 0, 7, 0] == 1
    assert abs(scale[0, 0, 8, 0] - (1 + 0.1 * math.log(2))) < 1e-15
    monkeypatch.setattr(forward_module, "llama4_query_scale", lambda config, positions, dtype=None: 1.0)
    assert (_logits(model, x) - ref).abs().max().item() > 1e-3


# families whose logits move when every position shifts by the same amount (absolute-position effects); the test
# below fails for a new family that moves and is not listed here, so its forward gets read before it is added
ABSOLUTE_POSITION_FAMILIES = {
    "ministral3": "queries scaled by 1 + beta log(1 + floor(position / original_max))",
    "mistral4": "queries scaled as ministral3's",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_parity_holds_far_from_position_zero(family):
    """A 24-token check only reaches positions < 24; a family that changes q or k past some position (Ministral 3)
    passes it unseen. Positions from 1000 and 1013 (one start per row) reach past the tiny configs' thresholds:
    the patched model still equals the native one (float64), and the native logits are shift-invariant (RoPE
    depends on m - n only) unless the family is listed in ABSOLUTE_POSITION_FAMILIES."""
    x = ids(n=24)
    far = torch.stack([torch.arange(24) + 1000, torch.arange(24) + 1013])  # per row: the parts' (B, N) path
    ref_model = float64_reference(tiny(family, torch.float64))
    positional = "espr" if partial_rotary_factor(ref_model.config) >= 1 else "rope"
    out = _logits(float64_reference(_patched(family, positional, torch.float64)), x, position_ids=far)
    ref = _logits(ref_model, x, position_ids=far)
    assert (out - ref).abs().max().item() <= 1e-10
    moved = (ref - _logits(ref_model, x)).abs().max().item()
    if family in ABSOLUTE_POSITION_FAMILIES:
        assert moved > 1e-3
    else:
        assert moved <= 1e-10, f"{family}: logits move by {moved:.2e} under a shift of every position"


@pytest.mark.parametrize("family", FAMILIES)
def test_parity_holds_on_a_left_padded_batch(family):
    """The patched forward passes HF's padding mask on: with the first 5 tokens of one sequence padded, the real
    positions' logits equal the native model's (float64) and differ from the unpadded ones (the mask acts). Gemma 2
    and VaultGemma (eager attention) gave NaN here before exact_float64 ran their softmax in float64."""
    x, mask = ids(n=24), torch.ones(2, 24, dtype=torch.long)
    mask[1, :5] = 0
    ref_model = float64_reference(tiny(family, torch.float64))
    positional = "espr" if partial_rotary_factor(ref_model.config) >= 1 else "rope"
    out = _logits(float64_reference(_patched(family, positional, torch.float64)), x, attention_mask=mask)
    ref = _logits(ref_model, x, attention_mask=mask)
    real = mask.bool()
    assert torch.isfinite(out[real]).all() and (out - ref)[real].abs().max().item() <= 1e-10
    assert (ref - _logits(ref_model, x))[1].abs().max().item() > 1e-3


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "deepseek_v3"])
def test_the_patched_forward_passes_position_ids_on_to_the_attention_function(family):
    """HF's forwards hand position_ids to the attention function (its flash-attention path finds packed sequences
    there); the patched forward does the same, for a registered custom function too."""
    import transformers

    seen = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        seen.append(kwargs.get("position_ids"))
        return transformers.integrations.sdpa_attention.sdpa_attention_forward(
            module, query, key, value, attention_mask, **kwargs
        )

    transformers.AttentionInterface.register("symformer_test_spy", spy)
    model = _patched(family, "rope", torch.float32)
    model.config._attn_implementation = "symformer_test_spy"
    x, pos = ids(n=6), torch.tensor([[3, 4, 5, 0, 1, 2], [0, 1, 2, 3, 4, 5]])  # two packed documents in row 0
    with torch.no_grad():
        model(x, position_ids=pos)
    assert len(seen) == model.config.num_hidden_layers and all(torch.equal(p, pos) for p in seen)


def test_patched_layers_draw_their_own_initial_parts():
    """patch_positional with a seed gives each rotary layer its own seed derived from it (one given seed put the
    same P in every layer before): layers differ, and the same seed gives the same parts whatever the global
    generator's state; without a seed each layer draws from the global generator."""
    from symformer.integrations.hf import rotary_parts

    def skews(**opts):
        return [p.skew_param.detach() for p in rotary_parts(hf.patch_positional(tiny("llama"), "string", **opts))]

    torch.manual_seed(1)
    a = skews(init_scale=0.3, seed=4)
    torch.manual_seed(2)
    b = skews(init_scale=0.3, seed=4)
    assert len(a) == 2 and not torch.equal(a[0], a[1]) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = skews(init_scale=0.3)
    assert not torch.equal(c[0], c[1])
