"""generate() and cached decoding of HF models configured with FAVOR+ / PLASH (hf.configure): the decoding states
live in a StateCache (integrations.hf.cache); every decoded token's logits equal the full causal forward's (float64,
grouped-query attention, a left-padded row, a prompt across several PLASH blocks / FAVOR+ chunks)."""

import copy

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf.cache import cache_kwargs, state_cache  # noqa: E402

OPTIONS = {  # favor: seed 0, the default these checks ran with before seed=None meant torch's global generator
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2},
}
PROMPT, NEW = 14, 6


def _model(family, kind, seed=0):
    return hf.configure(tiny(family, torch.float64, seed=seed, kv_heads=2), attention=kind, **OPTIONS[kind])


def _batch():
    ids = torch.randint(0, 40, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, PROMPT, dtype=torch.long)
    mask[1, :3] = 0  # row 1 left-padded by 3
    return ids, mask


def _positions(mask):
    return (mask.cumsum(-1) - 1).clamp_min(0)  # generate()'s position ids under left padding


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_generate_and_state_decoding_equal_the_full_forward(family, kind, device):
    model = _model(family, kind).to(device)
    ids, mask = (t.to(device) for t in _batch())
    seq = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    am = torch.cat([mask, torch.ones(2, NEW, dtype=torch.long, device=device)], 1)
    pos = _positions(am)
    with torch.no_grad():
        full = model(seq, attention_mask=am, position_ids=pos).logits
        cache = state_cache(model)
        out = model(
            seq[:, :PROMPT], attention_mask=am[:, :PROMPT], position_ids=pos[:, :PROMPT], **cache_kwargs(model, cache)
        )
        err = (out.logits - full[:, :PROMPT])[am[:, :PROMPT].bool()].abs().max()
        for t in range(PROMPT, PROMPT + NEW):
            out = model(
                seq[:, t : t + 1],
                attention_mask=am[:, : t + 1],
                position_ids=pos[:, t : t + 1],
                **cache_kwargs(model, cache),
            )
            err = max(err, (out.logits[:, 0] - full[:, t]).abs().max())
    assert err < 1e-10
    assert torch.equal(full[:, PROMPT - 1 : -1].argmax(-1), seq[:, PROMPT:])  # greedy = the full forward's argmax
    assert cache.get_seq_length() == PROMPT + NEW and cache.layers[0].nbytes() > 0


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_generate_builds_a_state_cache_and_beam_search_reorders_it(kind):
    """generate() keeps decoding states (not keys); beam search over states equals beam search over a KV cache
    (a user-passed DynamicCache, recomputed exactly from the cached keys), and sampling runs."""
    import transformers as tf

    model = _model("llama", kind)
    ids, mask = _batch()
    res = model.generate(
        ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0, return_dict_in_generate=True
    )
    cache = getattr(res, "past_key_values", None) or getattr(res, "cache", None)
    assert type(cache.layers[0]).__name__ == "StateLayer"
    twin = copy.deepcopy(model)  # its generate() builds states for itself, not for the original
    assert torch.equal(
        twin.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0), res.sequences
    )
    beams = model.generate(ids, attention_mask=mask, max_new_tokens=4, num_beams=2, do_sample=False, pad_token_id=0)
    kv = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=4,
        num_beams=2,
        do_sample=False,
        pad_token_id=0,
        **cache_kwargs(model, tf.DynamicCache(config=model.config)),
    )
    assert torch.equal(beams, kv)
    torch.manual_seed(0)
    sampled = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=True, top_k=5, pad_token_id=0)
    assert sampled.shape == (2, PROMPT + 3)


def test_cache_of_another_model_or_kind_is_refused():
    ids, mask = _batch()
    fav, other = _model("llama", "favor"), _model("llama", "favor", seed=1)
    with pytest.raises(ValueError, match="^cache: .*built for another model"):
        other(ids, attention_mask=mask, **cache_kwargs(other, state_cache(fav)))
    cache = state_cache(fav)
    hf.configure(fav, attention="plash", **OPTIONS["plash"])
    with pytest.raises(ValueError, match="^cache: got \"a StateCache built for attention='favor'\""):
        fav(ids, attention_mask=mask, **cache_kwargs(fav, cache))
    sdpa = tiny("llama", torch.float64, kv_heads=2)
    with pytest.raises(ValueError, match="^model: .*configured with"):
        state_cache(sdpa)
    cache = state_cache(_model("llama", "favor"))
    cache.layers[0].update(torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))  # keys no symformer core read
    with pytest.raises(TypeError, match="^cache: .*was not read by its attention"):
        cache.layers[0].update(torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))
    with pytest.raises(ValueError, match="^tokens_to_remove: "):
        cache.crop(-1)


def test_a_mask_the_cores_cannot_honour_is_refused():
    from symformer.integrations.hf.attention import split_state_mask

    window = torch.ones(4, 6, dtype=torch.bool).tril(2) & ~torch.ones(4, 6, dtype=torch.bool).tril(-1)
    with pytest.raises(ValueError, match="^attention_mask: .*sliding window"):
        split_state_mask(window[None, None], 4, 6)


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_16bit_model_and_patched_rotary_part_decode_like_the_full_forward(kind, device):
    """A bfloat16 model runs its FAVOR+ / PLASH cores in float32 (attention.softmax.float32_compute) and decodes with
    the states like its full forward; a symformer rotary part (patch_positional) takes its positions from the
    cache's length when decoding, so float64 decoding stays exact."""
    ids = torch.randint(0, 40, (2, 24), generator=torch.Generator().manual_seed(2)).to(device)
    for dtype, positional in ((torch.bfloat16, None), (torch.float16, None), (torch.float64, "rope")):
        model = tiny("llama", dtype, kv_heads=2)
        if positional:
            hf.patch_positional(model, positional)
        hf.configure(model, attention=kind, **OPTIONS[kind]).to(device)
        with torch.no_grad():
            full = model(ids).logits
            cache = state_cache(model)
            rows = [model(ids[:, :20], **cache_kwargs(model, cache)).logits] + [
                model(ids[:, t : t + 1], **cache_kwargs(model, cache)).logits for t in range(20, 24)
            ]
        dec = torch.cat(rows, 1)
        assert dec.dtype == dtype
        eps = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}.get(dtype)
        tol = 1e-10 if eps is None else 2 * eps * float(full.abs().max())  # the 16-bit layers' own rounding
        assert (dec.double() - full.double()).abs().max() <= tol


def test_generation_bench_rows_on_a_small_model(monkeypatch):
    """The `generation` suite's row: prefill, round-robin steps and state bytes (a small model; timings unchecked)."""
    from symformer.benchmarks import generation as g

    monkeypatch.setattr(
        g,
        "SPEC",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            head_dim=8,
        ),
    )
    monkeypatch.setattr(g, "FAVOR", dict(n_features=16, chunk_size=16))
    monkeypatch.setattr(g, "PLASH", dict(M=4, D_k=8, width=8, mixer_heads=2, causal_block=16))
    rows = {m: g.measure(g._model(m, 0, 128), m, 40, 2, 0, timed=m != "sdpa") for m in g.METHODS}
    assert rows["sdpa"]["state_bytes"] == 2 * 2 * 4 * 40 * 8 * 4  # keys and values, 2 layers, float32
    assert rows["favor"]["state_bytes"] == 2 * 4 * (16 * 9 + 1) * 4  # [S, z] (m x (Dv + 1)) and c, per head
    # PLASH's static-shape state rolls its block over inside every step (fe16ed5): nothing left to amortise
    assert rows["plash"]["block_amortised_s"] == 0 and rows["sdpa"]["prefill_s"] is None
    assert all(r["decode_s"] > 0 for r in rows.values())


@pytest.mark.parametrize("family", ["lfm2", "deepseek_v3"])
def test_hybrid_and_mla_models_generate_like_their_full_forward(family):
    """LFM2 (convolution layers between attention layers): the attention layers hold states, the others keep
    transformers' own cache layers. MLA (DeepSeek-V3) keeps its latent KV cache (decoding recomputes exactly)."""
    model = hf.configure(tiny(family, torch.float64), attention="plash", **OPTIONS["plash"])
    x = torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(4))
    res = model.generate(x, max_new_tokens=5, do_sample=False, pad_token_id=0, return_dict_in_generate=True)
    with torch.no_grad():
        full = model(res.sequences).logits
    assert torch.equal(full[:, 11:-1].argmax(-1), res.sequences[:, 12:])
    kinds = {type(layer).__name__ for layer in (getattr(res, "past_key_values", None) or res.cache).layers}
    assert ("StateLayer" in kinds) == (family == "lfm2") and (len(kinds) > 1) == (family == "lfm2")


def test_cache_kwargs_names_the_keyword_the_forward_takes():
    """transformers 5.24 renamed past_key_values to cache; the other name would land in **kwargs unread."""
    model, cache = _model("llama", "favor"), object()
    import inspect

    want = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    assert cache_kwargs(model, cache) == {want: cache}

    class Old(torch.nn.Module):
        def forward(self, x, past_key_values=None, **kwargs):
            return x

    assert cache_kwargs(Old(), cache) == {"past_key_values": cache}
    with pytest.raises(TypeError, match=r"^module: got 'str', expected a Hugging Face model"):
        cache_kwargs("llama", cache)
