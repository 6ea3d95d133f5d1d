"""Shared helpers of the Hugging Face integration: the optional import and the model families we know."""

from __future__ import annotations

import importlib
import sys

import torch
from torch import nn

from symformer._validation import fail

#: config.model_type -> attention class of the families that share Llama's rotary code path
FAMILIES = {
    "llama": "LlamaAttention",
    "mistral": "MistralAttention",
    "qwen2": "Qwen2Attention",
    "qwen3": "Qwen3Attention",
    "gemma": "GemmaAttention",
    "mixtral": "MixtralAttention",
    "qwen3_moe": "Qwen3MoeAttention",
    "gemma2": "Gemma2Attention",
    "gemma3_text": "Gemma3Attention",
    "olmo2": "Olmo2Attention",
    "olmo3": "Olmo3Attention",
    "olmoe": "OlmoeAttention",
    "phi3": "Phi3Attention",
    "gpt_neox": "GPTNeoXAttention",
    "olmo": "OlmoAttention",
    "granite": "GraniteAttention",
    "smollm3": "SmolLM3Attention",
    "seed_oss": "SeedOssAttention",
    "exaone4": "Exaone4Attention",
    "stablelm": "StableLmAttention",
    "starcoder2": "Starcoder2Attention",
    "phi": "PhiAttention",
    "arcee": "ArceeAttention",
    "apertus": "ApertusAttention",
    "qwen2_moe": "Qwen2MoeAttention",
    "phimoe": "PhimoeAttention",
    "granitemoe": "GraniteMoeAttention",
    "glm": "GlmAttention",
    "glm4": "Glm4Attention",
    "cohere": "CohereAttention",
    "cohere2": "Cohere2Attention",
    "cohere2_moe": "Cohere2MoeAttention",
    "ernie4_5": "Ernie4_5Attention",
    "ernie4_5_moe": "Ernie4_5_MoeAttention",
    "gpt_oss": "GptOssAttention",
    "helium": "HeliumAttention",
    "ministral": "MinistralAttention",
    "vaultgemma": "VaultGemmaAttention",
    "nemotron": "NemotronAttention",
    "hyperclovax": "HyperCLOVAXAttention",
    "jais2": "Jais2Attention",
    "flex_olmo": "FlexOlmoAttention",
    "solar_open": "SolarOpenAttention",
    "minimax_m2": "MiniMaxM2Attention",
    "exaone_moe": "ExaoneMoeAttention",
    "glm4_moe": "Glm4MoeAttention",
    "granitemoeshared": "GraniteMoeSharedAttention",
    "ministral3": "Ministral3Attention",
    "deepseek_v2": "DeepseekV2Attention",
    "deepseek_v3": "DeepseekV3Attention",
    "glm4_moe_lite": "Glm4MoeLiteAttention",
    "longcat_flash": "LongcatFlashMLA",
    "mistral4": "Mistral4Attention",
    "minicpm3": "MiniCPM3Attention",
    "deepseek_v32": "DeepseekV32Attention",
    "glm_moe_dsa": "GlmMoeDsaAttention",
    "hunyuan_v1_dense": "HunYuanDenseV1Attention",
    "hunyuan_v1_moe": "HunYuanMoEV1Attention",
    "hy_v3": "HYV3Attention",
    "kolibri1": "Kolibri1Attention",
    "dots1": "Dots1Attention",
    "cwm": "CwmAttention",
    "apertus1p5_text": "Apertus1p5TextAttention",
    "nanochat": "NanoChatAttention",
    "lfm2": "Lfm2Attention",
    "qwen3_next": "Qwen3NextAttention",
    "afmoe": "AfmoeAttention",
    "qwen3_5_text": "Qwen3_5Attention",
    "qwen3_5_moe_text": "Qwen3_5MoeAttention",
}
#: families with multi-head latent attention (MLA: DeepSeek-V2 / V3, Kimi K2, GLM-4.7-Flash, LongCat-Flash, Mistral
#: Small 4, MiniCPM3, and with DeepSeek sparse attention DeepSeek-V3.2 and GLM-5): each head's query and key are
#: [nope; rope] (qk_nope_head_dim + qk_rope_head_dim coordinates), the rotation acts on the rope block only, and one
#: rotated key block (from kv_a_proj_with_mqa) is shared by all heads; keys and values come from a normed latent
MLA_FAMILIES = (
    "deepseek_v2",
    "deepseek_v3",
    "glm4_moe_lite",
    "longcat_flash",
    "mistral4",
    "minicpm3",
    "deepseek_v32",
    "glm_moe_dsa",
)
#: families whose native RoPE rotates interleaved pairs (2u, 2u + 1) instead of (u, u + Dh/2)
INTERLEAVED = (
    "glm",
    "glm4",
    "cohere",
    "cohere2",
    "cohere2_moe",
    "ernie4_5",
    "ernie4_5_moe",
    "helium",
    "deepseek_v2",
    "longcat_flash",
    "deepseek_v32",
    "glm_moe_dsa",
)
#: families whose rotary table repeats each frequency in place (repeat_interleave), not cat(freqs, freqs)
TABLE_INTERLEAVED = ("cohere", "cohere2", "cohere2_moe")
#: families whose rotary table holds each frequency once (GPT-OSS: (..., Dh/2), applied to both halves)
TABLE_HALF = ("gpt_oss",)
#: families whose rotary table is complex, polar(1, freqs), applied to the pairs (2u, 2u + 1) as complex numbers in
#: float32 (DeepSeek-V2's apply_rotary_emb; exact_float64 runs both in the input dtype)
TABLE_COMPLEX = ("deepseek_v2",)
#: families whose apply_rotary_pos_emb casts q and k to float32 (exact_float64 runs it in the input dtype)
FLOAT32_ROTARY = ("cohere", "cohere2", "cohere2_moe", "ernie4_5", "ernie4_5_moe")
#: families whose eager attention already computes its softmax in the input dtype (the others' take float32;
#: exact_float64 runs those in the input dtype)
EAGER_INPUT_DTYPE = ("gpt_oss",)
#: families whose rotate_half is cat(x2, -x1) (NanoChat): their RoPE turns each pair by -theta p, so a part starts from
#: the negated frequencies
NEGATED_ROTATION = ("nanochat",)
#: families whose attention output is multiplied by sigmoid(g) coordinate by coordinate before o_proj: g from q_proj,
#: rows [q_h; g_h] per head (the full-attention layers of Qwen3-Next and Qwen3.5), or from the layer's own gate_proj
#: (AFMoE)
GATED_OUTPUT = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "afmoe")
#: families that normalise q and k per head AFTER the rotation with a parameter-free RMSNorm named q_norm / k_norm
#: (NanoChat; Hunyuan's post-rotation norms have weights and other names: query_layernorm, key_layernorm)
WEIGHTLESS_POST_NORM = ("nanochat",)
MIN_VERSION = (4, 48)  # the release that introduced AttentionInterface


def require_transformers():
    """Import transformers, or raise ImportError naming the extra that installs it."""
    try:
        tf = importlib.import_module("transformers")
    except ImportError as exc:
        raise ImportError(
            "symformer.integrations.hf needs Hugging Face transformers (>= 4.48): "
            "install the extra with `pip install 'symformer[hf]'`"
        ) from exc
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if (major, minor) < MIN_VERSION:
        raise ImportError(
            f"symformer.integrations.hf needs transformers >= 4.48 (AttentionInterface), found "
            f"{tf.__version__}: install the extra with `pip install -U 'symformer[hf]'`"
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
    """The supported family of an HF model (of its language model for a vision-language one: text_config), or
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
            "a Hugging Face model of a supported family: " + ", ".join(f"{k} ({v})" for k, v in FAMILIES.items()),
        )
    return family


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention module of every decoder layer, in order."""
    family = model_family(model)
    base = FAMILIES[family]
    out = [m for m in model.modules() if any(c.__name__ == base for c in type(m).__mro__)]
    if not out:
        fail("model", type(model).__name__, f"a {family} model with {base} layers")
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
    if getattr(config, "model_type", None) in MLA_FAMILIES:  # the rope block, the last of each query / key head
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
    """Whether the layer is multi-head latent attention (MLA_FAMILIES: a shared rotated key from kv_a_proj_with_mqa)."""
    return hasattr(attn, "kv_a_proj_with_mqa")


def norm_offset(norm: nn.Module) -> float:
    """c in an RMSNorm's output (c + w) * x_hat: 1 for the norms of Gemma, Qwen3-Next and Qwen3.5 (weight stored as
    w, starts at 0), else 0."""
    names = [c.__name__ for c in type(norm).__mro__]  # exact_float64 subclasses the norm classes
    offset = any("Gemma" in n or n.startswith(("Qwen3Next", "Qwen3_5")) for n in names)  # and Qwen3.5
    return 1.0 if offset and hasattr(norm, "eps") else 0.0


def head_dim(attn: nn.Module) -> int:
    """The layer's query and key head size (GPT-NeoX names it head_size; MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    if is_mla(attn):
        return int(attn.qk_head_dim)
    return int(getattr(attn, "head_dim", None) or attn.head_size)


def out_proj(attn: nn.Module) -> nn.Linear:
    """The layer's output projection (GPT-NeoX names it dense, LFM2 out_proj)."""
    for name in ("o_proj", "out_proj"):
        if hasattr(attn, name):
            return getattr(attn, name)
    return attn.dense


def qk_norms(attn: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The layer's q and k norms applied BEFORE the rotation, or None: q_norm / k_norm (Qwen3, OLMo 2, Cohere, ...;
    not NanoChat's, which come after it: WEIGHTLESS_POST_NORM) or LFM2's RMSNorms q_layernorm / k_layernorm
    (StableLM's and Phi's per-head LayerNorms of that name are refused by check_layer)."""
    if attn.config.model_type in WEIGHTLESS_POST_NORM:
        return None
    if getattr(attn, "q_norm", None) is not None:
        return attn.q_norm, attn.k_norm
    norm = getattr(attn, "q_layernorm", None)
    if norm is not None and any(c.__name__.endswith("RMSNorm") for c in type(norm).__mro__):  # exact_float64 subclasses
        return norm, attn.k_layernorm
    return None


def fused_qkv(attn: nn.Module) -> tuple[nn.Linear, str] | None:
    """(Linear, layout) where q, k and v come from one projection: Phi-3's qkv_proj, rows [q; k; v] ("blocks"),
    GPT-NeoX's query_key_value, rows [q_h; k_h; v_h] head by head ("heads"); None where they are separate."""
    if hasattr(attn, "qkv_proj"):
        return attn.qkv_proj, "blocks"
    if hasattr(attn, "query_key_value"):
        return attn.query_key_value, "heads"
    return None


def rope_pairing(config) -> str:
    """The native RoPE's pairing in symformer's terms: "half" (Llama's rotate_half) or "interleaved" (INTERLEAVED;
    MLA with config.rope_interleave, DeepSeek-V3's default: HF rotates the pairs (2u, 2u + 1) and returns them
    de-interleaved, the same permutation on q and k, so the logits are those of the interleaved pairing)."""
    family = getattr(config, "model_type", None)
    if family in MLA_FAMILIES and family not in INTERLEAVED:  # DeepSeek-V2: always interleaved (complex pairs)
        return "interleaved" if getattr(config, "rope_interleave", False) else "half"
    return "interleaved" if family in INTERLEAVED else "half"


def applies_rope(attn: nn.Module) -> bool:
    """Whether the layer rotates q and k at all: not SmolLM3's NoPE layers (use_rope False), nor EXAONE 4's (and
    EXAONE MoE's) global layers (they rotate only in sliding layers when the model has a sliding window), nor
    Cohere 2's full-attention layers (only sliding layers rotate; Cohere 2 MoE's force_rope dense prefix layers
    too), nor AFMoE's global layers."""
    if hasattr(attn, "use_rope"):
        return bool(attn.use_rope)
    family = attn.config.model_type
    if family in ("exaone4", "exaone_moe") and getattr(attn, "sliding_window", None) is not None:
        return bool(attn.is_sliding)
    if family in ("cohere2", "cohere2_moe"):
        return attn.sliding_window is not None or bool(getattr(attn, "force_rope", False))
    if family == "afmoe":  # AFMoE: only its local (sliding) layers rotate, the global ones are NoPE
        return bool(attn.is_local_attention)
    return True


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
    """Whether the layer's q/k RMSNorm spans all heads at once (OLMo 2, OLMo 3, OLMoE: weight (H Dh,), applied to
    the flat projection) rather than each head (Qwen3, Gemma 3: weight (Dh,), applied per head)."""
    norms = qk_norms(attn)
    weight = None if norms is None else getattr(norms[0], "weight", None)  # a parameter-free norm is per head
    return weight is not None and weight.shape[-1] != head_dim(attn)


def n_kv_heads(config) -> int:
    if getattr(config, "model_type", None) == "gpt_neox":  # no grouped-query attention in GPT-NeoX
        return int(config.num_attention_heads)
    return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)


def position_query_scale(positions: torch.Tensor, beta: float, original_max: int) -> torch.Tensor:
    """Ministral 3's query scaling after the rotation, 1 + beta log(1 + floor(position / original_max)), in the
    positions' dtype (HF's get_llama_4_attn_scale; its integer positions divide into float32)."""
    return 1 + beta * torch.log1p(torch.floor(positions / original_max))


def attention_interface(name: str, eager):
    """The attention function registered under `name` (the family's `eager` for "eager")."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        return ALL_ATTENTION_FUNCTIONS.get_interface(name, eager)
    return eager if name == "eager" else ALL_ATTENTION_FUNCTIONS[name]  # 4.48-4.5x


def call_attention(attn: nn.Module, q, k, v, attention_mask, scaling: float, position_ids, kwargs: dict):
    """The patched forwards' attention call, as HF's forwards make it: the function of config._attn_implementation
    (the family's own eager one for "eager", or exact_float64's `_symformer_eager`), attention dropout only in
    training, and position_ids passed on (flash attention reads packed sequences off them)."""
    module = sys.modules[type(attn).__mro__[1].__module__]  # the HF class's module (the patched class subclasses it)
    eager = getattr(attn, "_symformer_eager", None) or module.eager_attention_forward
    interface = attention_interface(attn.config._attn_implementation, eager)
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
        if not bool((position_ids == position_ids[:1]).all()):
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
            position_ids = torch.arange(start, start + n, device=q.device)[None]
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
