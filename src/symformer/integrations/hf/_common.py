"""Shared helpers of the Hugging Face integration: the optional import, and what the shared code reads of a model's
family, from its record (hf.schema.FamilyRecord, registered in hf.families: the records say what differs between
families, these helpers never name one)."""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings

import torch
from torch import nn

from symformer._validation import fail, reads_values
from symformer.integrations.hf.families import FamilyMap, FamilyNames, family_records, norm_kind, record_of
from symformer.integrations.hf.schema import FamilyRecord

#: config.model_type -> attention class of every registered family (a live view of the records)
FAMILIES = FamilyMap(lambda r: r.attention)
#: families whose attention output is multiplied by sigmoid(g) before the output projection (record.output_gate)
GATED_OUTPUT = FamilyNames(lambda r: r.output_gate != "none", "families with an output gate")
MIN_VERSION = (4, 48)  # the release that introduced AttentionInterface
#: the oldest release the test suite passes on; older ones (>= MIN_VERSION) get one warning naming what fails there
TESTED_VERSION = (5, 24)
_WARNED: list[str] = []


def hf_unavailable() -> str | None:
    """None where symformer.integrations.hf can run, else why not (one line): transformers missing, older than
    4.48, or unable to use the installed torch (transformers 5 disables PyTorch < 2.6 and then has no models)."""
    try:
        tf = importlib.import_module("transformers")
    except ImportError:
        return (
            "symformer.integrations.hf needs Hugging Face transformers (>= 4.48): "
            "install the extra with `pip install 'symformer[hf]'`"
        )
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if (major, minor) < MIN_VERSION:
        return (
            f"symformer.integrations.hf needs transformers >= 4.48 (AttentionInterface), found "
            f"{tf.__version__}: install the extra with `pip install -U 'symformer[hf]'`"
        )
    if not tf.utils.is_torch_available():
        return (
            f"transformers {tf.__version__} cannot use torch {torch.__version__} (transformers 5 needs PyTorch >= "
            "2.6), so symformer.integrations.hf has no models to patch: upgrade torch with `pip install -U torch`"
        )
    return None


def require_transformers():
    """Import transformers, or raise ImportError saying why it cannot serve (`hf_unavailable`)."""
    problem = hf_unavailable()
    if problem is not None:
        raise ImportError(problem)
    tf = importlib.import_module("transformers")
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if (major, minor) < TESTED_VERSION and tf.__version__ not in _WARNED:
        _WARNED.append(tf.__version__)
        warnings.warn(
            f"symformer.integrations.hf is tested with transformers >= 5.24, found {tf.__version__}: on 5.17 the "
            "standard-attention families run, patch and decode with symformer's states, but decoding the 8 MLA "
            "families (DeepSeek-V2/V3/V3.2 and kin) with their latent cache does not match the full forward, and "
            "LongCat-Flash reads its layer count from another config key; upgrade with `pip install -U "
            "'symformer[hf]'`",
            RuntimeWarning,
            stacklevel=2,
        )
    return tf


def text_config(model: nn.Module):
    """The language model's config: model.config, or the text config of a multimodal model (Gemma 3's
    Gemma3ForConditionalGeneration, LLaVA: config.get_text_config()), whose model_type names the family."""
    config = model.config
    if getattr(config, "model_type", None) in FAMILIES or not hasattr(config, "get_text_config"):
        return config
    return config.get_text_config()


def family_of(model) -> str | None:
    """The registered family of an HF model (of its language model for a vision-language one: text_config), or
    None for anything else."""
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        return None
    family = getattr(text_config(model), "model_type", None)
    return family if family in FAMILIES else None


def model_family(model: nn.Module) -> str:
    """family_of(model), else ValueError naming the class and the supported families."""
    family = family_of(model)
    if family is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        fail(
            "model",
            f"{type(model).__name__} (model_type={model_type!r})",
            "a Hugging Face model of a supported family: "
            + ", ".join(f"{r.name} ({r.attention})" for r in family_records()),
        )
    return family


def record_for(obj) -> FamilyRecord:
    """The record of an attention layer (its config's model_type) or of a config; ValueError for an unregistered
    one (the helpers below are called on the layers of a supported model only)."""
    record = record_of(obj)
    if record is None:
        model_type = getattr(obj, "model_type", None) or getattr(getattr(obj, "config", None), "model_type", None)
        fail("model_type", model_type, "a registered family (hf.families.register_family)")
    return record


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention module of every decoder layer, in order (instances of the record's attention class, or of
    subclasses: exact_float64's and patch_positional's)."""
    name = model_family(model)
    base = FAMILIES[name]
    out = [m for m in model.modules() if any(c.__name__ == base for c in type(m).__mro__)]
    if not out:
        fail("model", type(model).__name__, f"a {name} model with {base} layers")
    return out


def rope_parameters(config, layer_type: str | None = None) -> dict:
    """config.rope_parameters (transformers 5), or its entry for `layer_type` where the model keys them by layer
    type (Gemma 3: sliding and full attention layers have their own base); {} when there is none."""
    params = getattr(config, "rope_parameters", None) or {}
    if not isinstance(params, dict):
        return {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        return params[layer_type]
    return params


def rope_theta(config, layer_type: str | None = None) -> float:
    """The rotary base: rope_parameters(config, layer_type)["rope_theta"] or config.rope_theta (4.x)."""
    theta = rope_parameters(config, layer_type).get("rope_theta")
    return float(theta if theta is not None else getattr(config, "rope_theta", 10000.0))


def partial_rotary_factor(config) -> float:
    """The fraction of each head the native rotary embedding rotates (Phi-3 / Phi-4-mini: rope_parameters'
    partial_rotary_factor; MLA: qk_rope_head_dim / qk_head_dim; 1 for the other families)."""
    record = record_of(config)
    if record is not None and record.mla:  # the rope block, the last of each query / key head
        return config.qk_rope_head_dim / (config.qk_nope_head_dim + config.qk_rope_head_dim)
    factor = rope_parameters(config).get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    return 1.0 if factor is None else float(factor)


def rotary_dim(attn: nn.Module) -> int:
    """How many coordinates of each head the native rotary embedding rotates, as HF: int(head_dim * factor); MLA:
    qk_rope_head_dim (the last block of each head)."""
    if is_mla(attn):
        return int(attn.qk_rope_head_dim)
    return int(head_dim(attn) * partial_rotary_factor(attn.config))


def is_mla(attn: nn.Module) -> bool:
    """Whether the layer is multi-head latent attention (record.mla: a shared rotated key from kv_a_proj_with_mqa)."""
    record = record_of(attn)
    return record is not None and record.mla


def norm_offset(norm: nn.Module) -> float:
    """c in an RMSNorm's output (c + w) * x_hat: 1 for the norms a record marks "offset_rms" (Gemma, Qwen3-Next,
    Qwen3.5: weight stored as w, starts at 0), else 0."""
    offset = any(norm_kind(c.__name__) == "offset_rms" for c in type(norm).__mro__)  # exact_float64 subclasses them
    return 1.0 if offset and hasattr(norm, "eps") else 0.0


def head_dim(attn: nn.Module) -> int:
    """The layer's query and key head size (GPT-NeoX names it head_size; MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    if is_mla(attn):
        return int(attn.qk_head_dim)
    return int(getattr(attn, "head_dim", None) or attn.head_size)


def out_proj(attn: nn.Module) -> nn.Linear:
    """The layer's output projection (record.out_proj: GPT-NeoX and Phi name it dense, LFM2 out_proj)."""
    return getattr(attn, record_for(attn).out_proj)


def _norm_pair(attn: nn.Module, where: str) -> tuple[nn.Module, nn.Module] | None:
    """The layer's q/k norms if its record puts them `where` and the layer has them (optional in some families:
    record.qk_norm_flag); None for any other module."""
    record = record_of(attn)
    if record is None or record.qk_norm != where:
        return None
    norm = getattr(attn, record.qk_norm_names[0], None)
    return None if norm is None else (norm, getattr(attn, record.qk_norm_names[1]))


def qk_norms(attn: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The layer's q and k norms applied BEFORE the rotation (record.qk_norm "before": Qwen3, OLMo 2, Cohere, LFM2's
    q_layernorm / k_layernorm, ...), or None (none, or after it: post_qk_norms)."""
    return _norm_pair(attn, "before")


def post_qk_norms(attn: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The layer's q and k norms applied AFTER the rotation (record.qk_norm "after": Hunyuan's query_layernorm /
    key_layernorm, NanoChat's parameter-free q_norm / k_norm), or None."""
    return _norm_pair(attn, "after")


def fused_qkv(attn: nn.Module) -> tuple[nn.Linear, str] | None:
    """(Linear, layout) where q, k and v come from one projection (record.fused_qkv: Phi-3's qkv_proj, rows [q; k; v]
    ("blocks"), GPT-NeoX's query_key_value, rows [q_h; k_h; v_h] head by head ("heads")); None where they are
    separate, and for a module without that projection (callers scan every module of a model)."""
    record = record_of(attn)
    fused = None if record is None else record.fused_qkv
    proj = None if fused is None else getattr(attn, fused[0], None)
    return None if proj is None else (proj, fused[1])


def rope_pairing(config) -> str:
    """The native RoPE's pairing in symformer's terms: "half" (Llama's rotate_half) or "interleaved" (record.pairing;
    "config": MLA with config.rope_interleave, DeepSeek-V3's default: HF rotates the pairs (2u, 2u + 1) and returns
    them de-interleaved, the same permutation on q and k, so the logits are those of the interleaved pairing)."""
    record = record_of(config)
    pairing = "half" if record is None else record.pairing
    if pairing == "config":
        return "interleaved" if getattr(config, "rope_interleave", False) else "half"
    return pairing


def applies_rope(attn: nn.Module) -> bool:
    """Whether the layer rotates q and k at all (record.rotating_layers): not SmolLM3's NoPE layers, nor EXAONE 4's
    global layers, nor Cohere 2's full-attention ones, nor AFMoE's global ones."""
    return record_for(attn).rotates(attn)


def check_layer(attn: nn.Module) -> None:
    """ValueError for a layer option neither the patch nor the group follows: StableLM's / Phi's qk_layernorm (a
    LayerNorm with a bias on q and k, under a name the patched forward does not apply), and MLA layers older than
    transformers' latent-cache layout (no expand_kv: the patched MLA forward follows that layout)."""
    if getattr(attn, "qk_layernorm", False):
        fail(
            "config.qk_layernorm",
            True,
            "False (the per-head LayerNorms on q and k of StableLM / Phi are not supported)",
        )
    if is_mla(attn) and not hasattr(attn, "expand_kv"):
        fail(
            "model",
            f"{type(attn).__name__} without expand_kv (an older transformers MLA layout)",
            "the MLA layout of transformers 5.x that caches the compressed latents (DeepseekV3Attention.expand_kv)",
        )


def flat_qk_norm(attn: nn.Module) -> bool:
    """Whether the layer's q/k RMSNorm before the rotation spans all heads at once (record.qk_norm_span "all_heads":
    OLMo 2, OLMo 3, OLMoE: weight (H Dh,), applied to the flat projection) rather than each head (Qwen3, Gemma 3:
    weight (Dh,), applied per head)."""
    return qk_norms(attn) is not None and record_for(attn).qk_norm_span == "all_heads"


def n_kv_heads(config) -> int:
    """The key heads: num_key_value_heads, or every head where the family has no grouped-query attention (record.
    grouped_kv False: GPT-NeoX ignores the field)."""
    record = record_of(config)
    if record is not None and not record.grouped_kv:
        return int(config.num_attention_heads)
    return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)


def position_query_scale(positions: torch.Tensor, beta: float, original_max: int) -> torch.Tensor:
    """Ministral 3's query scaling after the rotation, 1 + beta log(1 + floor(position / original_max)), in the
    positions' dtype (HF's get_llama_4_attn_scale; its integer positions divide into float32)."""
    return 1 + beta * torch.log1p(torch.floor(positions / original_max))


def attention_interface(name: str, eager):
    """The attention function registered under `name` (the family's `eager` for "eager")."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # optional dependency: imported on use

    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        return ALL_ATTENTION_FUNCTIONS.get_interface(name, eager)
    return eager if name == "eager" else ALL_ATTENTION_FUNCTIONS[name]  # 4.48-4.5x


def family_eager(attn: nn.Module):
    """The eager attention a patched layer runs: exact_float64's `_symformer_eager`, else its family's own."""
    module = sys.modules[type(attn).__mro__[1].__module__]  # the HF class's module (the patched class subclasses it)
    return getattr(attn, "_symformer_eager", None) or module.eager_attention_forward


def call_attention(attn: nn.Module, q, k, v, attention_mask, scaling: float, position_ids, kwargs: dict):
    """The patched forwards' attention call, as HF's forwards make it: the function of config._attn_implementation
    (the family's own eager one for "eager", or exact_float64's `_symformer_eager`), attention dropout only in
    training, and position_ids passed on (flash attention reads packed sequences off them)."""
    interface = attention_interface(attn.config._attn_implementation, family_eager(attn))
    if position_ids is not None:
        kwargs.setdefault("position_ids", position_ids)
    dropout = 0.0 if not attn.training else attn.attention_dropout
    return interface(attn, q, k, v, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def token_positions(position_ids, cache_position, cache, q) -> torch.Tensor:
    """Token positions (B, N, 1), or (N, 1) when the batch shares them: the model's position_ids, kept int64 (the
    parts convert them exactly; a 16-bit float would round 257 to 256 in bfloat16), or float32 / float64 (float64
    for a float64 model) where they are given as floats. Qwen3.5's multimodal position ids (3, B, N) are taken when
    their three streams agree (text); an image grid's are refused."""
    n = q.shape[-2]
    if position_ids is not None and position_ids.ndim == 3:
        # a check that reads the positions: where value checks run (_validation.reads_values), never a host sync
        if reads_values(position_ids) and not bool((position_ids == position_ids[:1]).all()):
            fail(
                "position_ids",
                "multimodal rotary positions (three streams that differ: an image or video grid)",
                "text positions (one position per token): the parts rotate by one position per token",
            )
        position_ids = position_ids[0]
    if position_ids is None:
        if cache_position is not None:
            position_ids = cache_position[None]
        else:
            start = cache.get_seq_length() if cache is not None else 0
            # start + arange: a StaticCache's length is a tensor, which arange(start, ...) would read (a host sync)
            position_ids = (start + torch.arange(n, device=q.device))[None]
    if position_ids.shape[0] == 1:  # positions shared by the batch: (N, 1), the parts' shared-table path
        position_ids = position_ids[0]
    if not position_ids.is_floating_point():
        return position_ids[..., None].long()
    return position_ids[..., None].to(torch.float64 if q.dtype == torch.float64 else torch.float32)


def llama4_query_scale(config, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor | float:
    """Ministral 3's query scaling after the rotation, 1 + beta log(1 + floor(position / original_max)) (its rope
    parameters' llama_4_scaling_beta; 1 for the other families), shaped to (B or 1, 1, N, 1), computed in float32
    (float64 for a float64 query) and returned in `dtype` (the query's; default: the compute dtype)."""
    params = rope_parameters(config)
    beta = params.get("llama_4_scaling_beta")
    if beta is None:
        return 1.0
    cd = torch.float64 if torch.float64 in (dtype, positions.dtype) else torch.float32
    pos = positions[..., 0].to(cd)  # (N,) shared or (B, N)
    scale = position_query_scale(pos, beta, params["original_max_position_embeddings"])
    return scale.view(-1 if pos.ndim == 2 else 1, 1, pos.shape[-1], 1).to(dtype or cd)


def cache_kwargs(module, cache) -> dict:
    """`cache` as the keyword `module.forward` takes it: `cache` from transformers 5.24, `past_key_values` before.
    Passing the other name is not an error there: it lands in **kwargs and the module runs without its cache."""
    if not callable(getattr(module, "forward", None)):
        fail("module", type(module).__name__, "a Hugging Face model or module (one with a forward)", TypeError)
    params = inspect.signature(module.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}
