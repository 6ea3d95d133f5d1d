"""Float64 checks on HF models that really run in float64.

HF's Llama-family models compute two things in float32 whatever the model dtype: the rotary cos/sin table
(LlamaRotaryEmbedding casts position_ids and inv_freq to float32) and every RMSNorm (it upcasts to float32 and
casts back, Gemma's (1 + w) norm too, so a float64 model is rounded to float32 at each norm). A float64 parity
or invariance check on an untouched model therefore reads 0 or ~1e-7, by luck of the float32 rounding, never the
float64 error.
`exact_float64(model)` evaluates the same formulas in the input dtype; it changes nothing in float32."""
from __future__ import annotations

import torch
from torch import nn

from symformer.integrations._hf_common import norm_offset

_NORMS: dict[type, type] = {}


def _cos_sin(x, position_ids, inv_freq):
    """HF's cos/sin table (cat(freqs, freqs), freqs = position * inv_freq) evaluated in float64."""
    f = position_ids[..., None].to(torch.float64) * inv_freq
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Float64Table(nn.Module):
    """HF's rotary table evaluated in float64 (`_cos_sin`)."""

    def __init__(self, inv_freq: torch.Tensor):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq.detach().to(torch.float64), persistent=False)

    def forward(self, x, position_ids):
        return _cos_sin(x, position_ids, self.inv_freq)


class Float64TypedTable(nn.Module):
    """Float64Table per layer type (Gemma 3's rotary embedding keeps `{type}_inv_freq` and is called with the type);
    the buffers keep HF's names, so that patch_positional still reads each type's table."""

    def __init__(self, inv_freqs: dict[str, torch.Tensor]):
        super().__init__()
        for k, v in inv_freqs.items():
            self.register_buffer(f"{k}_inv_freq", v.detach().to(torch.float64), persistent=False)

    def forward(self, x, position_ids, layer_type=None):
        return _cos_sin(x, position_ids, getattr(self, f"{layer_type}_inv_freq"))


def _float64_table(mod: nn.Module) -> nn.Module | None:
    """The float64 replacement of an HF rotary embedding, or None for one we cannot read."""
    if isinstance(getattr(mod, "inv_freq", None), torch.Tensor):
        return Float64Table(mod.inv_freq)
    types = getattr(mod, "layer_types", None)
    if types and all(isinstance(getattr(mod, f"{t}_inv_freq", None), torch.Tensor) for t in types):
        return Float64TypedTable({t: getattr(mod, f"{t}_inv_freq") for t in types})
    return None


def _norm_forward(self, hidden_states):
    """RMSNorm (Zhang & Sennrich 2019) in the input dtype: w * x / sqrt(mean(x^2) + eps)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon))


def _gemma_norm_forward(self, hidden_states):
    """Gemma's RMSNorm in the input dtype: (1 + w) * x / sqrt(mean(x^2) + eps) (its weight starts at 0)."""
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return (1.0 + self.weight) * (hidden_states * torch.rsqrt(var + self.eps))


def _layer_norm_forward(self, hidden_states):
    """OLMo's parameter-free LayerNorm in the input dtype (HF's computes it in float32)."""
    return nn.functional.layer_norm(hidden_states, self.normalized_shape, None, None, eps=1e-5)


def _exact_forward(mod: nn.Module):
    """The input-dtype forward for one of HF's float32-computing norms, or None for any other module."""
    name = type(mod).__name__
    if name == "OlmoLayerNorm":
        return _layer_norm_forward
    if name.endswith("RMSNorm"):
        if hasattr(mod, "variance_epsilon"):
            return _norm_forward
        return _gemma_norm_forward if norm_offset(mod) == 1.0 else None
    return None


def exact_float64(model: nn.Module) -> nn.Module:
    """Replace the model's rotary table and norms (RMSNorms, OLMo's LayerNorm) by the same formulas in the input
    dtype (in place)."""
    for name, mod in list(model.named_modules()):
        table = _float64_table(mod) if type(mod).__name__.endswith("RotaryEmbedding") else None
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


__all__ = ["exact_float64", "Float64Table", "Float64TypedTable"]
