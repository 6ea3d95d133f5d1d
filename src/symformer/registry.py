"""Name -> factory registries. Parts, experiments, benchmark suites and callbacks register
themselves with a decorator, so adding one never edits the model or the CLI."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """kind: what an entry is (error messages). package: where entries register themselves on import
    (experiments, benchmark suites): `load_all` imports its public modules."""

    def __init__(self, kind: str, package: str | None = None):
        self.kind = kind
        self.package = package
        self._items: dict[str, T] = {}

    def load_all(self) -> "Registry[T]":
        """Import every module of `package` not named base or _*, so their decorators run; returns self."""
        if self.package is not None:
            pkg = importlib.import_module(self.package)
            for mod in pkgutil.iter_modules(pkg.__path__):
                if not mod.name.startswith("_") and mod.name != "base":
                    importlib.import_module(f"{self.package}.{mod.name}")
        return self

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

    def registered(self) -> list[str]:
        """The names in registration order (what a host that derives names from the registry lists)."""
        return list(self._items)

    def unregister(self, name: str) -> None:
        """Remove `name` (a toy entry registered inside a test); KeyError if absent."""
        del self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def build(self, name: str, **kwargs: Any) -> Any:
        """Call the factory of `name`. Context keys the host always offers (STANDARD_KEYS: head_dim,
        d_model, ...) are passed only where the factory's signature takes them; any other keyword the
        factory does not take is an error, so a misspelt option is never silently ignored."""
        factory = self.get(name)
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):  # builtins without a signature: pass everything
            return factory(**kwargs)
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            if isinstance(factory, type) and all(p.kind in _VARIADIC for p in params.values()):
                # a class without a constructor of its own (nn.Module's (*args, **kwargs), which takes nothing):
                # the context keys are not for it; any other keyword still reaches it and is its error
                return factory(**{k: v for k, v in kwargs.items() if k not in STANDARD_KEYS})
            return factory(**kwargs)
        unknown = sorted(k for k in kwargs if k not in params and k not in STANDARD_KEYS)
        if unknown:
            accepted = [
                k
                for k, p in params.items()
                if p.kind is not inspect.Parameter.VAR_POSITIONAL and k not in STANDARD_KEYS and k != "self"
            ]
            raise TypeError(
                f"{self.kind} {name!r}: got unknown option(s) {', '.join(unknown)}, "
                f"expected some of {', '.join(accepted) or '(none)'}"
            )
        return factory(**{k: v for k, v in kwargs.items() if k in params})


def description_of(fn: Callable[..., Any], description: str = "") -> str:
    """The one-line description of a registered function: the given one, else its docstring's first line."""
    return description or (fn.__doc__ or "").strip().split("\n")[0]


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

#: keys a host (attention layer, encoder) offers every part; a part takes those its signature names
STANDARD_KEYS = frozenset({"head_dim", "n_heads", "d_model", "coord_dim", "d_ff", "dropout", "max_len"})


#: positional encodings: factory(d_model=, n_heads=, head_dim=, coord_dim=, **kw) -> module
POSITIONAL: Registry[Callable[..., Any]] = Registry("positional")
#: attention cores with the SDPA call shape: factory(head_dim=, n_heads=, **kw) -> module
ATTENTION: Registry[Callable[..., Any]] = Registry("attention")
#: feed-forward blocks: factory(d_model=, d_ff=, **kw) -> module
MLP: Registry[Callable[..., Any]] = Registry("mlp")
#: training callbacks built from CLI options: factory(**kw) -> Callback
CALLBACKS: Registry[Callable[..., Any]] = Registry("callback")
