"""Hugging Face transformers integration (optional extra `hf`): symformer's attention cores, rotary parts and
teleportation on the registered model families, one `FamilyRecord` each (`hf.families`; `family_table_markdown()`
renders their table; docs/huggingface.md has the notes: Llama, Mistral, Qwen, Gemma, OLMo, Phi, GPT-NeoX /
Pythia, Granite, SmolLM3, EXAONE 4, StableLM, StarCoder2, GLM, Hunyuan, the multi-head latent attention of DeepSeek-V2
/ V3, Mistral Small 4, MiniCPM3 and LongCat-Flash with the sparse attention of DeepSeek-V3.2 and GLM-5 (`hf.mla`), and
their MoE variants).
Fused q/k/v projections, partial rotary embeddings, interleaved pairs and NoPE layers are followed; where q/k norms
sit before the rotation (per head in Qwen3, Gemma 3, EXAONE 4, Apertus; over all heads in OLMo 2 / 3 and OLMoE) the
Q/K symmetry acts on the norm weights, and where they sit after it (Hunyuan) on those weights alone. Models are
built from configs, no download needed.

The modules, from the bottom, each importing only modules before it (tests/integrations/test_hf_layout.py): `schema`
(FamilyRecord) -> `records`, `records_mla` (the built-in records) -> `families` (the registry) -> `_common` (what the
shared code reads of a model, from its record) -> `mla` -> `reload` (save and reload; the modules that write a record
register its restorer here) -> `positional` (rotary parts, from positional.rotary_parts()) -> `cache` (decoding states)
-> `attention` (the decoding cores, from attention.decoding_cores()) -> `exact`, `lm`, `teleport`.

    from symformer.integrations import hf
    hf.register()                                   # "symformer_favor", "symformer_plash" in AttentionInterface
    model = LlamaForCausalLM(LlamaConfig(..., attn_implementation="symformer_favor"))
    hf.configure(model, attention="favor", n_features=512)      # options (saved in config.json)
    model = hf.patch_positional(LlamaForCausalLM(cfg), "string")  # STRING in every attention layer
    model = hf.from_pretrained(LlamaForCausalLM, folder)       # a saved model with its parts and cores (hf.reload)
    group = hf.symmetry_group(model)                # teleportation, grouped-query attention included
    tele = hf.HFTeleport(model, optimizer, loss_fn, total_steps=300, start_step=10)  # teleport.PlainLoopTeleport
    hf.register_family(hf.FamilyRecord("my_llama", "LlamaAttention", ...))  # another family: one record

Importing this module needs transformers only when a function is called; `register()` without it raises an
ImportError naming the extra. `hf.symmetry_group(model)` builds a model's group directly; to let
`symformer.teleport.symmetry_group` (and so `TeleportCallback(model=hf_model)`) build it too, call
`hf.teleport.register_hf_groups()` once (HFTeleport does): the registry is explicit, not an import side effect.
"""

from __future__ import annotations

from symformer.integrations.hf._common import FAMILIES, require_transformers
from symformer.integrations.hf.attention import IMPLEMENTATIONS, configure, mask_structure, register
from symformer.integrations.hf.cache import state_cache
from symformer.integrations.hf.exact import exact_float64
from symformer.integrations.hf.families import (
    FamilyRecord,
    family_record,
    family_records,
    family_table_markdown,
    register_family,
    unregister_family,
)
from symformer.integrations.hf.positional import POSITIONALS, patch_positional, rotary_parts
from symformer.integrations.hf.reload import from_pretrained
from symformer.integrations.hf.teleport import GQASymmetryGroup, HFTeleport, symmetry_group

__all__ = [
    "FAMILIES",
    "FamilyRecord",
    "IMPLEMENTATIONS",
    "POSITIONALS",
    "GQASymmetryGroup",
    "HFTeleport",
    "configure",
    "exact_float64",
    "family_record",
    "family_records",
    "family_table_markdown",
    "from_pretrained",
    "mask_structure",
    "patch_positional",
    "register",
    "register_family",
    "require_transformers",
    "rotary_parts",
    "state_cache",
    "symmetry_group",
    "unregister_family",
]
