"""Experiment `hf`: symformer's parts inside Hugging Face Llama-family models, built from configs (no download).

1. Parity: a model patched with symformer RoPE (half pairing, the model's rope_theta) against the unpatched model,
   float32 and float64; STRING with P = I against RoPE (ESPR T2.7: R = P R_rope P^T).
2. FAVOR+ through AttentionInterface ("symformer_favor") against eager softmax as the feature count m grows (T7.3).
3. Teleportation invariance (teleportation paper Sec. 3, eq. (9)) under a random group element, with GQA, for
   the native RoPE and patched STRING / ESPR.
4. A short character-LM training run on tiny Shakespeare per positional part (RoPE, STRING, ESPR).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.plots import pyplot
from symformer.integrations._hf_common import attention_modules, qk_norms
from symformer.results import Claim, ExperimentResult, verdict

POSITIONALS = ("rope", "string", "espr")
TRAIN_POSITIONALS = {"rope": {}, "string": {"init_scale": 0.0}, "espr": {}}


def _claim(cid, statement, paper, measured, ok, evidence, setting, paper_setting) -> Claim:
    """A Claim with setting / paper_setting fields where results.Claim has them, else in the evidence text."""
    names = {f.name for f in dataclasses.fields(Claim)}
    if {"setting", "paper_setting"} <= names:
        return Claim(
            cid, statement, paper, measured, verdict(ok), evidence, setting=setting, paper_setting=paper_setting
        )
    return Claim(
        cid,
        statement,
        paper,
        measured,
        verdict(ok),
        f"{evidence} Setting (ours): {setting}. Paper setting: {paper_setting}.",
    )


#: family -> (config class, model class, extra config) of the tiny models; MoE: 4 experts, top 2, HF's eager
#: experts (the grouped-matmul ones take no float64 on CPU)
_MOE = {"num_experts_per_tok": 2, "experts_implementation": "eager"}
#: MLA attention (heads of 8 nope + 4 rope coordinates, values of 6, a latent of 16; key heads = heads: keys expand
#: per head), and the DeepSeek-style MoE the MLA families but MiniCPM3 add (a dense layer, then an MoE layer)
_MLA_ATTENTION = {
    "num_key_value_heads": 4,
    "head_dim": 4,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 8,
    "v_head_dim": 6,
    "pad_token_id": None,
}
_MLA = {
    **_MLA_ATTENTION,
    "n_routed_experts": 4,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    **_MOE,
}
_DSA = {"q_lora_rank": 16, "index_topk": 64, "index_head_dim": 8, "index_n_heads": 2}
FAMILY_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, **_MOE}),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"num_experts": 4, "moe_intermediate_size": 32, **_MOE}),
    # Gemma 2: sliding window shorter than the sequence, logit soft-cap, scale other than 1/sqrt(Dh)
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            "sliding_window": 6,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": None,
            "query_pre_attn_scalar": 12,
        },
    ),
    # Gemma 3: a sliding layer (rotary base 1e4) and a full layer (base 1e6), per-head q/k norms
    "gemma3_text": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "query_pre_attn_scalar": 12},
    ),
    # OLMo 2 / 3, OLMoE: q/k RMSNorms over all heads at once; OLMo 3: a sliding layer (base 1e4) and a
    # full layer (base 5e5); OLMoE: fused experts
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "olmo3": (
        "Olmo3Config",
        "Olmo3ForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "default", "rope_theta": 5e5},
            },
        },
    ),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", {"num_experts": 4, **_MOE}),
    # Phi-3 (and Phi-4): one fused qkv_proj and one fused gate_up_proj
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": None}),
    # GPT-NeoX (Pythia): query_key_value fused head by head, partial rotary (here half of each head), no
    # GQA (num_key_value_heads is ignored)
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
    ),
    # OLMo (v1): parameter-free LayerNorms; clip_qkv left None here (tests set it)
    "olmo": ("OlmoConfig", "OlmoForCausalLM", {"pad_token_id": None}),
    # Granite: logit scale attention_multiplier (not 1/sqrt(Dh))
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"attention_multiplier": 0.2}),
    # SmolLM3: layer 1 is a NoPE layer (no rotation: left unpatched, GL(d_h) in the group)
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", {"no_rope_layers": [1, 0], "pad_token_id": None}),
    # Seed-OSS: attention dropout 0 here (its default 0.1: FAVOR+ / PLASH refuse attention dropout)
    "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM", {"pad_token_id": None, "attention_dropout": 0.0}),
    # EXAONE 4: per-head q/k norms; a sliding layer (rotated) and a global layer (NoPE)
    "exaone4": (
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "pad_token_id": None},
    ),
    # StableLM, Phi (1 / 1.5 / 2), StarCoder2: LayerNorms with biases, partial rotary (StableLM, Phi),
    # ungated MLPs (Phi, StarCoder2), Phi's output projection named dense
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {"pad_token_id": None}),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {"pad_token_id": None}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"pad_token_id": None}),
    # Arcee, Apertus: ungated MLPs (relu^2, xIELU: no MLP rescaling); Apertus: per-head q/k norms
    "arcee": ("ArceeConfig", "ArceeForCausalLM", {"pad_token_id": None}),
    "apertus": ("ApertusConfig", "ApertusForCausalLM", {"pad_token_id": None}),
    # MoE: Qwen2-MoE (with a gated shared expert), PhiMoE, GraniteMoE
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "pad_token_id": None,
            **_MOE,
        },
    ),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", {"num_local_experts": 4, "pad_token_id": None, **_MOE}),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM", {"num_local_experts": 4, "pad_token_id": None, **_MOE}),
    # GLM, GLM-4: interleaved RoPE pairs (2u, 2u + 1) on half of each head, fused gate_up_proj
    "glm": ("GlmConfig", "GlmForCausalLM", {"pad_token_id": None}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {"pad_token_id": None}),
    # Cohere (Command R), Cohere 2 (Command R7B / A), Cohere 2 MoE: interleaved pairs, a table repeating
    # each frequency in place, LayerNorms without bias, attention and MLP in parallel, logit_scale;
    # Cohere 2: a sliding layer (rotated) and a full layer (NoPE); ERNIE 4.5 (and MoE): interleaved
    # pairs from a cat table. All five rotate in float32 (exact_float64 rotates in float64).
    "cohere": ("CohereConfig", "CohereForCausalLM", {"pad_token_id": None}),
    "cohere2": (
        "Cohere2Config",
        "Cohere2ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "pad_token_id": None},
    ),
    "cohere2_moe": (
        "Cohere2MoeConfig",
        "Cohere2MoeForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "mlp_layer_types": ["sparse", "sparse"],
            "num_experts": 4,
            "pad_token_id": None,
            **_MOE,
        },
    ),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM", {"use_bias": True, "pad_token_id": None}),
    "ernie4_5_moe": (
        "Ernie4_5_MoeConfig",
        "Ernie4_5_MoeForCausalLM",
        {
            "use_bias": True,
            "moe_num_experts": 4,
            "moe_k": 2,
            "moe_intermediate_size": 32,
            "moe_num_shared_experts": 1,
            "moe_layer_start_index": 0,
            "moe_layer_end_index": 1,
            "pad_token_id": None,
            "experts_implementation": "eager",
        },
    ),
    # GPT-OSS: attention sinks, a sliding layer and a full layer, its default YaRN table (cos and sin
    # times attention_scaling 1.35) holding each frequency once, clamped SwiGLU experts (not rescaled)
    "gpt_oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "num_local_experts": 4,
            "pad_token_id": None,
            **_MOE,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1.5e5,
                "factor": 32.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 4,
            },
        },
    ),
    # Helium: interleaved pairs; Ministral: Mistral's layout; VaultGemma: Gemma 2's soft-cap and scalar;
    # Nemotron: partial rotary (half of each head), LayerNorm1P, relu^2 MLP; HyperCLOVA X: Granite's
    # multipliers; Jais 2: ungated MLP; FlexOLMo: OLMo 2's norms with experts; Solar Open: experts with a
    # shared expert; MiniMax-M2: q/k norms over all heads, experts
    "helium": ("HeliumConfig", "HeliumForCausalLM", {"pad_token_id": None}),
    "ministral": ("MinistralConfig", "MinistralForCausalLM", {"pad_token_id": None}),
    "vaultgemma": (
        "VaultGemmaConfig",
        "VaultGemmaForCausalLM",
        {"pad_token_id": None, "query_pre_attn_scalar": 12, "final_logit_softcapping": None},
    ),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", {"pad_token_id": None}),
    "hyperclovax": ("HyperCLOVAXConfig", "HyperCLOVAXForCausalLM", {"pad_token_id": None, "attention_multiplier": 0.2}),
    "jais2": ("Jais2Config", "Jais2ForCausalLM", {"pad_token_id": None}),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM", {"num_experts": 4, "pad_token_id": None, **_MOE}),
    "solar_open": (
        "SolarOpenConfig",
        "SolarOpenForCausalLM",
        {"n_routed_experts": 4, "moe_intermediate_size": 32, "pad_token_id": None, **_MOE},
    ),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM", {"num_local_experts": 4, "pad_token_id": None, **_MOE}),
    # EXAONE MoE (EXAONE 4's per-head q/k norms and NoPE global layers), GLM-4.5 (GLM-4 MoE: partial
    # rotary, Llama's pairing), Granite MoE with a shared expert: experts; Ministral 3: YaRN and a query
    # scaling growing with the position past original_max_position_embeddings (here 8, so that the
    # tests' positions reach it)
    "exaone_moe": (
        "ExaoneMoeConfig",
        "ExaoneMoeForCausalLM",
        {
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "pad_token_id": None,
            **_MOE,
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
        },
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {"n_routed_experts": 4, "moe_intermediate_size": 32, "pad_token_id": None, **_MOE},
    ),
    "granitemoeshared": (
        "GraniteMoeSharedConfig",
        "GraniteMoeSharedForCausalLM",
        {"num_local_experts": 4, "pad_token_id": None, **_MOE},
    ),
    "ministral3": (
        "Ministral3Config",
        "Ministral3ForCausalLM",
        {
            "pad_token_id": None,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1e6,
                "factor": 16.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1,
            },
        },
    ),
    # MLA (_MLA). DeepSeek-V2 (and V2-Lite, Coder-V2): a full-rank q_proj, a complex rotary table on
    # interleaved pairs. DeepSeek-V3: a low-rank q (q_lora_rank 16), interleaved pairs, YaRN with
    # mscale != mscale_all_dim (magnitude 1.065 on the rope blocks, mscale_all_dim^2 on the logit
    # scale). GLM-4.7-Flash: a full-rank q_proj, rotate-half pairs, the default table
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", {**_MLA, "q_lora_rank": None}),
    "deepseek_v3": (
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            **_MLA,
            "q_lora_rank": 16,
            "rope_interleave": True,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "mscale": 1.0,
                "mscale_all_dim": 0.5,
            },
        },
    ),
    "glm4_moe_lite": (
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        {**_MLA, "q_lora_rank": None, "rope_interleave": False},
    ),
    # LongCat-Flash: MLA with LoRA scalings, two attention blocks per layer, zero experts
    "longcat_flash": (
        "LongcatFlashConfig",
        "LongcatFlashForCausalLM",
        {
            **_MLA,
            "q_lora_rank": 16,
            "ffn_hidden_size": 64,
            "expert_ffn_hidden_size": 32,
            "moe_topk": 2,
            "zero_expert_num": 2,
            "routed_scaling_factor": 1.0,
        },
    ),
    # Mistral Small 4: MLA (interleaved pairs) with Ministral 3's YaRN table and query scaling by position
    "mistral4": (
        "Mistral4Config",
        "Mistral4ForCausalLM",
        {
            **_MLA,
            "head_dim": 12,
            "q_lora_rank": 16,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1e4,
                "factor": 16.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 0.5,
                "llama_4_scaling_beta": 0.1,
            },
        },
    ),
    # MiniCPM3: dense MLA with rotate-half pairs and MiniCPM's scaled residuals (embedding scale 1 and
    # dim_model_base = hidden here, not 12 and 256: logits of the other tiny models' size, so the float32
    # parity check reads the same rounding; float64 parity holds either way)
    "minicpm3": (
        "MiniCPM3Config",
        "MiniCPM3ForCausalLM",
        {**_MLA_ATTENTION, "q_lora_rank": 16, "scale_emb": 1.0, "dim_model_base": 32},
    ),
    # DeepSeek sparse attention (DSA): DeepSeek-V3.2 and GLM-5 (whose second layer reuses the first's
    # selection) keep each query's top index_topk keys by an indexer of 2 heads of 8 (native RoPE on its
    # first 4). 64 here: the shared checks (FAVOR+ / PLASH cores among them) read dense causal attention;
    # the DSA tests set 6, so that their sequences attend sparsely
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM", {**_MLA, **_DSA}),
    "glm_moe_dsa": ("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM", {**_MLA, **_DSA, "indexer_types": ["full", "shared"]}),
    # Hunyuan (dense, and MoE with 4 experts, top 2): per-head q/k RMSNorms AFTER the rotation
    "hunyuan_v1_dense": (
        "HunYuanDenseV1Config",
        "HunYuanDenseV1ForCausalLM",
        {"pad_token_id": None, "eod_token_id": None, "sep_token_id": None},
    ),
    "hunyuan_v1_moe": (
        "HunYuanMoEV1Config",
        "HunYuanMoEV1ForCausalLM",
        {
            "pad_token_id": None,
            "eod_token_id": None,
            "sep_token_id": None,
            "num_experts": 4,
            "moe_topk": 2,
            "experts_implementation": "eager",
        },
    ),
    # Tencent HY-V3, Aleph Alpha Kolibri-1: Qwen3-like (per-head q/k norms), MoE with a shared expert
    "hy_v3": (
        "HYV3Config",
        "HYV3ForCausalLM",
        {
            "pad_token_id": None,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "mlp_layer_types": ["dense", "sparse"],
            **_MOE,
        },
    ),
    "kolibri1": (
        "Kolibri1Config",
        "Kolibri1ForCausalLM",
        {
            "pad_token_id": None,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            **_MOE,
        },
    ),
    # rednote dots.llm1: Qwen3's attention (per-head q/k norms), DeepSeek-style MoE (a dense layer, then
    # 4 routed experts and a shared one); Meta CWM: Llama's attention, a sliding and a full layer;
    # Apertus 1.5 (its text model): per-head q/k norms, ungated xIELU MLP as apertus
    "dots1": (
        "Dots1Config",
        "Dots1ForCausalLM",
        {
            "pad_token_id": None,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            **_MOE,
        },
    ),
    "cwm": (
        "CwmConfig",
        "CwmForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "pad_token_id": None,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
    ),  # its config wants ints
    "apertus1p5_text": ("Apertus1p5TextConfig", "Apertus1p5TextForCausalLM", {"pad_token_id": None}),
    # NanoChat: RoPE turning by -theta p (its rotate_half is cat(x2, -x1)), parameter-free q/k RMSNorms
    # after the rotation, an ungated relu^2 MLP, a final logit soft-cap
    "nanochat": ("NanoChatConfig", "NanoChatForCausalLM", {"pad_token_id": None}),
    # LFM2 (Liquid): a short-convolution layer, then an attention layer with per-head q/k RMSNorms named
    # q_layernorm / k_layernorm and an out_proj; SwiGLU MLPs named w1 (gate), w3 (up), w2 (down)
    "lfm2": (
        "Lfm2Config",
        "Lfm2ForCausalLM",
        {"pad_token_id": None, "layer_types": ["conv", "full_attention"], "block_auto_adjust_ff_dim": False},
    ),
    # Qwen3-Next: a Gated DeltaNet (linear attention) layer, then a full-attention layer whose q_proj
    # also gives an output gate (rows [q_h; g_h] per head), (1 + w) q/k norms, partial rotary (half of
    # each head here), MoE with a shared expert
    "qwen3_next": (
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        {
            "layer_types": ["linear_attention", "full_attention"],
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
            **_MOE,
        },
    ),
    # Qwen3.5 (its text model): Qwen3-Next's attention and Gated DeltaNet layers, dense MLPs; its
    # multimodal rotary table reduces to RoPE for text positions (one position per token)
    "qwen3_5_text": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        {
            "layer_types": ["linear_attention", "full_attention"],
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.5,
                "mrope_section": [1, 1, 0],
            },
        },
    ),
    # Qwen3.5-MoE (its text model): Qwen3.5's layers with Qwen3-Next's MoE (a shared expert)
    "qwen3_5_moe_text": (
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeForCausalLM",
        {
            "layer_types": ["linear_attention", "full_attention"],
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.5,
                "mrope_section": [1, 1, 0],
            },
            **_MOE,
        },
    ),
    # AFMoE (Arcee Trinity): a local (sliding, rotated) layer and a global NoPE layer, per-head q/k norms,
    # an output gate from its own gate_proj, a dense layer then MoE (4 experts, a shared one)
    "afmoe": (
        "AfmoeConfig",
        "AfmoeForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "num_experts": 4,
            "num_shared_experts": 1,
            "moe_intermediate_size": 32,
            "num_dense_layers": 1,
            **_MOE,
        },
    ),
}


#: families whose q/k norms come after the rotation (Hunyuan: query_layernorm, key_layernorm)
POST_NORM_FAMILIES = ("hunyuan_v1_dense", "hunyuan_v1_moe")
#: families whose q/k RMSNorm weights the tiny models draw around 1 (HF starts them at exactly 1; POST_NORM_FAMILIES'
#: too)
QK_NORM_FAMILIES = (
    "qwen3",
    "qwen3_moe",
    "gemma3_text",
    "olmo2",
    "olmo3",
    "olmoe",
    "exaone4",
    "apertus",
    "flex_olmo",
    "minimax_m2",
    "exaone_moe",
    "hy_v3",
    "kolibri1",
    "dots1",
    "apertus1p5_text",
    "lfm2",
    "qwen3_next",
    "afmoe",
    "qwen3_5_text",
    "qwen3_5_moe_text",
)


def _tiny(dtype, positional=None, seed=0, attn="eager", init=0.2, family="llama", **opts):
    """d_model 32, 4 query heads of Dh 8 over 2 key heads (GQA), 2 layers, vocab 40, of a FAMILY_MODELS family
    (the q/k norm weights of QK_NORM_FAMILIES are drawn around 1: HF starts them at exactly 1)."""
    import transformers as tf

    from symformer.integrations import hf

    conf, cls, extra = FAMILY_MODELS[family]
    args = dict(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        head_dim=8,
        attention_bias=True,
        attn_implementation=attn,
        bos_token_id=None,
        eos_token_id=None,
        initializer_range=init,
    )  # 0.2: weights large enough that attention moves logits
    cfg = getattr(tf, conf)(**{**args, **extra})  # the family's own settings win (MLA: key heads = heads)
    torch.manual_seed(seed)
    model = getattr(tf, cls)(cfg).to(dtype).eval()
    if family in QK_NORM_FAMILIES or family in POST_NORM_FAMILIES:
        with torch.no_grad():
            for attn in attention_modules(model):  # LFM2: the attention layers only (its others are convolutions)
                norms = qk_norms(attn) if family in QK_NORM_FAMILIES else (attn.query_layernorm, attn.key_layernorm)
                for norm in norms:
                    norm.weight.normal_(1.0, 0.5)
    return model if positional is None else hf.patch_positional(model, positional, **opts)


@torch.no_grad()
def _logits(model, x):
    return model(x).logits


def parity(seed: int, n: int = 48) -> dict:
    """Max |logit difference|, patched vs native; float64 through exact_float64 (HF's table and RMSNorms are float32
    for every dtype: hf_exact's docstring), with the untouched float64 model's number kept for the record."""
    from symformer.integrations.hf import exact_float64

    x = torch.randint(0, 40, (2, n), generator=torch.Generator().manual_seed(seed))
    out = {
        "f32": float(
            (_logits(_tiny(torch.float32, "rope", seed), x) - _logits(_tiny(torch.float32, None, seed), x)).abs().max()
        )
    }
    out["f64_untouched_hf_float32_paths"] = float(
        (_logits(_tiny(torch.float64, "rope", seed), x) - _logits(_tiny(torch.float64, None, seed), x)).abs().max()
    )
    ref = _logits(exact_float64(_tiny(torch.float64, None, seed)), x)
    out["f64"] = float((_logits(exact_float64(_tiny(torch.float64, "rope", seed)), x) - ref).abs().max())
    out["string_identity"] = float(
        (_logits(exact_float64(_tiny(torch.float64, "string", seed, init_scale=0.0)), x) - ref).abs().max()
    )
    out["string_control"] = float(
        (_logits(exact_float64(_tiny(torch.float64, "string", seed, init_scale=0.2)), x) - ref).abs().max()
    )
    out["f64_by_family"] = {}
    for fam in FAMILY_MODELS:  # the same check on every supported family
        ref = _logits(exact_float64(_tiny(torch.float64, None, seed, family=fam)), x)
        got = _logits(exact_float64(_tiny(torch.float64, "rope", seed, family=fam)), x)
        out["f64_by_family"][fam] = float((got - ref).abs().max())
    return out


def favor_convergence(seed: int, features=(64, 1024, 16384), init: float = 0.05) -> dict:
    """Weights at init std 0.05 keep |q^|, |k^| moderate: FAVOR+'s variance grows like exp(|q^|^2 + |k^|^2) (T7.4)."""
    from symformer.integrations import hf

    x = torch.randint(0, 40, (2, 32), generator=torch.Generator().manual_seed(seed))
    ref = _logits(_tiny(torch.float64, None, seed, init=init), x)
    out = {}
    for m in features:
        # seed + 1: layer l draws its features with 1000 (seed + 1) + l, never the generator of the inputs x
        model = hf.configure(_tiny(torch.float64, None, seed, init=init), "favor", n_features=m, seed=seed + 1)
        out[m] = float((_logits(model, x) - ref).abs().max())
    return out


def teleport_invariance(seed: int) -> dict:
    from symformer.integrations import hf
    from symformer.integrations.hf import exact_float64

    x = torch.randint(0, 40, (2, 24), generator=torch.Generator().manual_seed(seed))
    out = {}
    cases = [
        ("native_rope", None, {}),
        ("string", "string", {"init_scale": 0.3}),
        ("espr", "espr", {"init_scale": 0.05}),
    ]
    cases += [(f"{fam}_native_rope", None, {"family": fam}) for fam in FAMILY_MODELS if fam != "llama"]
    for name, pos, opts in cases:
        model = exact_float64(_tiny(torch.float64, pos, seed, **opts))
        ref = _logits(model, x)
        group = hf.symmetry_group(model, ffn=True)
        group.apply(model, group.random(torch.Generator().manual_seed(seed + 1)))
        out[name] = float((_logits(model, x) - ref).abs().max() / ref.abs().max())
    return out


def train_runs(ctx: RunContext) -> dict:
    from symformer.data import load_char_text
    from symformer.integrations.hf_lm import TinyLlama, n_parameters, tiny_llama, train_lm

    quick = ctx.quick
    block = 64 if quick else 128
    split = load_char_text(
        block=block, data_dir=ctx.data_file("tinyshakespeare.txt").parent, max_chars=300_000 if quick else None
    )
    spec = (
        TinyLlama(hidden_size=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=160) if quick else TinyLlama()
    )
    steps = 60 if quick else 600
    out = {}
    for pos in POSITIONALS:
        model = tiny_llama(split.meta["vocab_size"], spec, pos, seed=ctx.seed, **TRAIN_POSITIONALS[pos])
        curve = train_lm(
            model,
            split,
            steps,
            batch_size=8 if quick else 16,
            lr=3e-3,
            eval_every=max(steps // 3, 1),
            seed=ctx.seed,
            eval_batches=4 if quick else 32,
        )
        out[pos] = {
            "val_loss": curve.val_loss,
            "steps": curve.steps,
            "seconds": curve.seconds,
            "params": n_parameters(model),
        }
        if ctx.progress:
            print(f"[hf] {pos}: val loss {curve.val_loss[-1]:.3f} ({curve.seconds:.0f}s)", flush=True)
    return {"runs": out, "block": block, "steps": steps, "spec": dataclasses.asdict(spec)}


def _figure(ctx: RunContext, runs: dict) -> str | None:
    try:
        plt = pyplot()
    except ImportError:  # pragma: no cover
        return None
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for pos, r in runs.items():
        ax.plot(r["steps"], r["val_loss"], marker="o", label=pos)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title("tiny Llama on tiny Shakespeare")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "hf_val_loss.png", dpi=120)
    plt.close(fig)
    return "hf_val_loss.png"


@experiment(
    "hf",
    "symformer parts in Hugging Face Llama models: parity, FAVOR+, teleport invariance, training",
    data_files=("tinyshakespeare.txt",),
    requires={"transformers": "hf"},
)
def run(ctx: RunContext) -> ExperimentResult:
    from symformer.integrations.hf import require_transformers

    tf = require_transformers()
    t0 = time.perf_counter()
    res = ExperimentResult(
        config={
            "transformers": tf.__version__,
            "model": "LlamaForCausalLM from LlamaConfig, GQA 4 query / 2 key heads, Dh 8",
        }
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: intra-op threads only add synchronisation (as experiments/teleport.py)
    try:
        par, fav, tel = parity(ctx.seed), favor_convergence(ctx.seed), teleport_invariance(ctx.seed)
        tr = train_runs(ctx)
    finally:
        torch.set_num_threads(threads)
    res.metrics.update(
        {
            "hf_rope_parity_max_abs_err_f32": par["f32"],
            "hf_rope_parity_max_abs_err_f64": par["f64"],
            "hf_string_identity_parity_max_abs_err": par["string_identity"],
            "hf_teleport_invariance_max_rel_err": max(tel.values()),
            "hf_val_loss": {p: r["val_loss"][-1] for p, r in tr["runs"].items()},
            "hf_rope_parity_f64_untouched_hf_float32_paths": par["f64_untouched_hf_float32_paths"],
            "hf_rope_parity_max_abs_err_f64_by_family": par["f64_by_family"],
            "hf_favor_max_abs_logit_err": {str(m): e for m, e in fav.items()},
            "hf_teleport_invariance_rel_err": tel,
        }
    )
    res.config.update(
        {
            "train": {k: v for k, v in tr.items() if k != "runs"},
            "curves": tr["runs"],
            "string_control_err": par["string_control"],
        }
    )
    setting = (
        "tiny LlamaForCausalLM (d 32, 2 layers, 4 query / 2 key heads, Dh 8), 2 x 48 tokens, 1 seed; the f64 "
        "parity also on the same tiny Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, Mixtral, Qwen3-MoE, "
        "OLMo, OLMo 2, OLMo 3, OLMoE, Phi-3, GPT-NeoX, Granite, SmolLM3, Seed-OSS, EXAONE 4, StableLM, "
        "StarCoder2, Phi, Arcee, Apertus, Qwen2-MoE, PhiMoE, GraniteMoE, GLM and GLM-4"
    )
    res.claims += [
        _claim(
            "T2.4-hf",
            "symformer RoPE in the half pairing with the model's frequencies is HF Llama's RoPE",
            "ESPR T2.4-T2.7 (RoPE: U = I), rotate-half layout",
            f"max |dlogit| f32 {par['f32']:.2e}, f64 "
            f"{par['f64']:.2e}; f64 on each family: "
            + ", ".join(f"{k} {v:.1e}" for k, v in par["f64_by_family"].items()),
            par["f32"] <= 1e-5 and par["f64"] <= 1e-10 and max(par["f64_by_family"].values()) <= 1e-10,
            "thresholds 1e-5 (float32) and 1e-10 (float64); float64 models run HF's cos/sin table and RMSNorm "
            "formulas in float64 (integrations.hf_exact; HF computes both in float32 for every dtype: "
            f"{par['f64_untouched_hf_float32_paths']:.1e} between the untouched float64 models)",
            setting,
            "exact identity (no numbers in the paper)",
        ),
        _claim(
            "T2.7-hf",
            "STRING with Cayley factor P = I equals RoPE",
            "ESPR T2.7, T3.1 (cayley(0) = I)",
            f"max |dlogit| {par['string_identity']:.2e} (P != I control: {par['string_control']:.2e})",
            par["string_identity"] <= 1e-10 and par["string_control"] > 1e-6,
            "float64; the control with init_scale 0.2 must differ",
            setting,
            "exact identity",
        ),
        _claim(
            "T7.3-hf",
            "FAVOR+ approaches softmax attention as the number of features m grows",
            'ESPR T7.3 (unbiased positive features), via AttentionInterface "symformer_favor"',
            ", ".join(f"m={m}: {e:.2e}" for m, e in fav.items()),
            all(a > b for a, b in zip(list(fav.values()), list(fav.values())[1:])),
            "max |logit - eager logit| on 2 x 32 tokens, one fixed feature draw per m (a non-monotone run "
            "would read fails)",
            setting,
            "asymptotic statement, no model",
        ),
        _claim(
            "Sec.3-hf",
            "the output is invariant under the attention symmetry group (GQA: U shared per key head)",
            "teleportation paper Sec. 3, eq. (9) (RoPE: H(d_h)); STRING/ESPR groups are ours",
            ", ".join(f"{k}: {v:.1e}" for k, v in tel.items()),
            max(tel.values()) <= 1e-10,
            "float64, one random element (scale 0.5, head permutations, gated-MLP rescaling) per model, "
            "max relative logit change; Llama with native RoPE, STRING, ESPR, and every other family with its "
            "native RoPE (Qwen3-Next, Qwen3.5, AFMoE: their output gates leave diagonal V / O factors only, "
            "ours). "
            "Qwen3 (per-head q/k norms before the rotation): the Q/K part rescales the norm weights, "
            "constant on each RoPE pair (OLMo: norms over all heads, one scaling per key head); MoE: per-expert "
            "MLP rescaling (ours)",
            setting,
            "MHA without GQA; RoPE only",
        ),
    ]
    fig = _figure(ctx, tr["runs"])
    if fig:
        res.figures.append(fig)
    res.notes.append(
        f"training: {tr['steps']} steps, block {tr['block']}, batch {8 if ctx.quick else 16}, AdamW 3e-3, "
        f"spec {tr['spec']}, "
        f"{tr['runs']['rope']['params']} parameters; one seed, so val-loss differences between "
        "positional parts are not significance-tested; timings under a shared 2-core CPU"
    )
    res.notes.append(f"wall time {time.perf_counter() - t0:.0f}s")
    return res
