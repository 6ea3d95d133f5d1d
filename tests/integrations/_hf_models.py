"""Tiny config-built Llama-family models (no download) for the integration tests."""
from __future__ import annotations

import torch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "mixtral", "qwen3_moe", "gemma2", "gemma3_text")


def tiny(family: str = "llama", dtype=torch.float32, seed: int = 0, kv_heads: int = 2, init: float = 0.2, **kw):
    """d_model 32, 4 query heads of Dh 8 reading `kv_heads` key heads (GQA when < 4), 2 layers, vocab 40.
    init: weight std (0.2 makes attention move the logits; HF's 0.02 leaves them almost attention-free)."""
    import transformers as tf
    cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
           "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM), "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
           "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM), "mixtral": (tf.MixtralConfig, tf.MixtralForCausalLM),
           "qwen3_moe": (tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM),
           "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM),
           "gemma3_text": (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM)}[family]
    args = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=kv_heads, max_position_embeddings=128, initializer_range=init,
                bos_token_id=None, eos_token_id=None)
    if family in ("qwen3", "gemma", "qwen3_moe", "gemma2", "gemma3_text"):
        args["head_dim"] = 8  # their head_dim is its own setting (default 128 / 256), not hidden / heads
    if family == "mixtral":
        args.update(num_local_experts=4, num_experts_per_tok=2)
    if family == "qwen3_moe":
        args.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    if family == "gemma2":  # a window shorter than the test sequences, a logit cap, a scale other than 1/sqrt(Dh)
        args.update(sliding_window=6, attn_logit_softcapping=5.0, final_logit_softcapping=None,
                    query_pre_attn_scalar=12)
    if family == "gemma3_text":  # a sliding layer (base 1e4, window 6) and a full layer (base 1e6), own scale
        args.update(layer_types=["sliding_attention", "full_attention"], sliding_window=6, query_pre_attn_scalar=12)
    if family in ("mixtral", "qwen3_moe"):
        args["experts_implementation"] = "eager"  # the grouped-matmul experts take no float64 on CPU
    args.update(kw)
    torch.manual_seed(seed)
    return cls[1](cls[0](**args)).to(dtype).eval()


def float64_reference(model):
    """HF runs its rotary table and RMSNorms in float32 for every dtype; exact_float64 makes float64 mean float64."""
    from symformer.integrations.hf import exact_float64
    return exact_float64(model)


def ids(batch: int = 2, n: int = 16, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))
