"""The schema of a Hugging Face family record: `FamilyRecord`, the values its fields take, and `check_record`, which
checks a record's fields against each other.

A `FamilyRecord` holds everything that differs between the families the integration supports: the attention class
(matched along the MRO, so exact_float64's and patch_positional's subclasses still count), how the native RoPE pairs
coordinates and lays out its cos/sin table, the dtype its rotation and eager softmax run in, where the q/k norms
sit, the output gate, which layers rotate, the flags the symmetry group reads (norm offset, sinks, MLA, fused rows)
and the tiny config the tests and experiment `hf` build it from. The built-in records are in `records` and
`records_mla`; `families` registers them and any other (`register_family`).

`check_record` runs at registration: a pairing the table layout cannot produce, an unknown layout or rotating-layer
rule, a norm option that contradicts where the norms sit, is a ValueError naming the family and the field, raised
when the record is registered rather than deep inside a forward.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from symformer._validation import fail

#: pairings of the native RoPE: Llama's rotate_half (u, u + Dh/2), (2u, 2u + 1), or what config.rope_interleave says
#: (MLA: DeepSeek-V3's default interleaves, GLM-4.7-Flash's config turns it off)
PAIRINGS = ("half", "interleaved", "config")
#: cos/sin table layouts and the pairings each can produce: cat(freqs, freqs) serves both (GLM and ERNIE read its
#: first half repeated in place); a table repeating each frequency in place (Cohere) or a complex polar(1, freqs)
#: applied to (2u, 2u + 1) as complex numbers (DeepSeek-V2) only interleaved pairs; a table holding each frequency
#: once applied to both halves (GPT-OSS) and Qwen3.5's multimodal cat table only rotate-half pairs
TABLE_PAIRINGS = {
    "cat": ("half", "interleaved", "config"),
    "interleaved": ("interleaved",),
    "complex": ("interleaved",),
    "half": ("half",),
    "mrope": ("half",),
}
DTYPES = ("input", "float32")
QK_NORMS = ("none", "before", "after")
QK_NORM_SPANS = ("head", "all_heads")
OUTPUT_GATES = ("none", "q_proj", "gate_proj")
FUSED_LAYOUTS = ("blocks", "heads")
#: formulas of the norms exact_float64 (hf.exact) re-evaluates in the input dtype, beyond the plain RMSNorm every
#: family shares
NORM_KINDS = ("offset_rms", "centered", "gated_rms", "layer_norm")


def _rotates_all(attn) -> bool:
    return True


def _rotates_use_rope(attn) -> bool:
    """SmolLM3: layers with use_rope False are NoPE layers."""
    return bool(attn.use_rope)


def _rotates_sliding(attn) -> bool:
    """EXAONE 4 and EXAONE MoE: with a sliding window only the sliding layers rotate (the global ones are NoPE)."""
    return bool(attn.is_sliding) if getattr(attn, "sliding_window", None) is not None else True


def _rotates_sliding_or_forced(attn) -> bool:
    """Cohere 2: only sliding layers rotate, and Cohere 2 MoE's force_rope dense prefix layers."""
    return attn.sliding_window is not None or bool(getattr(attn, "force_rope", False))


def _rotates_local(attn) -> bool:
    """AFMoE: only its local (sliding) layers rotate, the global ones are NoPE."""
    return bool(attn.is_local_attention)


#: which layers of a family rotate q and k: a rule name, or a record's own callable(attention module) -> bool
ROTATION_RULES: dict[str, Callable[[Any], bool]] = {
    "all": _rotates_all,
    "use_rope": _rotates_use_rope,
    "sliding": _rotates_sliding,
    "sliding_or_forced": _rotates_sliding_or_forced,
    "local": _rotates_local,
}


@dataclass(frozen=True)
class FamilyRecord:
    """One Hugging Face family (module docstring). Defaults are Llama's layout: separate q/k/v projections, o_proj,
    rotate-half pairs from a cat(freqs, freqs) table applied in the input dtype, a float32 eager softmax, no q/k norms
    and no output gate, every layer rotating.

    name: config.model_type. attention: the attention class's name. config_class / model_class: the transformers
    classes of the tiny test model, `tiny` its config beyond the shared small sizes (tests/integrations/_hf_models).
    products: the released models, for the docs table.
    pairing / table: PAIRINGS / TABLE_PAIRINGS. rotary_dtype "float32": its apply_rotary_pos_emb casts q and k to
    float32 (exact_float64 runs it in the input dtype); softmax_dtype "input": its eager attention already computes
    the softmax in the input dtype (GPT-OSS). negated_rotation: its rotate_half is cat(x2, -x1), so RoPE turns each
    pair by -theta p (NanoChat) and the parts start from the negated frequencies. rotating_layers: ROTATION_RULES.
    mla: multi-head latent attention (hf.mla). fused_qkv: (attribute, "blocks" [q; k; v] | "heads" [q_h; k_h; v_h])
    where one projection gives q, k and v. out_proj: the output projection's attribute. grouped_kv False: the config's
    num_key_value_heads is ignored (GPT-NeoX).
    qk_norm: where the q/k norms sit relative to the rotation ("none" | "before" | "after"); qk_norm_span: "head"
    (weight (Dh,), per head) or "all_heads" (weight (H Dh,), on the flat projection); qk_norm_names: their attributes;
    qk_norm_weighted False: parameter-free norms; qk_norm_flag: the config flag that switches them on, where optional.
    output_gate: out * sigmoid(g) before the output projection, g from q_proj's rows [q_h; g_h] ("q_proj") or a
    gate_proj of its own ("gate_proj"). softcap / sinks: the layer's attn_logit_softcapping / per-head sink logits are
    handed to the attention function as HF's forward hands them. sliding_window_kwarg: the forward passes its sliding
    window on (Llama's does not). norms: norm class name -> NORM_KINDS, the norms whose formula is not the plain RMSNorm
    ("offset_rms": (1 + w) x_hat, weight stored as w). glu_names: the gate, up and down projections of its gated MLPs
    (LFM2: w1, w3, w2), which the group's MLP rescaling acts on."""

    name: str
    attention: str
    config_class: str
    model_class: str
    tiny: Mapping[str, Any] = field(default_factory=dict)
    products: str = ""
    pairing: str = "half"
    table: str = "cat"
    rotary_dtype: str = "input"
    softmax_dtype: str = "float32"
    negated_rotation: bool = False
    rotating_layers: str | Callable[[Any], bool] = "all"
    mla: bool = False
    fused_qkv: tuple[str, str] | None = None
    out_proj: str = "o_proj"
    grouped_kv: bool = True
    qk_norm: str = "none"
    qk_norm_span: str = "head"
    qk_norm_names: tuple[str, str] = ("q_norm", "k_norm")
    qk_norm_weighted: bool = True
    qk_norm_flag: str | None = None
    output_gate: str = "none"
    softcap: bool = False
    sinks: bool = False
    sliding_window_kwarg: bool = True
    norms: Mapping[str, str] = field(default_factory=dict)
    glu_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")

    def __post_init__(self):
        # read-only views: a record is shared by every model of its family
        for name in ("tiny", "norms"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def __hash__(self) -> int:  # the mappings are not hashable; equal records share their name
        return hash(self.name)

    def tiny_config(self) -> dict:
        """A fresh copy of the tiny config (HF configs may keep and edit the nested dicts they are given)."""
        return copy.deepcopy(dict(self.tiny))

    def rotates(self, attn) -> bool:
        """Whether the attention layer rotates q and k (rotating_layers)."""
        rule = self.rotating_layers
        return bool((ROTATION_RULES[rule] if isinstance(rule, str) else rule)(attn))

    @property
    def norm_offset(self) -> bool:
        """Whether some norm of the family computes (1 + w) x_hat (Gemma, Qwen3-Next, Qwen3.5): the Q/K group then acts
        on 1 + w, not w."""
        return "offset_rms" in self.norms.values()

    @property
    def head_permutable(self) -> bool:
        """Whether the heads can be permuted as one (not MLA: its two sites share each head)."""
        return not self.mla

    @property
    def fused_rows(self) -> bool:
        """Whether the group acts on row blocks of one projection (a fused q/k/v, or q_proj's [q_h; g_h])."""
        return self.fused_qkv is not None or self.output_gate == "q_proj"


def _bad(record: FamilyRecord, name: str, given, expected: str, exc: type[Exception] = ValueError) -> None:
    fail(f"family {record.name!r}: {name}", given, expected, exc)


def _check_str(record: FamilyRecord, name: str, choices: tuple[str, ...] | None = None) -> None:
    value = getattr(record, name)
    if not isinstance(value, str) or not value:
        _bad(record, name, value, "a non-empty string", TypeError)
    if choices is not None and value not in choices:
        _bad(record, name, value, "one of " + ", ".join(map(repr, choices)))


def _check_layout(record: FamilyRecord) -> None:
    """Pairing, table, dtypes and rotating layers: each a known value, and the pairing one the table can produce."""
    for name, choices in (
        ("table", tuple(TABLE_PAIRINGS)),
        ("pairing", PAIRINGS),
        ("rotary_dtype", DTYPES),
        ("softmax_dtype", DTYPES),
    ):
        _check_str(record, name, choices)
    can = TABLE_PAIRINGS[record.table]
    if record.pairing not in can:
        _bad(record, "pairing", record.pairing, f"one the {record.table!r} table can produce: {', '.join(can)}")
    if record.pairing == "config" and not record.mla:
        _bad(record, "pairing", "config", "'half' or 'interleaved' (only MLA configs carry rope_interleave)")
    if record.rotary_dtype == "float32" and (record.pairing != "interleaved" or record.table == "complex"):
        _bad(
            record,
            "rotary_dtype",
            "float32",
            "'input' unless the pairing is interleaved from a cat or interleaved table (exact_float64 re-evaluates "
            "only that apply_rotary_pos_emb in the input dtype)",
        )
    rule = record.rotating_layers
    if isinstance(rule, str):
        _check_str(record, "rotating_layers", tuple(ROTATION_RULES))
    elif not callable(rule):
        _bad(record, "rotating_layers", rule, "a rule name or a callable(attention module) -> bool", TypeError)


def _check_projections(record: FamilyRecord) -> None:
    """Fused projections, output gate and MLA: each a known layout, and none the forward cannot combine."""
    _check_str(record, "out_proj")
    _check_str(record, "output_gate", OUTPUT_GATES)
    fused = record.fused_qkv
    if fused is not None:
        if not (isinstance(fused, tuple) and len(fused) == 2 and isinstance(fused[0], str) and fused[0]):
            _bad(record, "fused_qkv", fused, "None or (attribute, layout)", TypeError)
        if fused[1] not in FUSED_LAYOUTS:
            _bad(record, "fused_qkv", fused, "a layout among " + ", ".join(map(repr, FUSED_LAYOUTS)))
        if record.output_gate == "q_proj":
            _bad(record, "output_gate", "q_proj", "'none' or 'gate_proj' with a fused q/k/v projection (no q_proj)")
    if record.mla:
        for name, plain in (("fused_qkv", None), ("output_gate", "none"), ("qk_norm", "none")):
            if getattr(record, name) != plain:
                _bad(record, name, getattr(record, name), f"{plain!r} for MLA (hf.mla's forward has no such step)")
    if not record.grouped_kv and record.mla:
        _bad(record, "grouped_kv", False, "True for MLA (its key heads are the query heads)")


def _check_norms(record: FamilyRecord) -> None:
    """Where the q/k norms sit, their span, names and weights, and the norm-formula table."""
    _check_str(record, "qk_norm", QK_NORMS)
    _check_str(record, "qk_norm_span", QK_NORM_SPANS)
    for name, n in (("qk_norm_names", 2), ("glu_names", 3)):
        names = getattr(record, name)
        if not (isinstance(names, tuple) and len(names) == n and all(isinstance(a, str) and a for a in names)):
            _bad(record, name, names, f"a tuple of {n} attribute names", TypeError)
    if record.qk_norm == "none":
        if record.qk_norm_flag is not None:
            _bad(record, "qk_norm_flag", record.qk_norm_flag, "None for a family without q/k norms")
        if record.qk_norm_span != "head" or not record.qk_norm_weighted:
            _bad(record, "qk_norm", "none", "'before' or 'after' where qk_norm_span or qk_norm_weighted is set")
    if record.qk_norm == "after" and record.qk_norm_span != "head":
        _bad(record, "qk_norm_span", record.qk_norm_span, "'head' for norms after the rotation (it acts on heads)")
    if record.qk_norm_flag is not None and not (isinstance(record.qk_norm_flag, str) and record.qk_norm_flag):
        _bad(record, "qk_norm_flag", record.qk_norm_flag, "None or a config attribute name", TypeError)
    for cls, kind in record.norms.items():
        if not isinstance(cls, str) or kind not in NORM_KINDS:
            _bad(record, "norms", {cls: kind}, "class name -> one of " + ", ".join(map(repr, NORM_KINDS)))


def check_record(record: FamilyRecord) -> None:
    """ValueError (TypeError for a wrong type) naming the family and the field, for a field another contradicts."""
    if not isinstance(record, FamilyRecord):
        fail("record", type(record).__name__, "a FamilyRecord", TypeError)
    if not isinstance(record.name, str) or not record.name.isidentifier():
        fail("record.name", record.name, "a config.model_type (a non-empty identifier)")
    for name in ("attention", "config_class", "model_class"):
        _check_str(record, name)
    for name in ("negated_rotation", "mla", "grouped_kv", "qk_norm_weighted", "softcap", "sinks"):
        if not isinstance(getattr(record, name), bool):
            _bad(record, name, getattr(record, name), "True or False", TypeError)
    if not isinstance(record.tiny, Mapping) or not all(isinstance(k, str) for k in record.tiny):
        _bad(record, "tiny", record.tiny, "a mapping of config keyword arguments", TypeError)
    if not isinstance(record.norms, Mapping):
        _bad(record, "norms", record.norms, "a mapping of norm class name -> kind", TypeError)
    _check_layout(record)
    _check_projections(record)
    _check_norms(record)


__all__ = [
    "DTYPES",
    "FUSED_LAYOUTS",
    "FamilyRecord",
    "NORM_KINDS",
    "OUTPUT_GATES",
    "PAIRINGS",
    "QK_NORMS",
    "QK_NORM_SPANS",
    "ROTATION_RULES",
    "TABLE_PAIRINGS",
    "check_record",
]
