"""symformer rotary parts in the attention layers of Llama-family Hugging Face models.

`patch_positional(model, "string")` gives every attention layer its own symformer part (`self_attn.rotary`,
a `RotaryPositional`: forward(q, k, positions) -> (q, k), property `scale`) and makes the layer apply it to
its queries and keys instead of the model's cos/sin table. The model's rotary table stays in place (other
code may read it) but is not applied. The part's parameters are submodules of the model, so they
train and go through `state_dict`, `save_pretrained` and `from_pretrained`:

* the patch is recorded in `config.symformer_positional` (saved in config.json);
* the model's class becomes a subclass (same name prefixed `Symformer`) whose constructor re-applies the
  patch recorded in its config (hf.reload, shared with the attention cores), so `type(model).from_pretrained(folder)`
  or `symformer.integrations.hf.from_pretrained(LlamaForCausalLM, folder)` rebuilds the patched model and loads
  the part's parameters with the rest.

The parts are those of the rotary contract (positional.base.RotaryPositional), never names: every registered rotary
part whose class implements `from_frequencies` (POSITIONALS), built by
`cls.from_frequencies(inv_freq, pairing, base=..., **options)`, in the model's pairing where the part has pairs
(`pairings`), and refused where the model rotates part of each head unless `partial_head`. So every part starts from
the model's own rotary frequencies (its `inv_freq`, i.e. `rope_theta` and the rope scaling type; per layer type where
the model keeps one table per type, as Gemma 3's sliding and full layers), in the model's "half" pairing: "rope" is
exactly the model's RoPE, "string" with its Cayley factor P = I too (T3.1: cayley(0) = I), and "espr" (d_act =
head_dim) starts from the same commuting generators (T2.3 with U = I), so an ESPR-patched model is the unpatched one
until training moves it.

Precision: a part is never cast to a 16-bit model dtype (a float64 model gets a float64 part). Its parameters are a
float32 master (positional.base.Float32Master: built in float32 when the model is built in 16 bits, kept float32 by
`.to(torch.bfloat16)` / `.half()`, loaded in float32 by from_pretrained(dtype=...), whose loader keeps a
parameter's own dtype), it rotates 16-bit queries and keys in float32 and rounds them once, and the positions reach
it as int64 (`token_positions`), so a bfloat16 / float16 model is as accurate as the native one at any position,
with or without the KV cache. A model cast to 16 bits before patching has a rounded `inv_freq`; the part then takes
HF's float32 recomputation.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from symformer._rng import layer_kwargs
from symformer._validation import check_choice, fail
from symformer.integrations.hf._common import (
    applies_rope,
    attention_modules,
    call_attention,
    check_layer,
    flat_qk_norm,
    fused_qkv,
    head_dim,
    is_mla,
    llama4_query_scale,
    model_family,
    n_kv_heads,
    out_proj,
    partial_rotary_factor,
    post_qk_norms,
    qk_norms,
    record_for,
    require_transformers,
    rope_pairing,
    rope_parameters,
    rope_theta,
    rotary_dim,
    text_config,
    token_positions,
)
from symformer.integrations.hf.mla import mla_attention_forward
from symformer.integrations.hf.reload import (
    SAVED_POSITIONAL,
    Restorer,
    register_positional,
    register_restorer,
    restoring_class,
)
from symformer.positional import PartialRotary
from symformer.positional import rotary_parts as registered_rotary_parts
from symformer.positional.base import RotaryPositional
from symformer.positional.rope import rope_frequencies
from symformer.registry import STANDARD_KEYS

_ATTN_CLASSES: dict[type, type] = {}


# ---------------------------------------------------------------- the parts it takes: the rotary contract
def _starts_from_frequencies(cls: type) -> bool:
    """Whether a rotary part says how it starts from a model's frequencies (its class implements from_frequencies)."""
    return getattr(cls.from_frequencies, "__func__", None) is not RotaryPositional.from_frequencies.__func__


def positional_parts() -> dict[str, type]:
    """name -> class of every registered rotary part (positional.rotary_parts) that implements from_frequencies, in
    registration order: the parts patch_positional takes, a part registered later included."""
    return {name: cls for name, cls in registered_rotary_parts().items() if _starts_from_frequencies(cls)}


class _PartNames(Sequence):
    """A live, read-only view of positional_parts()' names (a part registered later is in it)."""

    def __getitem__(self, index):
        return tuple(positional_parts())[index]

    def __len__(self) -> int:
        return len(positional_parts())

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(positional_parts()))

    def __contains__(self, name) -> bool:
        return name in positional_parts()

    def __repr__(self) -> str:
        return f"POSITIONALS{tuple(self)}"


#: the names patch_positional takes (positional_parts), a live view
POSITIONALS = _PartNames()


# ---------------------------------------------------------------- the patched attention forward
def _attention_forward(
    self,
    hidden_states,
    position_embeddings=None,
    attention_mask=None,
    past_key_values=None,
    cache_position=None,
    position_ids=None,
    cache=None,
    **kwargs,
):
    """The family's attention forward with `self.rotary` in place of apply_rotary_pos_emb, reading its record for what
    differs (q/k norms after the rotation, the sliding window, soft-cap and sinks it hands on, the output gate). The
    KV cache arrives as `cache` (transformers >= 5.24), `past_key_values` (4.5x-5.23), `past_key_value` (4.4x) or
    `layer_past` (GPT-NeoX)."""
    record = record_for(self)
    input_shape = hidden_states.shape[:-1]
    q, k, v, gate = _project(self, hidden_states)
    old = kwargs.pop("layer_past", kwargs.pop("past_key_value", past_key_values))
    cache = cache if cache is not None else old
    positions = token_positions(position_ids, cache_position, cache, q)
    q, k = self.rotary(q, k, positions)  # RotaryPositional: (B, H, N, Dh) and (B, H_kv, N, Dh)
    q = q * llama4_query_scale(self.config, positions, q.dtype)
    post = post_qk_norms(self)  # Hunyuan's per-head RMSNorms, NanoChat's parameter-free ones: after the rotation
    if post is not None:
        q, k = post[0](q), post[1](k)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx, {"cache_position": cache_position})
    scale = _scale(self)
    if record.sliding_window_kwarg:  # Mistral / Qwen2 / Qwen3 / Gemma 2 / OLMo 3 pass their sliding window on
        window = getattr(self, "sliding_window", getattr(self.config, "sliding_window", None))
        kwargs.setdefault("sliding_window", window)
    if record.softcap and self.attn_logit_softcapping is not None:  # Gemma 2: cap * tanh(logits / cap)
        kwargs.setdefault("softcap", self.attn_logit_softcapping)
    if record.sinks:  # GPT-OSS: one sink logit per head (its eager kernel reads self.sinks)
        kwargs.setdefault("s_aux", self.sinks)
    out, weights = call_attention(self, q, k, v, attention_mask, scale, position_ids, kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    return out_proj(self)(out if gate is None else out * torch.sigmoid(gate)), weights  # Qwen3-Next: output gate


def _project(self, hidden_states):
    """(B, H, N, Dh) queries and (B, H_kv, N, Dh) keys and values as the family computes them before the rotation:
    one fused projection (Phi-3's qkv_proj, rows [q; k; v]), q/k RMSNorm over all heads (OLMo 2 / 3, OLMoE) or per
    head (Qwen3, Gemma 3), OLMoE's optional clip_qkv; and the output gate (B, N, H Dh) (record.output_gate), else
    None."""
    dh = head_dim(self)
    hidden_shape = (*hidden_states.shape[:-1], -1, dh)
    fused = fused_qkv(self)
    if fused is not None and fused[1] == "heads":  # GPT-NeoX: [q_h; k_h; v_h] per head
        q, k, v = fused[0](hidden_states).view(*hidden_states.shape[:-1], -1, 3 * dh).chunk(3, dim=-1)
    elif fused is not None:
        nq, nkv = self.config.num_attention_heads * dh, n_kv_heads(self.config) * dh
        q, k, v = fused[0](hidden_states).split([nq, nkv, nkv], dim=-1)
    else:
        q, k, v = self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)
    gate, gated = None, record_for(self).output_gate
    if gated == "gate_proj":  # AFMoE: a gate projection of its own
        gate = self.gate_proj(hidden_states)
    elif gated == "q_proj":  # Qwen3-Next: rows [q_h; g_h] per head, split as HF does
        q, gate = q.view(*hidden_states.shape[:-1], -1, 2 * dh).chunk(2, dim=-1)
        q, gate = q.reshape(*hidden_states.shape[:-1], -1), gate.reshape(*hidden_states.shape[:-1], -1)
    flat, norms = flat_qk_norm(self), qk_norms(self)
    if flat:
        q, k = norms[0](q), norms[1](k)
    clip = getattr(self.config, "clip_qkv", None)
    if clip is not None:
        q, k, v = (t.clamp(min=-clip, max=clip) for t in (q, k, v))
    q, k, v = q.view(hidden_shape), k.view(hidden_shape), v.view(hidden_shape)
    if norms is not None and not flat:
        q, k = norms[0](q), norms[1](k)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), gate


def _scale(attn) -> float:
    """The logit scale: the model's own, except ESPR's 1/sqrt(d_act) (T4.4) in place of 1/sqrt(head_dim), taken
    relative to the model's scale where that is not 1/sqrt(head_dim) (Gemma 2's query_pre_attn_scalar); times the
    square of the magnitude YaRN puts on cos and sin (attention_scaling m: HF's q and k both carry m)."""
    magnitude = getattr(attn, "rotary_magnitude", 1.0) ** 2
    part = attn.rotary.scale
    if part is None:
        return attn.scaling * magnitude
    ratio = attn.scaling * math.sqrt(head_dim(attn))
    return (part if math.isclose(ratio, 1.0, rel_tol=1e-12) else part * ratio) * magnitude


def _patched_attention_class(cls: type, mla: bool = False) -> type:
    if cls not in _ATTN_CLASSES:
        forward = mla_attention_forward if mla else _attention_forward
        _ATTN_CLASSES[cls] = type("Symformer" + cls.__name__, (cls,), {"forward": forward, "__module__": __name__})
    return _ATTN_CLASSES[cls]


# ---------------------------------------------------------------- building the parts
def _rope_table(model: nn.Module, layer_type: str | None = None) -> tuple[torch.Tensor | None, float]:
    """(inv_freq, attention_scaling) of the model's rotary embedding (None if it has none we can read); with a
    layer type, that type's table where the model keeps one per type (Gemma 3: `{type}_inv_freq`). A table on the
    meta device (from_pretrained builds the model there first) has no values, but its attention_scaling is a plain
    float: YaRN's magnitude must survive a reload (the part's own frequencies come back with its weights)."""
    prefix = f"{layer_type}_" if layer_type is not None else ""
    scaling = 1.0
    for m in model.modules():
        inv = getattr(m, f"{prefix}inv_freq", None)
        if isinstance(inv, torch.Tensor):
            scaling = float(getattr(m, f"{prefix}attention_scaling", 1.0))
            if inv.device.type != "meta":
                if inv.dtype in (torch.float16, torch.bfloat16):  # a model cast to 16 bits: rounded frequencies
                    inv = _float32_inv_freq(m, inv, layer_type)
                return inv.detach().to(torch.float64).cpu(), scaling
    return None, scaling


def _float32_inv_freq(rotary: nn.Module, inv: torch.Tensor, layer_type: str | None) -> torch.Tensor:
    """The float32 table HF's rotary embedding computes at construction (its rope init function), in place of a
    16-bit `inv_freq` left by `.to(torch.bfloat16)` (transformers issue 29496); the rounded table with a warning
    where that function cannot be found."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # optional dependency: imported on use

    kind = getattr(rotary, "rope_type", "default")
    kind = kind.get(layer_type, "default") if isinstance(kind, dict) else kind
    fn = ROPE_INIT_FUNCTIONS.get(kind) or getattr(rotary, "compute_default_rope_parameters", None)
    config = getattr(rotary, "config", None)
    try:
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        fresh = fn(config, device="cpu", **kwargs)[0] if fn is not None and config is not None else None
    except (TypeError, KeyError, AttributeError, ValueError):
        fresh = None
    if fresh is None or fresh.shape != inv.shape:
        warnings.warn(
            f"symformer: the model's rotary inv_freq is {inv.dtype} and could not be recomputed in float32; "
            "the patched part starts from the rounded frequencies",
            RuntimeWarning,
            stacklevel=4,
        )
        return inv
    return fresh


def _layer_type(model: nn.Module, attn: nn.Module) -> str | None:
    """The attention layer's type where the model's rotary tables are kept per type, else None."""
    lt = getattr(attn, "layer_type", None) or getattr(attn, "attention_type", None)  # Gemma 3 / OLMo 3
    cfg = text_config(model)
    typed = lt is not None and rope_parameters(cfg, lt) is not rope_parameters(cfg)
    return lt if typed else None


def _check_part_options(name: str, cls: type, options: dict) -> None:
    """TypeError naming the options the part's constructor does not take (from_frequencies hands them on; it sets
    head_dim and coord_dim itself), worded as POSITIONAL.build words it."""
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(k for k in options if k not in params or k in ("head_dim", "coord_dim"))
    if unknown:
        accepted = [
            k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL and k not in STANDARD_KEYS
        ]
        raise TypeError(
            f"positional {name!r}: got unknown option(s) {', '.join(unknown)}, "
            f"expected some of {', '.join(accepted) or '(none)'}"
        )


def _build_part(
    positional: str,
    attn: nn.Module,
    config,
    inv_freq,
    options: dict,
    layer_type: str | None = None,
    part_dim: int | None = None,
) -> nn.Module:
    """The part on the first part_dim coordinates (default: the whole head), wrapped in PartialRotary when that
    is less than the head (Phi-4-mini), built by its class's from_frequencies (the rotary contract): in the model's
    pairing where the part has pairs (`pairings`; an explicit `pairing` option wins), with `base` the option or the
    model's rope_theta, starting from the model's own frequencies where they apply (a readable table, no `base`
    option, the model's pairing), else from the RoPE frequencies of `base`, which the part's constructor starts from."""
    cls = positional_parts()[positional]
    full = head_dim(attn)
    dim = full if part_dim is None else part_dim
    if dim % 2:
        fail("head_dim", dim, "an even number of rotated coordinates (a rotary part starts as RoPE, on pairs)")
    opts = dict(options)
    native = rope_pairing(config)  # HF's rotate-half layout (GLM: interleaved)
    pairing = opts.pop("pairing", native) if cls.pairings else None
    if pairing == native and "pairing" not in options and native not in cls.pairings:
        fail("positional", positional, f"a rotary part with the model's {native!r} pairing (it has {cls.pairings})")
    opts.setdefault("base", rope_theta(config, layer_type))
    _check_part_options(positional, cls, opts)
    own = inv_freq is not None and "base" not in options and inv_freq.numel() == dim // 2 and pairing in (None, native)
    freqs = inv_freq if own else rope_frequencies(dim, 1, opts["base"])[:, 0]
    part = cls.from_frequencies(freqs, **({} if pairing is None else {"pairing": pairing}), **opts)
    w = out_proj(attn).weight
    # never to a 16-bit weight dtype: the float32 master (module docstring); a float64 model gets a float64 part
    part = part.to(device=w.device, dtype=torch.float64 if w.dtype == torch.float64 else None)
    if dim == full or is_mla(attn):  # MLA: the part rotates the rope blocks themselves (hf.mla)
        return part
    return PartialRotary(part, full).to(device=w.device)


def _or_list(names) -> str:
    """'a, b or c'."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _part_for(
    positional: str, model: nn.Module, attn: nn.Module, options: dict, tables: dict
) -> tuple[nn.Module, float]:
    """(part, magnitude) for one attention layer, from the rotary table of its layer type (one table for most
    models; `tables` keeps each type's, read once per model rather than once per layer). magnitude: the factor
    on HF's cos and sin (YaRN's attention_scaling; 1 for the others), kept as a logit scale (`_scale`)."""
    lt = _layer_type(model, attn)
    if lt not in tables:
        tables[lt] = _rope_table(model, lt)
    inv_freq, attn_scale = tables[lt]
    cfg = text_config(model)  # a multimodal model's language model
    if inv_freq is not None and record_for(cfg).negated_rotation:  # NanoChat turns by -theta p
        inv_freq = -inv_freq
    dim = rotary_dim(attn)
    if inv_freq is not None and 2 * inv_freq.numel() != dim:
        fail(
            "config.rope_parameters",
            f"a rotary table of {inv_freq.numel()} frequencies",
            f"{dim // 2} (head_dim={head_dim(attn)}, of which the table rotates {dim} coordinates)",
        )
    cls = positional_parts()[positional]
    if dim < head_dim(attn) and not cls.partial_head:  # PartialRotary, MLA: no part with its own scale
        able = [name for name, c in positional_parts().items() if c.partial_head]
        fail(
            "positional",
            positional,
            f"{_or_list(able)} where the model rotates part of each head ({dim} of {head_dim(attn)} coordinates): "
            f"{cls.__name__}'s logit scale is stated for a whole projected head (RotaryPositional.partial_head)",
        )
    rope_type = str(rope_parameters(cfg, lt).get("rope_type", "default"))
    if rope_type.startswith("dynamic") or rope_type == "longrope":
        fail(
            "config.rope_parameters",
            f"rope_type={rope_type!r} (attention_scaling={attn_scale})",
            "a rope type whose table does not change with the sequence length (default, linear, llama3, yarn)",
        )
    if attn_scale != 1.0 and dim < head_dim(attn) and not is_mla(attn):  # HF scales the rotated coordinates only:
        # not a logit scale (MLA's forward scales its rotated blocks itself: hf.mla)
        fail(
            "config.rope_parameters",
            f"rope_type={rope_type!r} (attention_scaling={attn_scale}) with "
            f"partial_rotary_factor={partial_rotary_factor(cfg)}",
            "a magnitude factor of 1 where the model rotates part of each head",
        )
    return _build_part(positional, attn, cfg, inv_freq, options, lt, dim), attn_scale


def _check_options(options: dict) -> None:
    try:
        json.dumps(options)
    except TypeError:
        fail("options", options, "JSON-serialisable values (they are saved in config.json)", TypeError)


def patch_positional(model: nn.Module, positional: str = "rope", **options) -> nn.Module:
    """Replace the rotary embedding of every attention layer of a model of a registered family (hf.families) by a
    symformer part (one of POSITIONALS: "rope" | "string" | "circulant_string" | "espr", or any rotary part registered
    in symformer.registry.POSITIONAL that implements from_frequencies; `options` go to the part's constructor, e.g.
    init_scale=0.1 for STRING, d_act=32 for ESPR). Grouped-query attention works (the part rotates the H query
    heads and the H_kv key heads alike). Returns the model (patched in place).

    YaRN's table (cos and sin times attention_scaling m) is its rotation with q and k scaled by m: the part does
    the rotation and the logit scale takes m^2. Multi-head latent attention (DeepSeek-V3: hf.mla) gets its part on
    the rope block of each head, and m scales those blocks only, as HF's table does.

    ValueError: an unsupported model family, a model patched already, a head_dim the part cannot take (odd
    head_dim for RoPE-like parts, d_act > head_dim), or a rope type whose table changes with the sequence length
    (dynamic, longrope)."""
    require_transformers()
    model_family(model)
    check_choice("positional", positional, POSITIONALS)
    _check_options(options)
    config, tc = model.config, text_config(model)  # the patch is recorded in the model's own config
    layers = attention_modules(model)
    if any(hasattr(a, "rotary") for a in layers):  # the layers, not the config: HF models share config objects
        fail(
            "model",
            f"a model already patched with {getattr(config, 'symformer_positional', None)}",
            "an unpatched model (patch_positional replaces the native rotary embedding once)",
        )
    kv = n_kv_heads(tc)
    if tc.num_attention_heads % kv:
        fail("config.num_key_value_heads", kv, f"a divisor of num_attention_heads={tc.num_attention_heads}")
    for attn in layers:
        check_layer(attn)
    layers = [a for a in layers if applies_rope(a)]  # NoPE layers (SmolLM3, EXAONE 4 global) stay as they are
    if not layers:
        fail("model", "a model whose attention layers apply no rotary embedding", "a model with rotary layers")
    tables: dict = {}
    # a given seed is made each layer's own (_rng.layer_kwargs), so the layers do not share one initial draw
    parts = [
        _part_for(positional, model, attn, layer_kwargs(options, i), tables) for i, attn in enumerate(layers)
    ]  # raises before editing
    for attn, (part, magnitude) in zip(layers, parts, strict=True):
        attn.rotary = part
        if magnitude != 1.0:
            attn.rotary_magnitude = magnitude
        attn.__class__ = _patched_attention_class(type(attn), is_mla(attn))
    config.symformer_positional = {"positional": positional, **options}
    model.__class__ = restoring_class(type(model))
    register_positional()  # the name its save records (hf.reload.SAVED_POSITIONAL)
    return model


def rotary_parts(model: nn.Module) -> list[nn.Module]:
    """The patched parts, one per rotary attention layer (NoPE layers have none; empty for an unpatched model)."""
    return [a.rotary for a in attention_modules(model) if hasattr(a, "rotary")]


# ---------------------------------------------------------------- saving and reloading the patch (hf.reload)
def _settle_saved(config) -> None:
    """A folder saved with a positional patch and no cores names SAVED_POSITIONAL's implementation (in its config or
    its text config): the restored model runs transformers' own, which its save names again."""
    register_positional()
    bases = {name: base for base, name in SAVED_POSITIONAL.items()}
    for c in (config, *(getattr(config, k, None) for k in getattr(config, "sub_configs", {}))):
        asked = getattr(c, "_attn_implementation_internal", None)
        if isinstance(asked, str) and asked in bases:
            c._attn_implementation_internal = bases[asked]


def _saved_implementation(model: nn.Module, spec: dict) -> str:
    """SAVED_POSITIONAL's name for the transformers implementation the language model runs (sdpa for another)."""
    base = getattr(text_config(model), "_attn_implementation", None)
    return SAVED_POSITIONAL.get(base, SAVED_POSITIONAL["sdpa"])


register_restorer("symformer_positional", Restorer(patch_positional, _settle_saved, _saved_implementation))

__all__ = ["POSITIONALS", "patch_positional", "positional_parts", "rotary_parts"]
