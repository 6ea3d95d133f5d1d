"""symformer's decoding attention cores as Hugging Face `AttentionInterface` implementations.

`register()` adds "symformer_<name>" for every registered core that decodes (attention.decoding.decoding_cores():
"symformer_favor" for FAVOR+, ESPR Tier 7; "symformer_plash" for PLASH, Alg. 1; a core registered later gets its name
at the next register() / configure) to `transformers.AttentionInterface`, and sdpa's boolean mask builder under the
same names to `AttentionMaskInterface` (without one, transformers hands a custom implementation no mask at all, so
padding would be dropped silently). This module reads a core through the decoding contract only (init_state, the
forward with a state, the state's select / repeat_interleave / nbytes, value_dim_equals_head_dim, builds_lazily), and
builds it through the ATTENTION registry.

Options: `configure(model, attention="favor", n_features=1024, ...)` records them in
`config.symformer_attention` (saved in config.json), switches the model to the implementation and gives every
attention layer its own core (`self_attn.symformer_core`, a submodule: its buffers and parameters train, save
and load; `hf.from_pretrained` / `type(model).from_pretrained` rebuild the cores from the record before the
weights load: hf.reload). A model built with `attn_implementation="symformer_favor"` and never configured builds
its FAVOR+ cores on first use from `config.symformer_attention` (or the defaults): a core whose `builds_lazily` is
True; PLASH has trainable parameters that must exist before the optimizer, so it requires `configure`.

Masks: what a core can honour is read off the boolean (B, 1, Nq, Nk) mask and anything else raises
ValueError, never a silent fallback. Both cores: causal, key padding (left or right), both, or none (PLASH's
key padding is ours, attention.plash_state: the paper's block has no masked form), and packed sequences, whose
boundaries come from restarting position_ids or the cu_seq_lens_* kwargs (hf.packing). Not supported: sliding
windows, additive bias masks.

Decoding: `configure` makes `generate()` keep one decoding state per layer in a `hf.cache.state_cache` (constant
cost per token); with a KV cache (a DynamicCache passed by the user) the last Nq rows of the causal attention over
the cached keys are recomputed exactly from a fresh state.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from symformer._rng import layer_kwargs
from symformer._validation import check_choice, fail, reads_values
from symformer.attention.decoding import DecodingCore, decoding_cores
from symformer.integrations.hf._common import attention_modules, head_dim, out_proj, require_transformers, text_config
from symformer.integrations.hf.cache import install_forward_cache, install_generation_cache, tagged_layer
from symformer.integrations.hf.packing import packed_documents
from symformer.integrations.hf.reload import (
    SUB_CONFIG_MARK,
    Restorer,
    register_positional,
    register_restorer,
    restoring_class,
)
from symformer.registry import ATTENTION

#: core name -> its attn_implementation "symformer_<name>", for every registered decoding core (decoding_cores()),
#: by name; refilled by register() (so configure's), where a core registered since gets its name
IMPLEMENTATIONS: dict[str, str] = {}
_FUNCTIONS: dict[str, object] = {}  # core name -> its AttentionInterface function (one per name: idempotent)
_LAZY_RECORDS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # configs whose record _core made


# ---------------------------------------------------------------- masks
# Classifying a mask (causal? key padding? something the cores cannot honour?) reads its values: a host sync on an
# accelerator and a graph break under torch.compile. So the classification runs where value checks run
# (_validation.reads_values: CPU tensors in eager mode by default). Elsewhere the structure is taken from what the
# model declares, without reading the mask: causal iff the attention module is causal (and there is more than one
# query), and the key-padding keep mask is the union of the mask's rows, passed to the core even when it keeps every
# key (testing that would read it). For the masks the CPU path accepts this is the same structure, so the outputs are
# equal. A mask the CPU path refuses (sliding window, packed sequences, a bias) is still caught there, by a
# device-side assert (torch._assert_async: no sync, traced by torch.compile) that fails the step loudly; a single
# decoded query needs none, since every (B, 1, 1, Nk) mask is key padding.
_STRUCTURE = (
    "attention_mask: got a mask that is neither causal nor key padding (sliding window, packed sequences, "
    "per-head masks, ...), expected causal and/or key-padding masks: the random-feature and summary cores cannot "
    "honour per-query masks"
)


def _assert_on_device(ok: torch.Tensor, message: str = _STRUCTURE) -> None:
    """Raise `message` where the check runs (a RuntimeError on the CPU; a device-side assert on a GPU, reported at
    the next sync) without reading `ok` to the host."""
    torch._assert_async(ok.all(), message)


_BIAS = "attention_mask: got an additive bias mask, expected a boolean or 0/-inf mask (symformer cores drop keys only)"


def _boolean_mask(mask: torch.Tensor, nq: int, nk: int) -> torch.Tensor:
    """An HF attention mask as a boolean keep-mask (B, H or 1, Nq, Nk): an additive float mask (eager style) keeps
    its 0 entries and drops its huge negative ones; any other bias is a ValueError, since the cores only drop keys."""
    if mask.dtype != torch.bool:
        floor = torch.finfo(mask.dtype).min / 2 if mask.is_floating_point() else -1
        drops_keys_only = (mask == 0) | (mask <= floor)
        if not reads_values(mask):
            _assert_on_device(drops_keys_only, _BIAS)
        elif not bool(drops_keys_only.all()):
            fail("attention_mask", "an additive bias mask", "a boolean or 0/-inf mask (symformer cores drop keys only)")
        mask = mask == 0
    if mask.ndim != 4 or mask.shape[-2:] != (nq, nk):
        fail("attention_mask", f"shape {tuple(mask.shape)}", f"(B, 1, {nq}, {nk})")
    return mask


def _not_causal_nor_padding(what: str = "") -> None:
    fail(
        "attention_mask",
        f"a mask that is neither causal nor key padding (sliding window, packed sequences, {what}...)",
        "causal and/or key-padding masks: the random-feature and summary cores cannot honour per-query masks",
    )


def mask_structure(mask: torch.Tensor | None, nq: int, nk: int, causal_default: bool):
    """(is_causal, keep) with keep a (B, 1, 1, Nk) boolean key mask or None, read off an HF attention mask.

    A mask equal to keep broadcast over queries is key padding; one equal to tril & keep (Nq == Nk) is causal
    with key padding; anything else (sliding window, packed sequences, per-query masks) is a ValueError. Without
    value reads (masks section above): (causal_default and Nq > 1, keep)."""
    if mask is None:  # sdpa_mask skips a pure causal mask (or a mask with nothing to hide)
        if causal_default and nq > 1 and nq != nk:
            fail(
                "attention_mask",
                f"None with {nq} queries and {nk} keys",
                "equal query and key lengths or single-token decoding for a causal symformer core",
            )
        return causal_default and nq > 1, None
    mask = _boolean_mask(mask, nq, nk)
    m = mask[:, :1]
    keep = m.any(dim=-2, keepdim=True)  # (B, 1, 1, Nk): keys some query may read
    if not reads_values(mask):
        causal = causal_default and nq > 1
        if nq > 1 or mask.shape[1] != 1:
            expected = torch.ones(nq, nk, dtype=torch.bool, device=m.device).tril() & keep if causal else keep
            _assert_on_device((mask == expected).all())
        return causal, keep
    if mask.shape[1] != 1 and not bool((mask == m).all()):
        fail("attention_mask", "a per-head mask", "one mask for all heads")
    if bool((m == keep).all()):
        return False, None if bool(keep.all()) else keep
    tril = torch.ones(nq, nk, dtype=torch.bool, device=m.device).tril()
    if nq == nk and bool((m == (tril & keep)).all()):
        return True, None if bool(keep.all()) else keep
    _not_causal_nor_padding()
    raise AssertionError


def split_state_mask(mask: torch.Tensor | None, nq: int, nk: int):
    """(keep_past, keep_new): boolean (B, 1, 1, Nk - Nq) and (B, 1, 1, Nq) key-padding masks (None when nothing is
    padded) of the last Nq queries of a causal sequence of Nk tokens, read off an HF mask that must equal
    causal-with-offset & key padding; anything else (sliding window, packed sequences) is a ValueError. Without
    value reads (masks section above) both masks are returned, never None."""
    if mask is None:
        return None, None
    mask = _boolean_mask(mask, nq, nk)
    m = mask[:, :1]
    keep = m.any(dim=-2, keepdim=True)
    past, new = keep[..., : nk - nq], keep[..., nk - nq :]
    if not reads_values(mask):
        if nq > 1 or mask.shape[1] != 1:
            expected = torch.ones(nq, nk, dtype=torch.bool, device=m.device).tril(nk - nq) & keep
            _assert_on_device((mask == expected).all())
        return past, new
    tril = torch.ones(nq, nk, dtype=torch.bool, device=m.device).tril(nk - nq)
    if not bool((m == (tril & keep)).all()) or not bool((mask == m).all()):
        _not_causal_nor_padding("per-head masks, ")
    return (None if bool(past.all()) else past), (None if bool(new.all()) else new)


def _with_state(core, state, query, k, v, keep, scaling):
    return core(query, k, v, attn_mask=keep, is_causal=True, scale=scaling, state=state)


def _state_attention(kind: str, module, core, layer, query, k, v, attention_mask, scaling):
    """The attention of new tokens with the layer's decoding state from a StateCache (hf.cache)."""
    if layer.module() is not module:
        fail(
            "cache",
            f"a symformer StateCache built for another model (its layer {getattr(module, 'layer_idx', '?')} "
            "is another module)",
            "the cache of this model: let generate() build it, or state_cache(model)",
        )
    if layer.kind != kind:
        fail(
            "cache",
            f"a StateCache built for attention={layer.kind!r}",
            f"one built for {kind!r} (the model's symformer attention now)",
        )
    if layer.state is None:
        layer.state, layer.core = core.init_state(), core
    elif layer.core is not core:
        fail(
            "cache",
            "a StateCache whose states were built by cores the model no longer has (configured again)",
            "a fresh cache after configure()",
        )
    nq = query.shape[-2]
    if k.shape[-2] != nq:
        fail("key", f"{k.shape[-2]} keys for {nq} queries", "one new key per new query with a StateCache")
    _, keep = split_state_mask(attention_mask, nq, layer.length + nq)
    out = _with_state(core, layer.state, query, k, v, keep, scaling)
    layer.consumed(nq)
    return out


def _cached_prefix_attention(core, query, k, v, attention_mask, scaling):
    """The last Nq rows of the causal attention over Nk > Nq cached keys (a DynamicCache): the keys before the
    queries build a fresh decoding state, then the queries step it. Exact; O(Nk) per call."""
    nq, nk = query.shape[-2], k.shape[-2]
    past_keep, keep = split_state_mask(attention_mask, nq, nk)
    state, p = core.init_state(), nk - nq
    _with_state(core, state, k[..., :p, :], k[..., :p, :], v[..., :p, :], past_keep, scaling)
    return _with_state(core, state, query, k[..., p:, :], v[..., p:, :], keep, scaling)


# ---------------------------------------------------------------- the cores on a layer
def _options(module: nn.Module) -> dict:
    return dict(getattr(module.config, "symformer_attention", None) or {})


def implementation(kind: str) -> str:
    """The attn_implementation of the decoding core registered as `kind`: "symformer_<kind>"."""
    return f"symformer_{kind}"


def _refresh_implementations() -> None:
    """IMPLEMENTATIONS from the decoding cores registered now (in place: importers hold the dict)."""
    IMPLEMENTATIONS.clear()
    IMPLEMENTATIONS.update({kind: implementation(kind) for kind in sorted(decoding_cores())})


def _make_core(kind: str, module: nn.Module, options: dict, layer: int | None = None) -> DecodingCore:
    """The core registered as `kind` in ATTENTION, built for the layer's head size (and its head count and width,
    where the core's constructor takes them), on the layer's device, dtype and mode."""
    opts = {k: v for k, v in options.items() if k != "attention"}
    cfg = module.config
    # every layer its own random structure (FAVOR+ features, PLASH hashes): a given seed s is made layer l's own,
    # derived_seed("layer<l>", s) (_rng.layer_kwargs); without one each core draws from torch's global generator
    opts = layer_kwargs(opts, int(getattr(module, "layer_idx", 0) or 0) if layer is None else layer)
    core = ATTENTION.build(
        kind, head_dim=head_dim(module), n_heads=cfg.num_attention_heads, d_model=cfg.hidden_size, **opts
    )
    w = out_proj(module).weight
    # the layer's mode: a core added to a model in eval mode must not run its training form (PLASH's mixer dropout)
    return core.to(device=w.device, dtype=w.dtype).train(module.training)


def _core(module: nn.Module, kind: str) -> nn.Module:
    core = getattr(module, "symformer_core", None)
    if core is None:
        cfg = module.config
        # a record read from config.json (the model's, or the text config's of a multimodal folder, whose sub-config
        # has no path: hf.reload._saving marks it), not made here by a lazily built core
        record = getattr(cfg, "symformer_attention", None)
        loaded = getattr(cfg, "_name_or_path", "") or (record or {}).get(SUB_CONFIG_MARK)
        if record and loaded and _LAZY_RECORDS.get(id(cfg)) is not cfg:
            fail(
                "model",
                f"a model loaded from {getattr(cfg, '_name_or_path', '') or 'a folder'!r} without its symformer {kind} "
                "cores (a plain "
                "from_pretrained: the cores' weights were dropped as unexpected keys)",
                "symformer.integrations.hf.from_pretrained(ModelClass or AutoModelForCausalLM, folder), which "
                "restores them",
                RuntimeError,
            )
        if not ATTENTION.get(kind).builds_lazily:  # trainable parameters the optimizer must see from the start
            label = kind.upper()
            fail(
                "model",
                f"a {implementation(kind)} model without {label} cores",
                f"symformer.integrations.hf.configure(model, attention={kind!r}, ...) before the forward "
                f"({label}'s parameters must exist before the optimizer is built)",
                RuntimeError,
            )
        options = _options(module)
        module.symformer_core = core = _make_core(kind, module, options)
        if options.get("attention") != kind:  # recorded as configure records it: hf.from_pretrained rebuilds them
            _LAZY_RECORDS[id(module.config)] = module.config
            module.config.symformer_attention = {
                "attention": kind,
                **{k: v for k, v in options.items() if k != "attention"},
            }
    if not isinstance(core, ATTENTION.get(kind)):
        fail(
            "attn_implementation",
            implementation(kind),
            f"the implementation of the configured core "
            f"{type(core).__name__} (call configure(model, attention=...) to switch)",
        )
    return core


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _fold_indices(attention_mask, indices: torch.Tensor, nk: int) -> torch.Tensor:
    """DSA's top-k key indices (B, Nq, topk) as a boolean (B, 1, Nq, Nk) mask, ANDed with the model's mask (HF
    folds them the same way for eager and sdpa; other implementations get them as `indices`)."""
    b, nq = indices.shape[:2]
    keep = torch.zeros(b, nq, nk, dtype=torch.bool, device=indices.device).scatter(-1, indices.long(), True)[:, None]
    if attention_mask is None:
        return keep & torch.ones(nq, nk, dtype=torch.bool, device=keep.device).tril(nk - nq)
    if attention_mask.dtype != torch.bool:
        attention_mask = attention_mask == 0
    return attention_mask & keep


def _symformer_attention(
    kind: str,
    module,
    query,
    key,
    value,
    attention_mask,
    scaling=None,
    dropout=0.0,
    sliding_window=None,
    softcap=None,
    s_aux=None,
    indices=None,
    **kwargs,
):
    """HF attention signature -> (output (B, N, H, Dv), None). Dropout on attention weights does not exist
    for these cores (FAVOR+ never forms them; PLASH has its own `dropout` option), so dropout > 0 is refused;
    so is a logit soft-cap (Gemma 2), a function of the logits that neither core approximates. DSA's `indices`
    (DeepSeek-V3.2, GLM-5) join the mask: a selection that drops earlier keys is a per-query mask, refused there."""
    if dropout:
        fail("attention_dropout", dropout, "0.0 (set the core's own options through configure)")
    if s_aux is not None:
        fail(
            "s_aux",
            "attention sinks (GPT-OSS)",
            f"None for symformer_{kind}: its kernel has no sink term in the softmax denominator",
        )
    if softcap is not None:
        fail(
            "attn_logit_softcapping",
            softcap,
            f"None for symformer_{kind}: its kernel approximates softmax(q k^T), not a soft-capped softmax",
        )
    core = _core(module, kind)
    layer = tagged_layer(key)
    groups = query.shape[1] // key.shape[1]  # grouped-query attention: each key head serves `groups` query heads
    k, v = _repeat_kv(key, groups), _repeat_kv(value, groups)
    nq, nk = query.shape[-2], k.shape[-2]
    if indices is not None:
        attention_mask = _fold_indices(attention_mask, indices, nk)
    if attention_mask is None and sliding_window is not None and nk > sliding_window:  # a window sdpa_mask skipped
        fail("sliding_window", sliding_window, f">= the {nk} keys: symformer cores attend to all earlier keys")
    dv = v.shape[-1]
    if core.value_dim_equals_head_dim and dv < query.shape[-1]:  # MLA's values are narrower than its queries and
        v = torch.nn.functional.pad(v, (0, query.shape[-1] - dv))  # keys: PLASH runs at one head size, so zero
        # columns, sliced off after
    causal_module = bool(getattr(module, "is_causal", True))
    doc = packed_documents(kwargs, attention_mask, query.shape[0], nq, nk, layer is not None, causal_module)
    if doc is not None:  # packed sequences: each document attends to itself (hf.packing)
        out = core(query, k, v, is_causal=True, scale=scaling, segment_ids=doc)
    elif layer is not None:
        if sliding_window is not None and layer.length + nq > sliding_window:  # the state holds every earlier key
            fail(
                "sliding_window",
                sliding_window,
                f">= the {layer.length + nq} tokens: symformer cores attend to all earlier keys",
            )
        out = _state_attention(kind, module, core, layer, query, k, v, attention_mask, scaling)
    elif bool(getattr(module, "is_causal", True)) and 0 < nq < nk:
        out = _cached_prefix_attention(core, query, k, v, attention_mask, scaling)
    else:
        # a query before its row's first kept key sees no key: both cores give it the output 0 (never read)
        causal, keep = mask_structure(attention_mask, nq, nk, bool(getattr(module, "is_causal", True)))
        out = core(query, k, v, attn_mask=keep, is_causal=causal, scale=scaling)
    return out[..., :dv].transpose(1, 2).contiguous(), None


def attention_function(kind: str):
    """The `AttentionInterface` entry "symformer_<kind>": the HF attention call run by the layer's `kind` core (one
    function per name, so registering again is idempotent)."""
    if kind not in _FUNCTIONS:

        def attention(module, query, key, value, attention_mask, **kwargs):
            return _symformer_attention(kind, module, query, key, value, attention_mask, **kwargs)

        attention.__name__ = attention.__qualname__ = implementation(kind)
        attention.__doc__ = f"`AttentionInterface` entry {implementation(kind)!r}."
        _FUNCTIONS[kind] = attention
    return _FUNCTIONS[kind]


def register() -> None:
    """Add "symformer_<name>" for every registered decoding core (IMPLEMENTATIONS, refilled here: "symformer_favor",
    "symformer_plash" and any core registered since) to transformers' AttentionInterface (and their mask builder to
    AttentionMaskInterface). Idempotent. ImportError naming the extra `hf` without transformers."""
    tf = require_transformers()
    register_positional()
    _refresh_implementations()
    for kind, name in IMPLEMENTATIONS.items():
        tf.AttentionInterface.register(name, attention_function(kind))
    try:
        from transformers.masking_utils import AttentionMaskInterface  # optional dependency: imported on use
    except ImportError:  # 4.48-4.52 build masks from _attn_implementation without a registry
        return
    for name in IMPLEMENTATIONS.values():
        AttentionMaskInterface.register(name, _sdpa_mask)


def _sdpa_mask(*args, **kwargs):
    """transformers' sdpa_mask, except that where value checks may not run (_validation.reads_values: on an
    accelerator by default) it builds the mask even when it would hide nothing: deciding to skip it reads the padding
    mask (`fast_all`, a host sync). A mask that hides nothing gives the cores' outputs without one (masks section)."""
    from transformers.masking_utils import sdpa_mask  # optional dependency: imported on use

    padding = kwargs.get("attention_mask")
    if isinstance(padding, torch.Tensor) and not reads_values(padding):
        kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def configure(model: nn.Module, attention: str = "favor", **options) -> nn.Module:
    """Run `attention` (the name of a registered decoding core: IMPLEMENTATIONS, "favor" | "plash" built in) in every
    attention layer of a Llama-family model, with `options` passed to the core (FavorAttention: n_features,
    orthogonal, chunk_size, seed, ...; PlashAttention: M, degrees, D_k, causal_block, ...). Records them in
    config.symformer_attention, builds one core per layer (layer l of a model configured with seed s draws its random
    features or hashes with derived_seed("layer<l>", s); without a seed, from torch's global generator) and switches
    the implementation."""
    register()
    check_choice("attention", attention, tuple(IMPLEMENTATIONS))
    layers = attention_modules(model)
    record = {"attention": attention, **options}
    # constructor errors surface before any edit; layer i's seed is derived here, once
    cores = [_make_core(attention, m, options, i) for i, m in enumerate(layers)]
    for m, core in zip(layers, cores, strict=True):
        m.symformer_core = core
    model.config.symformer_attention = record
    model.__class__ = restoring_class(type(model))  # from_pretrained rebuilds the cores before loading (hf.reload)
    install_generation_cache(model)  # generate() keeps decoding states (hf.cache), not keys and values
    install_forward_cache(model)  # and so does a forward with use_cache and no cache
    name = implementation(attention)
    tc = text_config(model)
    if tc is not model.config:  # multimodal: the language model only (its vision tower keeps its own attention)
        key = next((k for k in getattr(model.config, "sub_configs", {}) if getattr(model.config, k, None) is tc), None)
        if key is None:
            fail("model", type(model).__name__, "a multimodal model whose config lists its text config in sub_configs")
        model.set_attn_implementation({key: name})
    elif hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # 4.48-4.5x
        model.config._attn_implementation = name
    return model


# ---------------------------------------------------------------- saving and reloading the cores (hf.reload)
def _settle_requested(config) -> None:
    """Register the symformer implementations before transformers checks the config's, and settle an
    attn_implementation passed to from_pretrained against the recorded attention: the recorded one (or none) is
    restored; another symformer one is a ValueError; a transformers one ("sdpa", "eager", ...) wins and the record
    is dropped, so the model runs, and saves, as a plain model (the cores' weights are then unexpected keys)."""
    spec = config.symformer_attention
    register()
    asked = getattr(config, "_attn_implementation_internal", None)
    recorded = IMPLEMENTATIONS.get(spec.get("attention", "favor"))  # configure's default
    if not isinstance(asked, str) or asked == recorded:
        return
    if asked in IMPLEMENTATIONS.values():
        fail(
            "attn_implementation",
            asked,
            f"{recorded!r}, the attention this model was saved with (or a transformers "
            "implementation such as 'sdpa' to load it without its symformer cores)",
        )
    config.symformer_attention = None


def _saved_implementation(model: nn.Module, spec: dict) -> str:
    """The implementation of the recorded core (configure's default: favor)."""
    return implementation(spec.get("attention", "favor"))


_refresh_implementations()
register_restorer("symformer_attention", Restorer(configure, _settle_requested, _saved_implementation))

__all__ = ["IMPLEMENTATIONS", "attention_function", "configure", "implementation", "mask_structure", "register"]
