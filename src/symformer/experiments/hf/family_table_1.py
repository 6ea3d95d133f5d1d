"""The tiny Hugging Face models of experiment `hf`, first half of the table: family -> (config class, model class,
extra config). families.FAMILY_MODELS joins the halves (the table is data; split to keep modules short)."""

from __future__ import annotations

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
FIRST = {
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
}
