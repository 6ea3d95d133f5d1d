"""Tiny config-built Llama-family models (no download) for the integration tests."""
from __future__ import annotations

import torch

FAMILIES = ("llama", "mistral", "qwen2")


def tiny(family: str = "llama", dtype=torch.float32, seed: int = 0, kv_heads: int = 2, **kw):
    """d_model 32, 4 query heads of Dh 8 reading `kv_heads` key heads (GQA when < 4), 2 layers, vocab 40."""
    import transformers as tf
    cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
           "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM)}[family]
    args = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=kv_heads, max_position_embeddings=128)
    args.update(kw)
    torch.manual_seed(seed)
    return cls[1](cls[0](**args)).to(dtype).eval()


class Float64Table(torch.nn.Module):
    """The model's cos/sin table (HF's formula) computed in float64: HF computes it in float32 whatever the model
    dtype, which alone puts ~1e-8 between two float64 models; this makes the float64 reference exact."""

    def __init__(self, rotary):
        super().__init__()
        self.register_buffer("inv_freq", rotary.inv_freq.detach().to(torch.float64), persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def float64_reference(model):
    """An unpatched float64 model whose rotary table is exact in float64 (see Float64Table)."""
    model.model.rotary_emb = Float64Table(model.model.rotary_emb)
    return model


def ids(batch: int = 2, n: int = 16, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))
