"""Decoding states of symformer's decoding cores (FAVOR+, PLASH, any registered DecodingCore) in a transformers
`Cache`, for `model.generate()`.

`StateCache(model)` holds, per attention layer, the core's recurrent state (an attention.decoding.DecodingState:
attention.favor_state.FavorState: [S, z] and the running stabiliser; attention.plash_state.PlashState: the prefix
summaries, their Stage II-III keys and values and the current block) instead of the keys and values: its size does
not grow with the context, and a decoded token costs the same at any length. `configure(model, attention=...)` makes
`generate()` create one in place of its default DynamicCache (a cache the user passes is used as given).

How the state reaches the core: the layer's attention forward calls `cache.update(k, v, layer_idx, ...)` and then
the attention function with the keys it returned. `StateLayer.update` returns the new keys and values unchanged,
tagged with the layer (a Python attribute on the key tensor), and the attention function (hf.attention) runs the
core on the new tokens with that state. torch.compile traces the tag as a side effect (setattr and getattr on a
tensor stay in the graph; delattr would break it, so a read tag is set to None, not removed). An update whose keys
never reached a symformer core (another attention implementation, a forward that rebuilds the keys) is detected at
the layer's next update and raises, never a silent wrong answer.

Beam search and `num_return_sequences` reorder / repeat the states (`reorder_cache`, `batch_select_indices`,
`batch_repeat_interleave`). Cropping (assisted decoding) is refused: a recurrent state cannot forget tokens.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref

import torch

from symformer._validation import fail
from symformer.attention.decoding import decoding_cores
from symformer.integrations.hf._common import (
    attention_modules,
    cache_kwargs,
    is_mla,
    require_transformers,
    text_config,
)

_TAG = "_symformer_state_layer"


def _layer_base():
    return require_transformers().cache_utils.CacheLayerMixin


def _cache_base():
    return require_transformers().cache_utils.Cache


class _StateLayerMethods:
    """One attention layer's decoding state (module doc); mixed into transformers' CacheLayerMixin by
    _state_layer_class, so that this module imports without transformers."""

    # both states have fixed shapes (FAVOR+'s [S, z] and c; PLASH's preallocated summaries and block buffer), and a
    # decoding step neither syncs nor breaks the graph (hf.attention): so, as with transformers' StaticCache,
    # generate() may compile the decoding forward (by default on CUDA; elsewhere with a CompileConfig that allows it)
    is_compileable = True
    is_croppable = False
    is_sliding = False
    supports_early_init = False

    def __init__(self, module, kind: str):
        super().__init__()
        self.module = weakref.ref(module)
        self.kind = kind
        self.state = None
        self.core = None
        self.length = 0
        self.pending = False

    def lazy_initialization(self, key_states, value_states) -> None:
        self.device, self.is_initialized = key_states.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        if self.pending:
            module = self.module()
            impl = getattr(getattr(module, "config", None), "_attn_implementation", None)
            fail(
                "cache",
                f"a symformer StateCache whose layer {getattr(module, 'layer_idx', '?')} state was not "
                f"read by its attention (attn_implementation {impl!r})",
                "a model configured with "
                f"symformer.integrations.hf.configure(model, attention={self.kind!r}) whose attention forward "
                "passes the cache's keys to the attention function",
                TypeError,
            )
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.pending = True
        setattr(key_states, _TAG, self)
        return key_states, value_states

    def consumed(self, n_new: int) -> None:
        self.length += n_new
        self.pending = False

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def offload(self):
        pass

    def prefetch(self):
        pass

    def reset(self) -> None:
        self.state, self.core, self.length, self.pending, self.is_initialized = None, None, 0, False, False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            fail(
                "tokens_to_remove",
                tokens_to_remove,
                "0: a recurrent FAVOR+ / PLASH state cannot forget tokens "
                "(assisted decoding and cache cropping need a KV cache)",
            )

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.state is not None:
            self.state.select(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.state is not None:
            idx = indices.nonzero().flatten() if indices.dtype == torch.bool else indices
            self.state.select(torch.as_tensor(idx, dtype=torch.long))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.state is not None:
            self.state.repeat_interleave(repeats)

    def nbytes(self) -> int:
        return 0 if self.state is None else self.state.nbytes()


_LAYER_CLASS: list = []


def _state_layer_class():
    """StateLayer = _StateLayerMethods on transformers' CacheLayerMixin (built once, on first use)."""
    if not _LAYER_CLASS:
        _LAYER_CLASS.append(type("StateLayer", (_StateLayerMethods, _layer_base()), {}))
    return _LAYER_CLASS[0]


def state_cache(model):
    """A `Cache` holding one symformer decoding state per attention layer of `model`, configured with
    `configure(model, attention=<a decoding core: "favor" | "plash" | ...>)`. ValueError for a model without symformer
    cores, or an MLA family (its forward expands the cached latents before the attention, so the state would never
    reach it)."""
    record = getattr(getattr(model, "config", None), "symformer_attention", None) or {}
    kind = record.get("attention")
    layers = attention_modules(model)
    cores = sorted(decoding_cores())  # the registered cores that decode (attention.decoding): favor, plash, ...
    if kind not in cores or any(getattr(m, "symformer_core", None) is None for m in layers):
        fail(
            "model",
            type(model).__name__,
            "a model configured with symformer.integrations.hf.configure(model, "
            f"attention={' | '.join(map(repr, cores))}) before its state cache is built",
        )
    if any(is_mla(m) for m in layers):
        fail(
            "model",
            type(model).__name__,
            "a family without multi-head latent attention: MLA rebuilds its keys "
            "from the cached latents, so a recurrent state cannot stand in for them",
        )
    cls = _state_layer_class()
    by_index = {int(getattr(m, "layer_idx", 0) or 0): m for m in layers}
    # hybrid models (LFM2's convolutions, Qwen3-Next's Gated DeltaNet): their other layers keep the cache layers
    # transformers gives them; only the attention layers hold symformer states
    tf = require_transformers()
    base = tf.cache_utils.DynamicCache(config=text_config(model)).layers
    n = max(len(base), max(by_index) + 1)
    others = [base[i] if i < len(base) else tf.cache_utils.DynamicLayer() for i in range(n)]
    cache = _cache_base()(layers=[cls(by_index[i], kind) if i in by_index else others[i] for i in range(n)])
    cache.symformer_kind = kind
    return cache


def tagged_layer(key: torch.Tensor):
    """The StateLayer a key tensor came from (StateLayer.update), or None; the tag is cleared (set to None: delattr
    on a tensor breaks a torch.compile graph, setattr does not)."""
    layer = getattr(key, _TAG, None)
    if layer is not None:
        setattr(key, _TAG, None)
    return layer


def _prepare_cache_with_states(self, generation_config, model_kwargs, *args, **kwargs):
    """GenerationMixin._prepare_cache_for_generation, then its fresh DynamicCache replaced by a state_cache."""
    out = type(self)._prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs)
    dynamic = require_transformers().cache_utils.DynamicCache
    if any(is_mla(m) for m in attention_modules(self)):  # MLA keeps its latent KV cache (exact, O(N) per token)
        return out
    for name in ("cache", "past_key_values"):
        cache = model_kwargs.get(name)
        if type(cache) is dynamic and not getattr(cache, "_is_user_defined", False):
            model_kwargs[name] = state_cache(self)
    return out


def install_generation_cache(model) -> None:
    """Make `model.generate()` build a state_cache in place of the DynamicCache it would create (a cache the user
    passes is kept). A bound method on the instance: copy.deepcopy rebinds it to the copy. Idempotent; a no-op
    for a model without generate."""
    if hasattr(model, "_prepare_cache_for_generation"):
        model._prepare_cache_for_generation = types.MethodType(_prepare_cache_with_states, model)


def _forward_cache_hook(model, name: str, at: int, use_at: int | None, module, args, kwargs):
    """A forward pre-hook: where `module.forward` would create its default DynamicCache (use_cache on, no cache
    given), hand it a state_cache of `model` instead. use_cache left unset follows the config, as transformers
    does, except in training mode (a training forward decodes nothing; transformers' cache then stays as it was).
    Shapes and Python state only, so a compiled forward traces it without a break."""
    for key in ("cache", "past_key_values"):
        if kwargs.get(key) is not None:
            return None
    if len(args) > at and args[at] is not None:
        return None
    use = kwargs.get("use_cache")
    if use is None and use_at is not None and len(args) > use_at:
        use = args[use_at]
    if use is None:
        use = bool(getattr(module.config, "use_cache", False)) and not module.training
    if not use:
        return None
    kwargs.pop("past_key_values", None)  # None given under the old name: the cache goes under the forward's name
    kwargs.pop("cache", None)
    kwargs[name] = state_cache(model)
    return args, kwargs


def install_forward_cache(model) -> None:
    """Make every forward that would create a DynamicCache for `model` (the model's and its decoder's: the modules
    whose forward takes input_ids, use_cache and a cache) build a state_cache instead, so a plain
    `model(ids, use_cache=True)` keeps constant-size states as generate() does. Idempotent; a cache the user passes
    is used as given; an MLA family keeps its latent cache (state_cache refuses it)."""
    if any(is_mla(m) for m in attention_modules(model)):
        return
    for module in model.modules():
        forward = getattr(module, "forward", None)
        if forward is None or any(_is_cache_hook(h) for h in module._forward_pre_hooks.values()):
            continue
        try:
            params = list(inspect.signature(forward).parameters)
        except (TypeError, ValueError):
            continue
        name = "cache" if "cache" in params else "past_key_values"
        if "input_ids" not in params or "use_cache" not in params or name not in params:
            continue
        use_at = params.index("use_cache")
        hook = functools.partial(_forward_cache_hook, model, name, params.index(name), use_at)
        module.register_forward_pre_hook(hook, with_kwargs=True)


def _is_cache_hook(hook) -> bool:
    return isinstance(hook, functools.partial) and hook.func is _forward_cache_hook


__all__ = ["state_cache", "install_generation_cache", "install_forward_cache", "tagged_layer", "cache_kwargs"]
