"""Integrations with other libraries (optional extras). Nothing here is imported by the lower layers.

* `symformer.integrations.hf` -- Hugging Face transformers (extra `hf`): symformer's attention cores as
  `AttentionInterface` implementations, its rotary parts patched into Llama-family models, and teleportation
  on those models. Import it explicitly; this package imports nothing heavy.
* `symformer.integrations.timm` -- a timm-style ViT attention module (fused qkv, prefix tokens) with symformer's
  parts, and `patch_timm` for timm's own attention modules where timm imports."""
