"""Family records (integrations.hf.families): one valid record per supported family, the views and the docs table
derived from them, the checks at registration, and a toy family that is one record and nothing else: registered in
this test alone (GLM's classes under a new model_type), it passes the parity and invariance checks every family runs,
and a wrong field in its record makes them fail."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import (  # noqa: E402
    FAMILIES,
    invariance_error,
    parity_error,
    patched,
    replaced_record,
    tiny,
)

from symformer.experiments.hf import FAMILY_MODELS  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf import _common  # noqa: E402
from symformer.integrations.hf.families import (  # noqa: E402
    FamilyRecord,
    family_record,
    family_records,
    family_table_markdown,
    register_family,
    unregister_family,
)

#: a family described by this record only: interleaved RoPE pairs (2u, 2u + 1) on half of each head (GLM's classes,
#: whose partial_rotary_factor the config gives)
TOY = FamilyRecord(
    "toy_glm", "GlmAttention", "GlmConfig", "GlmForCausalLM", {"pad_token_id": None}, pairing="interleaved"
)


@pytest.fixture
def toy():
    register_family(TOY)
    yield TOY.name
    unregister_family(TOY.name)


def test_every_supported_family_has_one_record_and_the_views_follow_them():
    records = family_records()
    names = [r.name for r in records]
    assert len(names) == len(set(names)) == 69 and tuple(names) == FAMILIES  # the family test matrix
    assert dict(FAMILY_MODELS) == {r.name: (r.config_class, r.model_class, r.tiny_config()) for r in records}
    assert dict(hf.FAMILIES) == {r.name: r.attention for r in records}
    assert set(_common.GATED_OUTPUT) == {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "afmoe"}
    assert "toy_glm" not in hf.FAMILIES


def test_family_table_has_one_row_per_record():
    rows = family_table_markdown().splitlines()
    assert len(rows) == 2 + len(family_records()) and rows[1].startswith("| --- |")
    assert [r.split(" | ")[0] for r in rows[2:]] == [f"| `{r.name}`" for r in family_records()]
    glm = next(r for r in rows if r.startswith("| `glm` |"))
    assert "interleaved; cat table" in glm


def test_a_new_family_is_one_record(toy):
    """The toy family, registered from its record alone, runs the checks of the family matrix: float64 parity of the
    patched RoPE and STRING (P = I) with the native rotation, teleportation invariance with the native RoPE and a
    generic STRING, ESPR refused by name on a partial rotary, and the views list it."""
    assert toy in hf.FAMILIES and toy in FAMILY_MODELS
    model = tiny(toy)
    assert _common.family_of(model) == toy and _common.rope_pairing(model.config) == "interleaved"
    for positional in ("rope", "string"):
        assert parity_error(toy, positional) <= 1e-10
    assert invariance_error(toy) <= 1e-10
    assert invariance_error(toy, "string", init_scale=0.3) <= 1e-10
    with pytest.raises(ValueError, match=r"^positional: got 'espr'"):
        patched(toy, "espr", torch.float64)
    assert f"| `{toy}` |" in family_table_markdown()


def test_the_toy_checks_read_its_record(toy):
    """Negative controls: with rotate-half pairs in the record (which its cat table also produces) the patched part
    rotates other pairs and the Q/K group acts on them, so parity and invariance fail; unregistered, the model is
    refused by name."""
    with replaced_record(toy, pairing="half"):
        assert parity_error(toy, "rope") > 1e-4
        assert invariance_error(toy) > 1e-4
    model = tiny(toy)
    unregister_family(toy)
    try:
        with pytest.raises(ValueError, match=r"^model: got \"GlmForCausalLM \(model_type='toy_glm'\)\""):
            hf.patch_positional(model, "rope")
    finally:
        register_family(TOY)


def test_a_record_may_bring_its_own_rotating_layer_rule():
    """rotating_layers as a callable: the patch replaces the rotation of the layers it names only (layer 0 here), the
    other keeps its native RoPE, so the logits stay the native ones; records hash by name (sets, dict keys)."""
    record = dataclasses.replace(TOY, rotating_layers=lambda attn: attn.layer_idx == 0)
    register_family(record)
    try:
        model = hf.patch_positional(tiny(TOY.name), "rope")
        assert len(hf.rotary_parts(model)) == 1 and len({record, TOY, dataclasses.replace(TOY)}) == 2
        assert parity_error(TOY.name, "rope") <= 1e-10
    finally:
        unregister_family(TOY.name)


BAD = [
    ({"table": "interleaved", "pairing": "half"}, "pairing", "'half'", ValueError),
    ({"table": "complex", "pairing": "half"}, "pairing", "'half'", ValueError),
    ({"table": "zigzag"}, "table", "'zigzag'", ValueError),
    ({"pairing": "config"}, "pairing", "'config'", ValueError),
    ({"rotary_dtype": "float32", "pairing": "half"}, "rotary_dtype", "'float32'", ValueError),
    ({"softmax_dtype": "float8"}, "softmax_dtype", "'float8'", ValueError),
    ({"rotating_layers": "even_layers"}, "rotating_layers", "'even_layers'", ValueError),
    ({"rotating_layers": 3}, "rotating_layers", "3", TypeError),
    ({"qk_norm": "after", "qk_norm_span": "all_heads"}, "qk_norm_span", "'all_heads'", ValueError),
    ({"qk_norm": "inside"}, "qk_norm", "'inside'", ValueError),
    ({"qk_norm_flag": "use_qk_norm"}, "qk_norm_flag", "'use_qk_norm'", ValueError),
    ({"fused_qkv": ("qkv_proj", "rows")}, "fused_qkv", r"\('qkv_proj', 'rows'\)", ValueError),
    ({"fused_qkv": ("qkv_proj", "blocks"), "output_gate": "q_proj"}, "output_gate", "'q_proj'", ValueError),
    ({"output_gate": "sideways"}, "output_gate", "'sideways'", ValueError),
    ({"mla": True, "qk_norm": "before"}, "qk_norm", "'before'", ValueError),
    ({"mla": "yes"}, "mla", "'yes'", TypeError),
    ({"norms": {"GlmRMSNorm": "cubic"}}, "norms", r"\{'GlmRMSNorm': 'cubic'\}", ValueError),
    ({"attention": ""}, "attention", "''", TypeError),
]


@pytest.mark.parametrize("changes,field,given,exc", BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_an_inconsistent_record_is_refused_when_registered(changes, field, given, exc):
    """A field the others contradict (a pairing the table cannot produce, an unknown layout or rotating-layer rule,
    norm options without norms, a gate the projections cannot give) is refused by name at registration, before any
    model reads it; nothing is registered."""
    with pytest.raises(exc, match=rf"^family 'toy_glm': {field}: got {given}, expected "):
        register_family(dataclasses.replace(TOY, **changes))
    assert family_record("toy_glm") is None


def test_a_registered_name_is_not_taken_over():
    """Another record under a registered model_type is refused (replace=True swaps it in place); the same record
    again is a no-op."""
    llama = family_record("llama")
    with pytest.raises(ValueError, match=r"^record.name: got 'llama', expected a model_type not registered"):
        register_family(dataclasses.replace(llama, pairing="interleaved"))
    assert register_family(llama) is llama and family_record("llama") is llama
    with pytest.raises(TypeError, match=r"^record: got 'dict', expected a FamilyRecord"):
        register_family({"name": "toy"})
