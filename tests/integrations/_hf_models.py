"""Tiny config-built Llama-family models (no download) for the integration tests."""
from __future__ import annotations

import torch

from symformer.experiments.hf import FAMILY_MODELS  # the experiment's tiny configs: one table for both

FAMILIES = tuple(FAMILY_MODELS)


def tiny(family: str = "llama", dtype=torch.float32, seed: int = 0, kv_heads: int = 2, init: float = 0.2, **kw):
    """d_model 32, 4 query heads of Dh 8 reading `kv_heads` key heads (GQA when < 4), 2 layers, vocab 40, with the
    family's own settings from experiments.hf.FAMILY_MODELS (MoE experts, Gemma 2's cap and window, ...).
    init: weight std (0.2 makes attention move the logits; HF's 0.02 leaves them almost attention-free)."""
    import transformers as tf
    conf, cls, extra = FAMILY_MODELS[family]
    args = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=kv_heads, max_position_embeddings=128, initializer_range=init,
                bos_token_id=None, eos_token_id=None, head_dim=8)
    args.update(extra)  # the family's own settings win (MLA: as many key heads as heads), then the test's
    args.update(kw)
    torch.manual_seed(seed)
    return getattr(tf, cls)(getattr(tf, conf)(**args)).to(dtype).eval()


def float64_reference(model):
    """HF runs its rotary table and RMSNorms in float32 for every dtype; exact_float64 makes float64 mean float64."""
    from symformer.integrations.hf import exact_float64
    return exact_float64(model)


def ids(batch: int = 2, n: int = 16, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def logits(model, x, **kw):
    with torch.no_grad():
        return model(x, **kw).logits


def patched(family, positional, dtype, **opts):
    from symformer.integrations import hf
    return hf.patch_positional(tiny(family, dtype), positional, **opts)
