"""Float64 checks on HF models that really run in float64.

HF's Llama-family models compute two things in float32 whatever the model dtype: the rotary cos/sin table
(LlamaRotaryEmbedding casts position_ids and inv_freq to float32) and every RMSNorm (it upcasts to float32 and
casts back, Gemma's (1 + w) norm too, so a float64 model is rounded to float32 at each norm). A float64 parity
or invariance check on an untouched model therefore reads 0 or ~1e-7, by luck of the float32 rounding, never the
float64 error. Cohere's LayerNorms do the same, and the interleaved families Cohere, Cohere 2 and ERNIE 4.5 also
rotate q and k in float32 inside their apply_rotary_pos_emb (their records' rotary_dtype), DeepSeek-V2 its complex
pairs with a complex64 table (table "complex"); Ministral 3 scales its
queries by a factor computed in float32, and the eager attention of every family but GPT-OSS takes its softmax
in float32 (Gemma 2 and VaultGemma run eager by default, so their attention probabilities are float32 numbers, and a
padded float64 batch turns to NaN there, float64's mask minimum being -inf in float32).
`exact_float64(model)` evaluates the same formulas in the input dtype. In float32 the norms and the rotation are
HF's to the bit; the rotary table is computed in float64 and rounded, so it moves float32 logits by rounding.
Left in float32, as the MoE routers are: DSA's indexer (DeepSeek-V3.2, GLM-5), whose scores only choose each
query's top-k keys (a discrete choice, HF's, with its weights_proj kept in float32); the attention over the chosen
keys runs in the input dtype."""

from __future__ import annotations

import inspect
import sys
import types

import torch
from torch import nn

from symformer.integrations.hf._common import attention_modules, family_of, norm_offset, position_query_scale
from symformer.integrations.hf.families import FamilyRecord, family_record, norm_kind

_NORMS: dict[type, type] = {}
_ATTENTIONS: dict[type, type] = {}


def _cos_sin(x, position_ids, inv_freq, layout: str = "cat", magnitude: float = 1.0):
    """HF's cos/sin table evaluated in float64: freqs = position * inv_freq laid out as cat(freqs, freqs) (Llama),
    each repeated in place ("interleaved": Cohere) or once ("half": GPT-OSS), times the rope type's
    attention_scaling (YaRN; 1 for the others); "complex": DeepSeek-V2's polar(1, freqs) times that scaling, complex
    of x's precision."""
    f = position_ids[..., None].to(torch.float64) * inv_freq
    if layout == "complex":
        return (torch.polar(torch.ones_like(f), f) * magnitude).to(
            torch.complex128 if x.dtype == torch.float64 else torch.complex64
        )
    emb = {
        "cat": lambda: torch.cat((f, f), dim=-1),
        "interleaved": lambda: f.repeat_interleave(2, dim=-1),
        "half": lambda: f,
    }[layout]()
    return (emb.cos() * magnitude).to(x.dtype), (emb.sin() * magnitude).to(x.dtype)


class Float64Table(nn.Module):
    """HF's rotary table evaluated in float64 (`_cos_sin`)."""

    def __init__(self, inv_freq: torch.Tensor, layout: str = "cat", attention_scaling: float = 1.0):
        super().__init__()
        self.layout, self.attention_scaling = layout, float(attention_scaling)
        self.register_buffer("inv_freq", inv_freq.detach().to(torch.float64), persistent=False)

    def forward(self, x, position_ids):
        return _cos_sin(x, position_ids, self.inv_freq, self.layout, self.attention_scaling)


class Float64MropeTable(Float64Table):
    """Qwen3.5's multimodal table in float64: three position streams (T, H, W; text expands one to all three),
    frequency u read from H for u = 1 mod 3 and from W for u = 2 mod 3 within 3 x its mrope_section, else from T
    (HF's recomposition_frequencies), laid out as cat(freqs, freqs)."""

    def __init__(self, inv_freq: torch.Tensor, section, attention_scaling: float = 1.0):
        super().__init__(inv_freq, "cat", attention_scaling)
        self.section = [int(s) for s in section]

    def forward(self, x, position_ids):
        pos = position_ids.expand(3, -1, -1) if position_ids.ndim == 2 else position_ids
        f = pos[..., None].to(torch.float64) * self.inv_freq
        thw = f[0].clone()
        for stream in (1, 2):
            idx = slice(stream, self.section[stream] * 3, 3)
            thw[..., idx] = f[stream, ..., idx]
        emb = torch.cat((thw, thw), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


class Float64TypedTable(nn.Module):
    """Float64Table per layer type (Gemma 3's rotary embedding keeps `{type}_inv_freq` and is called with the type);
    the buffers and scalings keep HF's names, so that patch_positional still reads each type's table."""

    def __init__(self, inv_freqs: dict[str, torch.Tensor], scalings: dict[str, float]):
        super().__init__()
        for k, v in inv_freqs.items():
            self.register_buffer(f"{k}_inv_freq", v.detach().to(torch.float64), persistent=False)
            setattr(self, f"{k}_attention_scaling", float(scalings[k]))

    def forward(self, x, position_ids, layer_type=None):
        return _cos_sin(
            x,
            position_ids,
            getattr(self, f"{layer_type}_inv_freq"),
            "cat",
            getattr(self, f"{layer_type}_attention_scaling"),
        )


def _float64_table(mod: nn.Module, record: FamilyRecord | None) -> nn.Module | None:
    """The float64 replacement of an HF rotary embedding in the record's table layout, or None for one we cannot
    read (Qwen3.5's "mrope": its text table; another rotary module of the model, a vision tower's, is read as cat)."""
    table = "cat" if record is None else record.table
    if isinstance(getattr(mod, "inv_freq", None), torch.Tensor) and table == "mrope" and hasattr(mod, "mrope_section"):
        return Float64MropeTable(mod.inv_freq, mod.mrope_section, getattr(mod, "attention_scaling", 1.0))
    if isinstance(getattr(mod, "inv_freq", None), torch.Tensor):
        layout = "cat" if table == "mrope" else table
        return Float64Table(mod.inv_freq, layout, getattr(mod, "attention_scaling", 1.0))
    types = getattr(mod, "layer_types", None)
    if types and all(isinstance(getattr(mod, f"{t}_inv_freq", None), torch.Tensor) for t in types):
        return Float64TypedTable(
            {t: getattr(mod, f"{t}_inv_freq") for t in types},
            {t: getattr(mod, f"{t}_attention_scaling", 1.0) for t in types},
        )
    return None


def _norm_forward(self, hidden_states):
    """RMSNorm (Zhang & Sennrich 2019) in the input dtype: w * x / sqrt(mean(x^2) + eps)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon))


def _gemma_norm_forward(self, hidden_states):
    """Gemma's RMSNorm in the input dtype: (1 + w) * x / sqrt(mean(x^2) + eps) (its weight starts at 0)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return (1.0 + self.weight) * (hidden_states * torch.rsqrt(var + self.eps))


def _centered_norm_forward(self, hidden_states):
    """Cohere's LayerNorm (no bias; weight (d,), or (H, Dh) on q and k) in the input dtype: w * (x - mean) / std."""
    centered = hidden_states - hidden_states.mean(-1, keepdim=True)
    var = centered.pow(2).mean(-1, keepdim=True)
    return self.weight * (centered * torch.rsqrt(var + self.variance_epsilon))


def _weightless_norm_forward(self, hidden_states):
    """NanoChat's parameter-free RMSNorm in the input dtype (HF's computes it in float32): x / sqrt(mean(x^2) + eps)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return hidden_states * torch.rsqrt(var + self.eps)


def _gated_norm_forward(self, hidden_states, gate):
    """Qwen3-Next's and Qwen3.5's gated RMSNorm (their Gated DeltaNet layers) in the input dtype:
    w * x / sqrt(mean(x^2) + eps) * silu(gate)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon)) * nn.functional.silu(gate)


def _layer_norm_forward(self, hidden_states):
    """OLMo's parameter-free LayerNorm in the input dtype (HF's computes it in float32)."""
    return nn.functional.layer_norm(hidden_states, self.normalized_shape, None, None, eps=1e-5)


def _exact_forward(mod: nn.Module):
    """The input-dtype forward for one of HF's float32-computing norms, or None for any other module: the formula a
    record names for the norm's class (FamilyRecord.norms), else HF's plain RMSNorm (weight * x_hat, or parameter-free)
    for a class named *RMSNorm."""
    name = type(mod).__name__  # HF's class only: a norm replaced already (a subclass) is left alone
    kind = norm_kind(name)
    if kind == "layer_norm":
        return _layer_norm_forward
    if kind == "centered" and hasattr(mod, "variance_epsilon"):
        return _centered_norm_forward
    if kind == "gated_rms":
        return _gated_norm_forward
    if name.endswith("RMSNorm"):
        if getattr(mod, "weight", None) is None and hasattr(mod, "eps"):
            return _weightless_norm_forward
        if hasattr(mod, "variance_epsilon"):
            return _norm_forward
        return _gemma_norm_forward if norm_offset(mod) == 1.0 else None
    return None


def _input_dtype_rotary(module, record: FamilyRecord):
    """The module's apply_rotary_pos_emb without the float32 casts: q cos + rotate_half(q) sin in the input dtype,
    with the module's own rotate_half (interleaved pairs) and table layout (Cohere: interleaved; ERNIE 4.5: cat,
    its first half repeated in place)."""
    rotate_half = module.rotate_half
    from_cat = record.table != "interleaved"

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        if from_cat:
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    return apply_rotary_pos_emb


def _input_dtype_complex_rotary(xq, xk, freqs_cis):
    """DeepSeek-V2's apply_rotary_emb without its float32 casts: the pairs (2u, 2u + 1) as complex numbers of the
    input's precision times freqs_cis, laid back out as pairs."""

    def rotate(x):
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))  # a view where HF has one: its rounding
        return torch.view_as_real(z * freqs_cis.unsqueeze(1).to(z.dtype)).flatten(3)

    return rotate(xq), rotate(xk)


def _position_scale_in_float64(positions_ids, beta, max_position_embeddings):
    """Ministral 3's get_llama_4_attn_scale, 1 + beta log(1 + floor(position / original_max)), in float64 (HF's
    divides the integer positions into float32)."""
    return position_query_scale(positions_ids.to(torch.float64), beta, max_position_embeddings)[:, None, :, None]


def input_dtype_eager(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """HF's eager attention (Llama's; Gemma 2's soft-cap; GPT-NeoX's without key heads to repeat) with the softmax
    in the input dtype: softmax(cap(q k^T scaling) + mask) v, cap(s) = softcap tanh(s / softcap). HF's own on
    float32 inputs to the bit (test)."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = (t.repeat_interleave(groups, dim=1) if groups > 1 else t for t in (key, value))
    weights = torch.matmul(query, key.transpose(2, 3)) * (module.head_dim**-0.5 if scaling is None else scaling)
    if softcap is not None:
        weights = torch.tanh(weights / softcap) * softcap
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.dropout(torch.softmax(weights, dim=-1), p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _replacements(module, record: FamilyRecord) -> dict:
    """The helpers of the family's attention forward that compute in float32, by name, with input-dtype versions."""
    out = {}
    if record.softmax_dtype == "float32" and hasattr(module, "eager_attention_forward"):
        out["eager_attention_forward"] = input_dtype_eager
    if record.rotary_dtype == "float32":
        out["apply_rotary_pos_emb"] = _input_dtype_rotary(module, record)
    if record.table == "complex":
        out["apply_rotary_emb"] = _input_dtype_complex_rotary
    if hasattr(module, "get_llama_4_attn_scale"):
        out["get_llama_4_attn_scale"] = _position_scale_in_float64
    return out


def _input_dtype_attention(cls: type, record: FamilyRecord) -> type | None:
    """HF's own attention class with its forward's code run against the module's globals, except the helpers that
    compute in float32 (`_replacements`): the reference stays HF's forward, not symformer's. None if there are
    none."""
    if cls not in _ATTENTIONS:
        module = sys.modules[cls.__module__]
        swaps = _replacements(module, record)
        if not swaps:
            _ATTENTIONS[cls] = None
            return None
        fwd = inspect.unwrap(cls.forward)  # past the kwarg-renaming decorator: the caller passes current names
        env = {**fwd.__globals__, **swaps}
        forward = types.FunctionType(fwd.__code__, env, fwd.__name__, fwd.__defaults__, fwd.__closure__)
        forward.__kwdefaults__ = fwd.__kwdefaults__
        _ATTENTIONS[cls] = type(cls.__name__ + "InputDtype", (cls,), {"forward": forward, "__module__": cls.__module__})
    return _ATTENTIONS[cls]


def exact_float64(model: nn.Module) -> nn.Module:
    """Replace the model's rotary table and norms (RMSNorms, OLMo's and Cohere's LayerNorms) by the same formulas in
    the input dtype, and the float32 helpers of some families' attention forwards (a float32 rotary_dtype's rotation,
    Ministral 3's position scaling of the queries, the eager softmax; in place; a layer already patched by
    patch_positional keeps its forward, which computes in the input dtype and takes its eager attention from
    `_symformer_eager`, set here)."""
    record = family_record(family_of(model))  # a vision-language model: its language model's
    if record is not None and record.softmax_dtype == "float32":
        for attn in attention_modules(model):
            attn._symformer_eager = input_dtype_eager  # read by hf.positional's patched forward (either order)
    for name, mod in list(model.named_modules()):
        own = record is not None and type(mod).__name__ == record.attention
        exact = _input_dtype_attention(type(mod), record) if own else None
        if exact is not None:  # HF's class (not a patched one) whose forward calls a float32 helper
            mod.__class__ = exact
            continue
        table = _float64_table(mod, record) if type(mod).__name__.endswith("RotaryEmbedding") else None
        if table is not None:
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], table)
            continue
        forward = _exact_forward(mod)
        if forward is not None:
            cls = type(mod)
            if cls not in _NORMS:
                _NORMS[cls] = type(cls.__name__ + "InputDtype", (cls,), {"forward": forward})
            mod.__class__ = _NORMS[cls]
    return model


__all__ = ["exact_float64", "input_dtype_eager", "Float64Table", "Float64TypedTable"]
