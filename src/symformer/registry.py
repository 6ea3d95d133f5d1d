"""Name -> factory registries. Parts, experiments, benchmark suites and callbacks register
themselves with a decorator, so adding one never edits the model or the CLI."""
from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj
        return deco

    def get(self, name: str) -> T:
        if name not in self._items:
            raise ValueError(f"{self.kind}: got {name!r}, expected one of {', '.join(sorted(self._items)) or '(none)'}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def build(self, name: str, **kwargs: Any) -> Any:
        return self.get(name)(**kwargs)


#: positional encodings: factory(d_model=, n_heads=, head_dim=, coord_dim=, **kw) -> module
POSITIONAL: Registry[Callable[..., Any]] = Registry("positional")
#: attention cores with the SDPA call shape: factory(head_dim=, n_heads=, **kw) -> module
ATTENTION: Registry[Callable[..., Any]] = Registry("attention")
#: feed-forward blocks: factory(d_model=, d_ff=, **kw) -> module
MLP: Registry[Callable[..., Any]] = Registry("mlp")
#: training callbacks built from CLI options: factory(**kw) -> Callback
CALLBACKS: Registry[Callable[..., Any]] = Registry("callback")
