"""The built-in family records (hf.families.FamilyRecord) of the families with one multi-head attention per layer
(plain, fused, normed or gated), registered by hf.families on first use; the multi-head latent attention and hybrid
families are in hf.records_mla. Adding a family is adding its record to one of the two.

Each record's `tiny` is its tiny test model's config beyond the shared small sizes (d_model 32, 4 query heads of Dh 8,
2 layers: tests/integrations/_hf_models.tiny, experiment `hf`): MoE sizes, sliding windows, rope tables, and the
settings that exercise what the record describes (a window shorter than the sequence, a YaRN table, a NoPE layer).
"""

from __future__ import annotations

from symformer.integrations.hf.schema import FamilyRecord

#: the tiny models' MoE: 4 experts, top 2, HF's eager experts (the grouped-matmul ones take no float64 on CPU)
MOE = {"num_experts_per_tok": 2, "experts_implementation": "eager"}
RECORDS = (
    FamilyRecord("llama", "LlamaAttention", "LlamaConfig", "LlamaForCausalLM", {}, sliding_window_kwarg=False),
    FamilyRecord("mistral", "MistralAttention", "MistralConfig", "MistralForCausalLM", {}),
    FamilyRecord("qwen2", "Qwen2Attention", "Qwen2Config", "Qwen2ForCausalLM", {}),
    FamilyRecord("qwen3", "Qwen3Attention", "Qwen3Config", "Qwen3ForCausalLM", {}, qk_norm="before"),
    FamilyRecord(
        "gemma",
        "GemmaAttention",
        "GemmaConfig",
        "GemmaForCausalLM",
        {},
        products="Gemma (v1)",
        norms={"GemmaRMSNorm": "offset_rms"},
    ),
    FamilyRecord("mixtral", "MixtralAttention", "MixtralConfig", "MixtralForCausalLM", {"num_local_experts": 4, **MOE}),
    FamilyRecord(
        "qwen3_moe",
        "Qwen3MoeAttention",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"num_experts": 4, "moe_intermediate_size": 32, **MOE},
        qk_norm="before",
    ),
    # Gemma 2: sliding window shorter than the sequence, logit soft-cap, scale other than 1/sqrt(Dh)
    FamilyRecord(
        "gemma2",
        "Gemma2Attention",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {
            "sliding_window": 6,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": None,
            "query_pre_attn_scalar": 12,
        },
        softcap=True,
        norms={"Gemma2RMSNorm": "offset_rms"},
    ),
    # Gemma 3: a sliding layer (rotary base 1e4) and a full layer (base 1e6), per-head q/k norms
    FamilyRecord(
        "gemma3_text",
        "Gemma3Attention",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "query_pre_attn_scalar": 12},
        products="Gemma 3's text model",
        qk_norm="before",
        softcap=True,
        norms={"Gemma3RMSNorm": "offset_rms"},
    ),
    # OLMo 2 / 3, OLMoE: q/k RMSNorms over all heads at once; OLMo 3: a sliding layer (base 1e4) and a
    # full layer (base 5e5); OLMoE: fused experts
    FamilyRecord(
        "olmo2", "Olmo2Attention", "Olmo2Config", "Olmo2ForCausalLM", {}, qk_norm="before", qk_norm_span="all_heads"
    ),
    FamilyRecord(
        "olmo3",
        "Olmo3Attention",
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
        qk_norm="before",
        qk_norm_span="all_heads",
    ),
    FamilyRecord(
        "olmoe",
        "OlmoeAttention",
        "OlmoeConfig",
        "OlmoeForCausalLM",
        {"num_experts": 4, **MOE},
        qk_norm="before",
        qk_norm_span="all_heads",
    ),
    # Phi-3 (and Phi-4): one fused qkv_proj and one fused gate_up_proj
    FamilyRecord(
        "phi3",
        "Phi3Attention",
        "Phi3Config",
        "Phi3ForCausalLM",
        {"pad_token_id": None},
        products="Phi-3, Phi-4, Phi-4-mini",
        fused_qkv=("qkv_proj", "blocks"),
    ),
    # GPT-NeoX (Pythia): query_key_value fused head by head, partial rotary (here half of each head), no
    # GQA (num_key_value_heads is ignored)
    FamilyRecord(
        "gpt_neox",
        "GPTNeoXAttention",
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
        products="Pythia, GPT-NeoX",
        fused_qkv=("query_key_value", "heads"),
        out_proj="dense",
        grouped_kv=False,
    ),
    # OLMo (v1): parameter-free LayerNorms; clip_qkv left None here (tests set it)
    FamilyRecord(
        "olmo",
        "OlmoAttention",
        "OlmoConfig",
        "OlmoForCausalLM",
        {"pad_token_id": None},
        products="OLMo v1",
        norms={"OlmoLayerNorm": "layer_norm"},
    ),
    # Granite: logit scale attention_multiplier (not 1/sqrt(Dh))
    FamilyRecord("granite", "GraniteAttention", "GraniteConfig", "GraniteForCausalLM", {"attention_multiplier": 0.2}),
    # SmolLM3: layer 1 is a NoPE layer (no rotation: left unpatched, GL(d_h) in the group)
    FamilyRecord(
        "smollm3",
        "SmolLM3Attention",
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        {"no_rope_layers": [1, 0], "pad_token_id": None},
        rotating_layers="use_rope",
    ),
    # Seed-OSS: attention dropout 0 here (its default 0.1: FAVOR+ / PLASH refuse attention dropout)
    FamilyRecord(
        "seed_oss",
        "SeedOssAttention",
        "SeedOssConfig",
        "SeedOssForCausalLM",
        {"pad_token_id": None, "attention_dropout": 0.0},
    ),
    # EXAONE 4: per-head q/k norms; a sliding layer (rotated) and a global layer (NoPE)
    FamilyRecord(
        "exaone4",
        "Exaone4Attention",
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "pad_token_id": None},
        rotating_layers="sliding",
        qk_norm="before",
    ),
    # StableLM, Phi (1 / 1.5 / 2), StarCoder2: LayerNorms with biases, partial rotary (StableLM, Phi),
    # ungated MLPs (Phi, StarCoder2), Phi's output projection named dense
    FamilyRecord("stablelm", "StableLmAttention", "StableLmConfig", "StableLmForCausalLM", {"pad_token_id": None}),
    FamilyRecord(
        "starcoder2", "Starcoder2Attention", "Starcoder2Config", "Starcoder2ForCausalLM", {"pad_token_id": None}
    ),
    FamilyRecord(
        "phi",
        "PhiAttention",
        "PhiConfig",
        "PhiForCausalLM",
        {"pad_token_id": None},
        products="Phi-1, 1.5, 2",
        out_proj="dense",
    ),
    # Arcee, Apertus: ungated MLPs (relu^2, xIELU: no MLP rescaling); Apertus: per-head q/k norms
    FamilyRecord("arcee", "ArceeAttention", "ArceeConfig", "ArceeForCausalLM", {"pad_token_id": None}),
    FamilyRecord(
        "apertus", "ApertusAttention", "ApertusConfig", "ApertusForCausalLM", {"pad_token_id": None}, qk_norm="before"
    ),
    # MoE: Qwen2-MoE (with a gated shared expert), PhiMoE, GraniteMoE
    FamilyRecord(
        "qwen2_moe",
        "Qwen2MoeAttention",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "pad_token_id": None,
            **MOE,
        },
    ),
    FamilyRecord(
        "phimoe",
        "PhimoeAttention",
        "PhimoeConfig",
        "PhimoeForCausalLM",
        {"num_local_experts": 4, "pad_token_id": None, **MOE},
    ),
    FamilyRecord(
        "granitemoe",
        "GraniteMoeAttention",
        "GraniteMoeConfig",
        "GraniteMoeForCausalLM",
        {"num_local_experts": 4, "pad_token_id": None, **MOE},
    ),
    # GLM, GLM-4: interleaved RoPE pairs (2u, 2u + 1) on half of each head, fused gate_up_proj
    FamilyRecord("glm", "GlmAttention", "GlmConfig", "GlmForCausalLM", {"pad_token_id": None}, pairing="interleaved"),
    FamilyRecord(
        "glm4", "Glm4Attention", "Glm4Config", "Glm4ForCausalLM", {"pad_token_id": None}, pairing="interleaved"
    ),
    # Cohere (Command R), Cohere 2 (Command R7B / A), Cohere 2 MoE: interleaved pairs, a table repeating
    # each frequency in place, LayerNorms without bias, attention and MLP in parallel, logit_scale;
    # Cohere 2: a sliding layer (rotated) and a full layer (NoPE); ERNIE 4.5 (and MoE): interleaved
    # pairs from a cat table. All five rotate in float32 (exact_float64 rotates in float64).
    FamilyRecord(
        "cohere",
        "CohereAttention",
        "CohereConfig",
        "CohereForCausalLM",
        {"pad_token_id": None},
        products="Command R, R+",
        pairing="interleaved",
        table="interleaved",
        rotary_dtype="float32",
        qk_norm="before",
        qk_norm_flag="use_qk_norm",
        norms={"CohereLayerNorm": "centered"},
    ),
    FamilyRecord(
        "cohere2",
        "Cohere2Attention",
        "Cohere2Config",
        "Cohere2ForCausalLM",
        {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6, "pad_token_id": None},
        products="Command R7B, A",
        pairing="interleaved",
        table="interleaved",
        rotary_dtype="float32",
        rotating_layers="sliding_or_forced",
        norms={"Cohere2LayerNorm": "centered"},
    ),
    FamilyRecord(
        "cohere2_moe",
        "Cohere2MoeAttention",
        "Cohere2MoeConfig",
        "Cohere2MoeForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "mlp_layer_types": ["sparse", "sparse"],
            "num_experts": 4,
            "pad_token_id": None,
            **MOE,
        },
        pairing="interleaved",
        table="interleaved",
        rotary_dtype="float32",
        rotating_layers="sliding_or_forced",
        norms={"Cohere2MoeLayerNorm": "centered"},
    ),
    FamilyRecord(
        "ernie4_5",
        "Ernie4_5Attention",
        "Ernie4_5Config",
        "Ernie4_5ForCausalLM",
        {"use_bias": True, "pad_token_id": None},
        pairing="interleaved",
        rotary_dtype="float32",
    ),
    FamilyRecord(
        "ernie4_5_moe",
        "Ernie4_5_MoeAttention",
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
        pairing="interleaved",
        rotary_dtype="float32",
    ),
    # GPT-OSS: attention sinks, a sliding layer and a full layer, its default YaRN table (cos and sin
    # times attention_scaling 1.35) holding each frequency once, clamped SwiGLU experts (not rescaled)
    FamilyRecord(
        "gpt_oss",
        "GptOssAttention",
        "GptOssConfig",
        "GptOssForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "num_local_experts": 4,
            "pad_token_id": None,
            **MOE,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1.5e5,
                "factor": 32.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "original_max_position_embeddings": 4,
            },
        },
        table="half",
        softmax_dtype="input",
        sinks=True,
    ),
    # Helium: interleaved pairs; Ministral: Mistral's layout; VaultGemma: Gemma 2's soft-cap and scalar;
    # Nemotron: partial rotary (half of each head), LayerNorm1P, relu^2 MLP; HyperCLOVA X: Granite's
    # multipliers; Jais 2: ungated MLP; FlexOLMo: OLMo 2's norms with experts; Solar Open: experts with a
    # shared expert; MiniMax-M2: q/k norms over all heads, experts
    FamilyRecord(
        "helium", "HeliumAttention", "HeliumConfig", "HeliumForCausalLM", {"pad_token_id": None}, pairing="interleaved"
    ),
    FamilyRecord("ministral", "MinistralAttention", "MinistralConfig", "MinistralForCausalLM", {"pad_token_id": None}),
    FamilyRecord(
        "vaultgemma",
        "VaultGemmaAttention",
        "VaultGemmaConfig",
        "VaultGemmaForCausalLM",
        {"pad_token_id": None, "query_pre_attn_scalar": 12, "final_logit_softcapping": None},
        softcap=True,
        norms={"VaultGemmaRMSNorm": "offset_rms"},
    ),
    FamilyRecord("nemotron", "NemotronAttention", "NemotronConfig", "NemotronForCausalLM", {"pad_token_id": None}),
    FamilyRecord(
        "hyperclovax",
        "HyperCLOVAXAttention",
        "HyperCLOVAXConfig",
        "HyperCLOVAXForCausalLM",
        {"pad_token_id": None, "attention_multiplier": 0.2},
    ),
    FamilyRecord("jais2", "Jais2Attention", "Jais2Config", "Jais2ForCausalLM", {"pad_token_id": None}),
    FamilyRecord(
        "flex_olmo",
        "FlexOlmoAttention",
        "FlexOlmoConfig",
        "FlexOlmoForCausalLM",
        {"num_experts": 4, "pad_token_id": None, **MOE},
        qk_norm="before",
        qk_norm_span="all_heads",
    ),
    FamilyRecord(
        "solar_open",
        "SolarOpenAttention",
        "SolarOpenConfig",
        "SolarOpenForCausalLM",
        {"n_routed_experts": 4, "moe_intermediate_size": 32, "pad_token_id": None, **MOE},
    ),
    FamilyRecord(
        "minimax_m2",
        "MiniMaxM2Attention",
        "MiniMaxM2Config",
        "MiniMaxM2ForCausalLM",
        {"num_local_experts": 4, "pad_token_id": None, **MOE},
        qk_norm="before",
        qk_norm_span="all_heads",
    ),
    # EXAONE MoE (EXAONE 4's per-head q/k norms and NoPE global layers), GLM-4.5 (GLM-4 MoE: partial
    # rotary, Llama's pairing), Granite MoE with a shared expert: experts; Ministral 3: YaRN and a query
    # scaling growing with the position past original_max_position_embeddings (here 8, so that the
    # tests' positions reach it)
    FamilyRecord(
        "exaone_moe",
        "ExaoneMoeAttention",
        "ExaoneMoeConfig",
        "ExaoneMoeForCausalLM",
        {
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "pad_token_id": None,
            **MOE,
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
        },
        rotating_layers="sliding",
        qk_norm="before",
    ),
    FamilyRecord(
        "glm4_moe",
        "Glm4MoeAttention",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {"n_routed_experts": 4, "moe_intermediate_size": 32, "pad_token_id": None, **MOE},
        products="GLM-4.5",
        qk_norm="before",
        qk_norm_flag="use_qk_norm",
    ),
    FamilyRecord(
        "granitemoeshared",
        "GraniteMoeSharedAttention",
        "GraniteMoeSharedConfig",
        "GraniteMoeSharedForCausalLM",
        {"num_local_experts": 4, "pad_token_id": None, **MOE},
    ),
    FamilyRecord(
        "ministral3",
        "Ministral3Attention",
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
    # Hunyuan (dense, and MoE with 4 experts, top 2): per-head q/k RMSNorms AFTER the rotation
    FamilyRecord(
        "hunyuan_v1_dense",
        "HunYuanDenseV1Attention",
        "HunYuanDenseV1Config",
        "HunYuanDenseV1ForCausalLM",
        {"pad_token_id": None, "eod_token_id": None, "sep_token_id": None},
        products="Hunyuan",
        qk_norm="after",
        qk_norm_names=("query_layernorm", "key_layernorm"),
    ),
    FamilyRecord(
        "hunyuan_v1_moe",
        "HunYuanMoEV1Attention",
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
        products="Hunyuan MoE",
        qk_norm="after",
        qk_norm_names=("query_layernorm", "key_layernorm"),
    ),
    # Tencent HY-V3, Aleph Alpha Kolibri-1: Qwen3-like (per-head q/k norms), MoE with a shared expert
    FamilyRecord(
        "hy_v3",
        "HYV3Attention",
        "HYV3Config",
        "HYV3ForCausalLM",
        {
            "pad_token_id": None,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "mlp_layer_types": ["dense", "sparse"],
            **MOE,
        },
        products="Tencent HY-V3",
        qk_norm="before",
    ),
    FamilyRecord(
        "kolibri1",
        "Kolibri1Attention",
        "Kolibri1Config",
        "Kolibri1ForCausalLM",
        {
            "pad_token_id": None,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            **MOE,
        },
        products="Aleph Alpha Kolibri-1",
        qk_norm="before",
    ),
    # rednote dots.llm1: Qwen3's attention (per-head q/k norms), DeepSeek-style MoE (a dense layer, then
    # 4 routed experts and a shared one); Meta CWM: Llama's attention, a sliding and a full layer;
    # Apertus 1.5 (its text model): per-head q/k norms, ungated xIELU MLP as apertus
    FamilyRecord(
        "dots1",
        "Dots1Attention",
        "Dots1Config",
        "Dots1ForCausalLM",
        {
            "pad_token_id": None,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            **MOE,
        },
        products="rednote dots.llm1",
        qk_norm="before",
    ),
    FamilyRecord(
        "cwm",
        "CwmAttention",
        "CwmConfig",
        "CwmForCausalLM",
        {
            "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6,
            "pad_token_id": None,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
        products="Meta CWM",
    ),
    FamilyRecord(
        "apertus1p5_text",
        "Apertus1p5TextAttention",
        "Apertus1p5TextConfig",
        "Apertus1p5TextForCausalLM",
        {"pad_token_id": None},
        products="Apertus 1.5's text model",
        qk_norm="before",
    ),
    # NanoChat: RoPE turning by -theta p (its rotate_half is cat(x2, -x1)), parameter-free q/k RMSNorms
    # after the rotation, an ungated relu^2 MLP, a final logit soft-cap
    FamilyRecord(
        "nanochat",
        "NanoChatAttention",
        "NanoChatConfig",
        "NanoChatForCausalLM",
        {"pad_token_id": None},
        products="NanoChat",
        negated_rotation=True,
        qk_norm="after",
        qk_norm_weighted=False,
    ),
)
