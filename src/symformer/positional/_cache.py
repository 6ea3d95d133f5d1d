"""A small cache for position tables (RoPE cos/sin, STRING's P, ESPR's per-token maps), with no host sync.

An entry is found from the tensors it was computed from (positions and parameters) plus hashable extras (dtype,
kind), in one of two ways, chosen per lookup by `_validation.reads_values` (free on CPU tensors in eager mode):

* by VALUE where reading values is free: keys are detached clones compared with torch.equal, so an in-place
  `copy_` of equal values, a fresh torch.arange of the same positions, and inference tensors (no version counter)
  all hit;
* by IDENTITY elsewhere (an accelerator, `value_checks("never")`): torch.equal is a host sync there, so a key is
  (data_ptr, shape, stride, dtype, device, version counter) of each tensor, and the entry holds the tensor itself,
  which keeps its memory from being reused by another tensor with the same address. Any in-place write (an
  optimizer step, `copy_` under no_grad, a write through a view, which shares the counter) bumps the version, so a
  changed tensor never hits; a new tensor of equal values misses (a rebuilt table, never a wrong one). Inference
  tensors have no version counter: with one among the keys the cache is not used.

Under torch.compile the cache is bypassed: the graph computes the table, and inductor fuses it into its use.
It is a plain attribute of the owning module, so it never enters a state_dict. Values computed under
torch.inference_mode() are inference tensors, which autograd may not save; they are only returned while inference
mode is on."""

from __future__ import annotations

from typing import Any

import torch

from symformer._torch_compat import is_compiling
from symformer._validation import reads_values


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))


def _usable(value: Any) -> bool:
    if torch.is_inference_mode_enabled():
        return True
    items = value if isinstance(value, (tuple, list)) else (value,)
    return not any(isinstance(t, torch.Tensor) and t.is_inference() for t in items)


def _identity(t: torch.Tensor) -> tuple:
    """What identifies t's current values without reading them (module docstring)."""
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device, t._version)


def identity_key(tensors: tuple[torch.Tensor, ...]) -> tuple | None:
    """The identity key of `tensors`, or None where one has no version counter (an inference tensor)."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple(_identity(t) for t in tensors)


class ValueCache:
    """Most-recently-used list of `size` entries (a query and a key position set fit side by side)."""

    def __init__(self, size: int = 4):
        self.size = size
        # (extra, "value", cloned keys, value) or (extra, "identity", (identity key, the tensors), value)
        self._entries: list[tuple[Any, str, Any, Any]] = []

    @staticmethod
    def _how(tensors: tuple[torch.Tensor, ...]) -> tuple[str, Any] | None:
        """("value", tensors) where every key may be read, ("identity", key) elsewhere; None: no caching."""
        if is_compiling():
            return None
        if all(reads_values(t) for t in tensors):
            return "value", tensors
        key = identity_key(tensors)
        return None if key is None else ("identity", key)

    @staticmethod
    def _matches(entry: tuple, extra: Any, how: tuple[str, Any]) -> bool:
        e, kind, keys, _ = entry
        if e != extra or kind != how[0]:
            return False
        if kind == "identity":
            return keys[0] == how[1]
        return len(keys) == len(how[1]) and all(_same(a, b) for a, b in zip(keys, how[1]))

    def lookup(self, extra: Any, tensors: tuple[torch.Tensor, ...]) -> Any:
        how = self._how(tensors)
        if how is None:
            return None
        for i, entry in enumerate(self._entries):
            if self._matches(entry, extra, how):
                if not _usable(entry[3]):
                    return None
                if i:
                    self._entries.insert(0, self._entries.pop(i))
                return entry[3]
        return None

    def store(self, extra: Any, tensors: tuple[torch.Tensor, ...], value: Any) -> Any:
        how = self._how(tensors)
        if how is None:
            return value
        if how[0] == "value":
            keys = tuple(t.detach().clone() for t in tensors)
            how = ("value", keys)
        else:  # hold the tensors: their memory cannot be reused by another tensor of the same address
            keys = (how[1], tuple(tensors))
        self._entries = [(extra, how[0], keys, value)] + [x for x in self._entries if not self._matches(x, extra, how)]
        del self._entries[self.size :]
        return value

    def clear(self) -> None:
        self._entries = []

    def __len__(self) -> int:
        return len(self._entries)
