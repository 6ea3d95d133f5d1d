"""The Hugging Face side of the two contracts of issue 59, followed literally: a toy rotary part and a toy decoding
core (tests/_toys.py: their file's content and one registration line each, registered inside the test by
`registered()`) run in `hf.patch_positional` / `hf.configure`, HF `generate()` and save / reload with no other edit.
The patch finds the part through positional.rotary_parts() and builds it by `from_frequencies`; the attention
implementation "symformer_toy_linear" is derived from attention.decoding_cores() at register() time, and the
state cache drives the toy's state through the contract (init_state, forward with state, select, nbytes)."""

import re

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests._toys import ToyLinearAttention, ToyRotary, ToyState, registered  # noqa: E402
from tests.integrations._hf_models import float64_reference, ids, logits, tiny  # noqa: E402

from symformer.attention.decoding import DecodingState  # noqa: E402
from symformer.integrations import hf  # noqa: E402

PROMPT = 6


# ---------------------------------------------------------------- the rotary contract
def test_a_toy_rotary_part_equals_the_native_rope_and_generates():
    """patch_positional(model, "toy_rotary") starts from the model's own frequencies (from_frequencies), so the
    patched model is the native one (float64 both sides); generate() runs on it. A moved frequency moves the logits
    (the parity can fail)."""
    x = ids()
    ref = logits(float64_reference(tiny("llama", torch.float64)), x)
    with registered():
        assert "toy_rotary" in hf.POSITIONALS
        model = float64_reference(hf.patch_positional(tiny("llama", torch.float64), "toy_rotary"))
        parts = hf.rotary_parts(model)
        assert len(parts) == 2 and all(type(p) is ToyRotary for p in parts)
        assert model.config.symformer_positional == {"positional": "toy_rotary"}
        assert (logits(model, x) - ref).abs().max().item() <= 1e-12
        seq = model.generate(x[:, :PROMPT], max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert seq.shape == (2, PROMPT + 4) and torch.equal(seq[:, :PROMPT], x[:, :PROMPT])
        with torch.no_grad():
            parts[0].beta.mul_(1.01)
        assert (logits(model, x) - ref).abs().max().item() > 1e-6
    assert "toy_rotary" not in hf.POSITIONALS


def test_a_toy_rotary_part_round_trips_through_save_and_from_pretrained(tmp_path):
    """save_pretrained records the part by name; hf.from_pretrained rebuilds it through from_frequencies and loads
    its frequencies with the weights: the reload's logits are the saved model's."""
    import transformers as tf

    x = ids(n=13)
    with registered():
        model = hf.patch_positional(tiny("llama", torch.float64), "toy_rotary")
        with torch.no_grad():  # a trained frequency: the reload must take the saved one, not the model's table
            hf.rotary_parts(model)[1].beta.mul_(1.05)
        model.save_pretrained(tmp_path)
        again = hf.from_pretrained(tf.LlamaForCausalLM, tmp_path, dtype=torch.float64).eval()
        assert all(type(p) is ToyRotary for p in hf.rotary_parts(again))
        assert torch.equal(hf.rotary_parts(again)[1].beta, hf.rotary_parts(model)[1].beta)
        assert (logits(again, x) - logits(model, x)).abs().max().item() <= 1e-12


# ---------------------------------------------------------------- the decoding contract
def _toy_model():
    return hf.configure(tiny("llama", torch.float64, kv_heads=2), attention="toy_linear")


def _greedy_without_cache(model, prompt: torch.Tensor, new: int) -> torch.Tensor:
    """Greedy decoding by full forwards over the whole sequence (no cache: the toy's causal form, no state)."""
    seq = prompt
    for _ in range(new):
        nxt = logits(model, seq, use_cache=False)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], dim=1)
    return seq


def _generated(model, prompt: torch.Tensor, new: int, **kw):
    """(sequences, the cache generate() decoded with)."""
    res = model.generate(
        prompt, max_new_tokens=new, do_sample=False, pad_token_id=0, return_dict_in_generate=True, **kw
    )
    return res.sequences, getattr(res, "cache", None) or res.past_key_values  # the name from transformers 5.24


def test_a_toy_decoding_core_decodes_with_its_state_in_generate():
    """configure(model, attention="toy_linear") runs the toy core in every layer as "symformer_toy_linear"; greedy
    generate() with the state cache gives the tokens of a loop of full forwards without cache, and each layer's state
    holds as many bytes after 5 new tokens as after 20 (constant in the context length)."""
    prompt = ids(n=PROMPT)
    with registered():
        model = _toy_model()
        assert hf.IMPLEMENTATIONS["toy_linear"] == "symformer_toy_linear"
        assert model.config._attn_implementation == "symformer_toy_linear"
        assert all(type(layer.self_attn.symformer_core) is ToyLinearAttention for layer in model.model.layers)
        sizes = {}
        for new in (5, 20):
            seq, cache = _generated(model, prompt, new)
            assert torch.equal(seq, _greedy_without_cache(model, prompt, new))
            assert all(type(layer).__name__ == "StateLayer" for layer in cache.layers)
            assert all(isinstance(layer.state, ToyState) for layer in cache.layers)
            assert all(isinstance(layer.state, DecodingState) for layer in cache.layers)
            assert cache.get_seq_length() == PROMPT + new - 1  # the last token is returned, never fed back
            sizes[new] = [layer.nbytes() for layer in cache.layers]
        assert sizes[5] == sizes[20] and all(n > 0 for n in sizes[5])


def test_a_toy_decoding_core_runs_beam_search():
    """Beam search (num_beams=2) reorders the toy's states through DecodingState.select and returns the best beam."""
    prompt = ids(n=PROMPT)
    with registered():
        model = _toy_model()
        seq, cache = _generated(model, prompt, 4, num_beams=2)
        assert seq.shape == (2, PROMPT + 4) and torch.equal(seq[:, :PROMPT], prompt)
        assert all(isinstance(layer.state, ToyState) for layer in cache.layers)


# ---------------------------------------------------------------- negative controls
def test_unregistered_names_are_refused_by_argument():
    """Outside the block the toys are not registered: each host refuses the name as a ValueError naming its argument
    (and listing the registered names), and register() drops the toy's implementation name."""
    with registered():
        hf.register()
        assert "toy_linear" in hf.IMPLEMENTATIONS
    hf.register()
    assert "toy_linear" not in hf.IMPLEMENTATIONS
    # the registered cores: favor and plash, and any a plugin registered in this process (symformer.linearize's)
    names = ", ".join(hf.IMPLEMENTATIONS)
    assert {"favor", "plash"} <= set(hf.IMPLEMENTATIONS)
    with pytest.raises(ValueError, match=rf"^attention: got 'toy_linear', expected one of {re.escape(names)}$"):
        hf.configure(tiny("llama"), attention="toy_linear")
    with pytest.raises(ValueError, match=r"^positional: got 'toy_rotary', expected one of rope, string, "):
        hf.patch_positional(tiny("llama"), "toy_rotary")
    with registered(rotary=None):  # the core alone: a rotary name is still refused
        with pytest.raises(ValueError, match=r"^positional: got 'toy_linear'"):
            hf.patch_positional(tiny("llama"), "toy_linear")
