"""The tiny Hugging Face models of experiment `hf` (and of the precision experiment and the integration tests):
FAMILY_MODELS maps a family to (config class, model class, extra config), in the table's order."""

from __future__ import annotations

from symformer.experiments.hf.family_table_1 import FIRST
from symformer.experiments.hf.family_table_2 import SECOND

FAMILY_MODELS = {**FIRST, **SECOND}

POST_NORM_FAMILIES = ("hunyuan_v1_dense", "hunyuan_v1_moe")
#: families whose q/k RMSNorm weights the tiny models draw around 1 (HF starts them at exactly 1; POST_NORM_FAMILIES'
#: too)
QK_NORM_FAMILIES = (
    "qwen3",
    "qwen3_moe",
    "gemma3_text",
    "olmo2",
    "olmo3",
    "olmoe",
    "exaone4",
    "apertus",
    "flex_olmo",
    "minimax_m2",
    "exaone_moe",
    "hy_v3",
    "kolibri1",
    "dots1",
    "apertus1p5_text",
    "lfm2",
    "qwen3_next",
    "afmoe",
    "qwen3_5_text",
    "qwen3_5_moe_text",
)
