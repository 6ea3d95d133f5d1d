"""The tiny Hugging Face models of experiment `hf` (and of the precision experiment and the integration tests), as
live views of the family records (integrations.hf.families): adding a family is its record alone."""

from __future__ import annotations

from symformer.integrations.hf.families import FamilyMap, FamilyNames

#: family -> (config class, model class, extra config) of the tiny models, in the records' order
FAMILY_MODELS = FamilyMap(lambda r: (r.config_class, r.model_class, r.tiny_config()))
#: families whose weighted q/k norms come after the rotation (Hunyuan's query_layernorm / key_layernorm)
POST_NORM_FAMILIES = FamilyNames(lambda r: r.qk_norm == "after" and r.qk_norm_weighted)
#: families whose q/k norm weights the tiny models draw around 1 (HF starts them at exactly 1)
QK_NORM_FAMILIES = FamilyNames(
    lambda r: r.qk_norm == "before" and (r.qk_norm_flag is None or bool(r.tiny.get(r.qk_norm_flag)))
)
