"""The registry of Hugging Face families: one `FamilyRecord` (hf.schema) per family, what the shared integration code
needs to know about it, in one place.

The shared code (`hf._common`, `hf.positional`, `hf.exact`, ...) reads these records and never a family name, so
adding a family is adding one record to `hf.records` or `hf.records_mla` (or, for code outside symformer, one
`register_family(record)` call). Registration checks the record (`schema.check_record`). `FamilyNames` and
`FamilyMap` are live views of the registry that other code imports; `family_table_markdown()` renders the table of
the docs site.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from symformer._validation import fail
from symformer.integrations.hf.records import RECORDS as _BUILT_IN
from symformer.integrations.hf.records_mla import RECORDS as _BUILT_IN_MLA
from symformer.integrations.hf.schema import FamilyRecord, check_record

_REGISTRY: dict[str, FamilyRecord] = {}
_NORM_KINDS: dict[str, str] = {}
_LOADED: list[bool] = []


def _registry() -> dict[str, FamilyRecord]:
    """The registry, with the built-in records (hf.records, hf.records_mla) registered on first use."""
    if not _LOADED:
        _LOADED.append(True)
        for record in _BUILT_IN + _BUILT_IN_MLA:
            register_family(record)
    return _REGISTRY


def register_family(record: FamilyRecord, replace: bool = False) -> FamilyRecord:
    """Add a family (checked: schema.check_record). Registering an equal record again is a no-op; another record under a
    registered name is a ValueError unless `replace` (which keeps the family's place in the order). Returns the
    record."""
    check_record(record)
    registry = _registry()
    old = registry.get(record.name)
    if old is not None and old != record and not replace:
        fail("record.name", record.name, "a model_type not registered already (or replace=True)")
    registry[record.name] = record
    _NORM_KINDS.clear()
    return record


def unregister_family(name: str) -> None:
    """Remove a registered family (KeyError naming it if there is none)."""
    registry = _registry()
    if name not in registry:
        raise KeyError(f"name: got {name!r}, expected a registered family: {', '.join(registry)}")
    del registry[name]
    _NORM_KINDS.clear()


def family_records() -> tuple[FamilyRecord, ...]:
    """Every registered record, in registration order."""
    return tuple(_registry().values())


def family_record(name: str | None) -> FamilyRecord | None:
    """The record registered under `name` (a config.model_type), or None."""
    return _registry().get(name) if isinstance(name, str) else None


def record_of(obj) -> FamilyRecord | None:
    """The record of a config (its model_type) or of a module with a config (an attention layer), or None."""
    model_type = getattr(obj, "model_type", None)
    if model_type is None:
        model_type = getattr(getattr(obj, "config", None), "model_type", None)
    return family_record(model_type)


def norm_kind(cls_name: str) -> str | None:
    """NORM_KINDS entry of a norm class over every registered family, or None (the plain formulas)."""
    if not _NORM_KINDS:
        for record in family_records():
            _NORM_KINDS.update(record.norms)
    return _NORM_KINDS.get(cls_name)


class FamilyNames:
    """A live, read-only view of the registered family names that satisfy `test` (set-like: `in`, iteration, len), so
    that names other code imports follow the registry, families registered later included."""

    def __init__(self, test: Callable[[FamilyRecord], bool], doc: str = ""):
        self._test, self.__doc__ = test, doc

    def __iter__(self) -> Iterator[str]:
        return iter([r.name for r in family_records() if self._test(r)])

    def __contains__(self, name) -> bool:
        record = family_record(name)
        return record is not None and bool(self._test(record))

    def __len__(self) -> int:
        return len(list(iter(self)))

    def __repr__(self) -> str:
        return f"FamilyNames({list(self)})"


class FamilyMap(Mapping):
    """A live, read-only mapping model_type -> value(record) over the registry."""

    def __init__(self, value: Callable[[FamilyRecord], Any]):
        self._value = value

    def __getitem__(self, name):
        record = family_record(name)
        if record is None:
            raise KeyError(name)
        return self._value(record)

    def __iter__(self) -> Iterator[str]:
        return iter([r.name for r in family_records()])

    def __len__(self) -> int:
        return len(family_records())


_RULE_WORDS = {
    "use_rope": "those with use_rope",
    "sliding": "sliding ones (with a window)",
    "sliding_or_forced": "sliding and force_rope ones",
    "local": "local ones",
}


def _describe(record: FamilyRecord) -> tuple[str, ...]:
    """The table cells of one record (family_table_markdown)."""
    pairs = {"config": "half or interleaved (rope_interleave)"}.get(record.pairing, record.pairing)
    rotation = f"{pairs}; {record.table} table" + (", float32 rotation" if record.rotary_dtype == "float32" else "")
    if record.negated_rotation:
        rotation += ", turns by -theta p"
    qkv = "MLA" if record.mla else (f"fused {record.fused_qkv[0]}" if record.fused_qkv else "separate")
    norms = "none"
    if record.qk_norm != "none":
        norms = f"{record.qk_norm} the rotation, " + ("per head" if record.qk_norm_span == "head" else "over all heads")
        norms += "" if record.qk_norm_weighted else ", parameter-free"
        norms += f" (when {record.qk_norm_flag})" if record.qk_norm_flag else ""
    rule = record.rotating_layers
    layers = _RULE_WORDS.get(rule, rule) if isinstance(rule, str) else getattr(rule, "__name__", "its own rule")
    extras = [
        n
        for n, on in (("sinks", record.sinks), ("soft-cap", record.softcap), ("(1 + w) norms", record.norm_offset))
        if on
    ]
    return (
        f"`{record.name}`",
        record.products or "",
        f"`{record.model_class}`",
        qkv,
        rotation,
        norms,
        record.output_gate,
        layers,
        ", ".join(extras),
    )


def family_table_markdown() -> str:
    """The registered families as a markdown table, one row per record (for the docs site): model_type, models,
    model class, attention layout, rotation, q/k norms, output gate, rotating layers, other flags."""
    head = (
        "family (`model_type`)",
        "models",
        "model class",
        "q/k/v",
        "native rotation",
        "q/k norms",
        "output gate",
        "rotating layers",
        "other",
    )
    rows = [head, ("---",) * len(head)] + [_describe(r) for r in family_records()]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n"


__all__ = [
    "FamilyMap",
    "FamilyNames",
    "FamilyRecord",
    "family_record",
    "family_records",
    "family_table_markdown",
    "norm_kind",
    "record_of",
    "register_family",
    "unregister_family",
]
