"""A small value-keyed cache for position tables (RoPE cos/sin, ESPR exponentials).

Entries are keyed by the VALUES of the tensors they were computed from (positions and parameters,
compared with torch.equal) plus hashable extras (dtype, kind), never by Tensor._version: inference
tensors have no version counter, and an in-place `copy_` of equal values should still hit. It is a plain
attribute of the owning module, so it never enters a state_dict. Values computed under
torch.inference_mode() are inference tensors, which autograd may not save; they are only returned
while inference mode is on."""

from __future__ import annotations

from typing import Any

import torch


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))


def _usable(value: Any) -> bool:
    if torch.is_inference_mode_enabled():
        return True
    items = value if isinstance(value, (tuple, list)) else (value,)
    return not any(isinstance(t, torch.Tensor) and t.is_inference() for t in items)


class ValueCache:
    """Most-recently-used list of `size` entries (a query and a key position set fit side by side)."""

    def __init__(self, size: int = 4):
        self.size = size
        self._entries: list[tuple[Any, tuple[torch.Tensor, ...], Any]] = []

    def lookup(self, extra: Any, tensors: tuple[torch.Tensor, ...]) -> Any:
        for i, (e, keys, value) in enumerate(self._entries):
            if e == extra and len(keys) == len(tensors) and all(_same(a, b) for a, b in zip(keys, tensors)):
                if not _usable(value):
                    return None
                if i:
                    self._entries.insert(0, self._entries.pop(i))
                return value
        return None

    def store(self, extra: Any, tensors: tuple[torch.Tensor, ...], value: Any) -> Any:
        keys = tuple(t.detach().clone() for t in tensors)
        self._entries = [(extra, keys, value)] + [
            x for x in self._entries if x[0] != extra or not all(_same(a, b) for a, b in zip(x[1], keys))
        ]
        del self._entries[self.size :]
        return value

    def clear(self) -> None:
        self._entries = []

    def __len__(self) -> int:
        return len(self._entries)
