"""The built-in records of the multi-head latent attention families (MLA: hf.mla) and of the hybrid families, whose
attention layers sit beside short convolutions or Gated DeltaNet layers (hf.records has the others and the
tiny config conventions)."""

from __future__ import annotations

from symformer.integrations.hf.records import MOE as _MOE
from symformer.integrations.hf.schema import FamilyRecord

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
#: Qwen3.5's tiny text model (dense and MoE): a Gated DeltaNet layer, then a full-attention layer whose multimodal
#: table rotates half of each head
_QWEN3_5 = {
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
}
RECORDS = (
    # MLA (_MLA). DeepSeek-V2 (and V2-Lite, Coder-V2): a full-rank q_proj, a complex rotary table on
    # interleaved pairs. DeepSeek-V3: a low-rank q (q_lora_rank 16), interleaved pairs, YaRN with
    # mscale != mscale_all_dim (magnitude 1.065 on the rope blocks, mscale_all_dim^2 on the logit
    # scale). GLM-4.7-Flash: a full-rank q_proj, rotate-half pairs, the default table
    FamilyRecord(
        "deepseek_v2",
        "DeepseekV2Attention",
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        {**_MLA, "q_lora_rank": None},
        products="DeepSeek-V2, V2-Lite, Coder-V2",
        pairing="interleaved",
        table="complex",
        mla=True,
    ),
    FamilyRecord(
        "deepseek_v3",
        "DeepseekV3Attention",
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
        products="DeepSeek-V3, Kimi K2",
        pairing="config",
        mla=True,
    ),
    FamilyRecord(
        "glm4_moe_lite",
        "Glm4MoeLiteAttention",
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        {**_MLA, "q_lora_rank": None, "rope_interleave": False},
        products="GLM-4.7-Flash",
        pairing="config",
        mla=True,
    ),
    # LongCat-Flash: MLA with LoRA scalings, two attention blocks per layer, zero experts
    FamilyRecord(
        "longcat_flash",
        "LongcatFlashMLA",
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
        products="LongCat-Flash",
        pairing="interleaved",
        mla=True,
    ),
    # Mistral Small 4: MLA (interleaved pairs) with Ministral 3's YaRN table and query scaling by position
    FamilyRecord(
        "mistral4",
        "Mistral4Attention",
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
        products="Mistral Small 4",
        pairing="config",
        mla=True,
    ),
    # MiniCPM3: dense MLA with rotate-half pairs and MiniCPM's scaled residuals (embedding scale 1 and
    # dim_model_base = hidden here, not 12 and 256: logits of the other tiny models' size, so the float32
    # parity check reads the same rounding; float64 parity holds either way)
    FamilyRecord(
        "minicpm3",
        "MiniCPM3Attention",
        "MiniCPM3Config",
        "MiniCPM3ForCausalLM",
        {**_MLA_ATTENTION, "q_lora_rank": 16, "scale_emb": 1.0, "dim_model_base": 32},
        products="MiniCPM3",
        pairing="config",
        mla=True,
    ),
    # DeepSeek sparse attention (DSA): DeepSeek-V3.2 and GLM-5 (whose second layer reuses the first's
    # selection) keep each query's top index_topk keys by an indexer of 2 heads of 8 (native RoPE on its
    # first 4). 64 here: the shared checks (FAVOR+ / PLASH cores among them) read dense causal attention;
    # the DSA tests set 6, so that their sequences attend sparsely
    FamilyRecord(
        "deepseek_v32",
        "DeepseekV32Attention",
        "DeepseekV32Config",
        "DeepseekV32ForCausalLM",
        {**_MLA, **_DSA},
        products="DeepSeek-V3.2",
        pairing="interleaved",
        mla=True,
    ),
    FamilyRecord(
        "glm_moe_dsa",
        "GlmMoeDsaAttention",
        "GlmMoeDsaConfig",
        "GlmMoeDsaForCausalLM",
        {**_MLA, **_DSA, "indexer_types": ["full", "shared"]},
        products="GLM-5",
        pairing="interleaved",
        mla=True,
    ),
    # LFM2 (Liquid): a short-convolution layer, then an attention layer with per-head q/k RMSNorms named
    # q_layernorm / k_layernorm and an out_proj; SwiGLU MLPs named w1 (gate), w3 (up), w2 (down)
    FamilyRecord(
        "lfm2",
        "Lfm2Attention",
        "Lfm2Config",
        "Lfm2ForCausalLM",
        {"pad_token_id": None, "layer_types": ["conv", "full_attention"], "block_auto_adjust_ff_dim": False},
        products="Liquid LFM2",
        out_proj="out_proj",
        qk_norm="before",
        qk_norm_names=("q_layernorm", "k_layernorm"),
        glu_names=("w1", "w3", "w2"),
    ),
    # Qwen3-Next: a Gated DeltaNet (linear attention) layer, then a full-attention layer whose q_proj
    # also gives an output gate (rows [q_h; g_h] per head), (1 + w) q/k norms, partial rotary (half of
    # each head here), MoE with a shared expert
    FamilyRecord(
        "qwen3_next",
        "Qwen3NextAttention",
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
        products="Qwen3-Next",
        qk_norm="before",
        output_gate="q_proj",
        norms={"Qwen3NextRMSNormGated": "gated_rms", "Qwen3NextRMSNorm": "offset_rms"},
    ),
    # Qwen3.5 (its text model): Qwen3-Next's attention and Gated DeltaNet layers, dense MLPs; its
    # multimodal rotary table reduces to RoPE for text positions (one position per token)
    FamilyRecord(
        "qwen3_5_text",
        "Qwen3_5Attention",
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        _QWEN3_5,
        products="Qwen3.5's text model",
        table="mrope",
        qk_norm="before",
        output_gate="q_proj",
        norms={"Qwen3_5RMSNormGated": "gated_rms", "Qwen3_5RMSNorm": "offset_rms"},
    ),
    # Qwen3.5-MoE (its text model): Qwen3.5's layers with Qwen3-Next's MoE (a shared expert)
    FamilyRecord(
        "qwen3_5_moe_text",
        "Qwen3_5MoeAttention",
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeForCausalLM",
        {
            **_QWEN3_5,
            "num_experts": 4,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            **_MOE,
        },
        products="Qwen3.5-MoE's text model",
        table="mrope",
        qk_norm="before",
        output_gate="q_proj",
        norms={"Qwen3_5MoeRMSNormGated": "gated_rms", "Qwen3_5MoeRMSNorm": "offset_rms"},
    ),
    # AFMoE (Arcee Trinity): a local (sliding, rotated) layer and a global NoPE layer, per-head q/k norms,
    # an output gate from its own gate_proj, a dense layer then MoE (4 experts, a shared one)
    FamilyRecord(
        "afmoe",
        "AfmoeAttention",
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
        products="Arcee AFMoE / Trinity",
        rotating_layers="local",
        qk_norm="before",
        output_gate="gate_proj",
    ),
)
