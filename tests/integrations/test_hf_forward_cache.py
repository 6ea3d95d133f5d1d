"""A plain forward with use_cache and no cache on a model configured with FAVOR+ / PLASH (issue 58, item 6) builds
symformer's state cache, as generate() does, not transformers' DynamicCache: constant-size states per decoded
token, whatever the context, and logits equal to the full forward's (float64)."""

import copy

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf.cache import cache_kwargs  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2, "seed": 0},
}


def _model(kind):
    return hf.configure(tiny("llama", torch.float64, seed=0), attention=kind, **OPTIONS[kind])


def _cache_of(out):
    return getattr(out, "past_key_values", None) or getattr(out, "cache", None)


def _nbytes(cache) -> int:
    return sum(layer.nbytes() for layer in cache.layers)


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_forward_with_use_cache_builds_states_and_decodes_exactly(kind):
    model = _model(kind)
    ids = torch.randint(0, 40, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        sizes = {}
        for prompt in (8, 30):
            out = model(ids[:, :prompt], use_cache=True)
            cache = _cache_of(out)
            assert type(cache.layers[0]).__name__ == "StateLayer"
            err = (out.logits - full[:, :prompt]).abs().max()
            for t in range(prompt, prompt + 6):
                out = model(ids[:, t : t + 1], **cache_kwargs(model, cache))
                err = max(err, (out.logits[:, 0] - full[:, t]).abs().max())
            assert err < 1e-10
            sizes[prompt] = _nbytes(cache)
    assert sizes[8] == sizes[30] > 0  # the state does not grow with the context


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_every_cache_creating_forward_gets_states(kind):
    """The model's forward with use_cache left to the config (eval mode), its decoder's forward, and a deep copy
    (its states are its own); a cache the user passes is kept; use_cache=False builds none."""
    import transformers as tf

    model = _model(kind)
    ids = torch.randint(0, 40, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert type(_cache_of(model(ids)).layers[0]).__name__ == "StateLayer"
        assert type(_cache_of(model.model(ids, use_cache=True)).layers[0]).__name__ == "StateLayer"
        twin = copy.deepcopy(model)
        cache = _cache_of(twin(ids, use_cache=True))
        assert cache.layers[0].module() is twin.model.layers[0].self_attn
        given = tf.DynamicCache(config=model.config)
        assert _cache_of(model(ids, use_cache=True, **cache_kwargs(model, given))) is given
        assert _cache_of(model(ids, use_cache=False)) is None
