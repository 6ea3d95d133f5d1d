"""The config-built Llama the HF benchmark suites decode with (generation, gpu_ready): one builder, so they time
and count the same model class, seeded the same way, with no special tokens and HF's SDPA attention."""

from __future__ import annotations

from symformer._rng import seed_torch


def config_llama(seed: int, max_len: int, **config):
    """LlamaForCausalLM(LlamaConfig(**config)) with `max_len` positions, its weights drawn after seed_torch(seed)."""
    import transformers as tf

    seed_torch(seed)
    cfg = tf.LlamaConfig(
        max_position_embeddings=max_len, bos_token_id=None, eos_token_id=None, pad_token_id=None, **config
    )
    return tf.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
