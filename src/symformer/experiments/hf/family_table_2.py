"""The tiny Hugging Face models of experiment `hf`, second half of the table (see family_table_1)."""

from __future__ import annotations

from symformer.experiments.hf.family_table_1 import _DSA, _MLA, _MLA_ATTENTION, _MOE

SECOND = {
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
