"""Integrations with other libraries (optional extras). Nothing here is imported by the lower layers.

* `symformer.integrations.hf` -- Hugging Face transformers (extra `hf`): symformer's attention cores as
  `AttentionInterface` implementations, its rotary parts patched into Llama-family models, and teleportation
  on those models. Import it explicitly; this package imports nothing heavy."""
