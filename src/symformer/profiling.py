"""Counting what makes a step slow on an accelerator, on any device: host syncs, aten ops (about one kernel
launch each in eager mode) and torch.compile graph breaks and recompiles (docs/performance.md, "GPU").

A host sync is an op that copies a device value to the host: `aten._local_scalar_dense` (`.item()`, `int(t)`,
`float(t)`, `.tolist()`), `aten.is_nonzero` (`bool(t)`, `if t:`) and `aten.equal` (`torch.equal`). On a CPU tensor
they cost nothing, but the same code on a GPU stalls the host until the device catches up, and breaks CUDA-graph
capture and `torch.compile(fullgraph=True)`. Counting them on the CPU with a TorchDispatchMode therefore counts
the syncs the code would make on a GPU, provided it takes the GPU's branches: run it under
`symformer.value_checks("never")`, which is what value checks do on an accelerator by default (_validation).

    from symformer.profiling import OpCounter, graph_breaks
    with OpCounter() as c:
        model(ids)
    c.syncs, c.ops, c.sync_stacks[:1]
"""

from __future__ import annotations

import traceback
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = ("_local_scalar_dense", "is_nonzero", "equal")


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside the block (`ops`, and `by_op` per op name) and the host syncs among
    them (`syncs`); with `stacks=True` keeps the Python stack of each sync (`sync_stacks`) to find its source."""

    def __init__(self, stacks: bool = False):
        super().__init__()
        self.stacks = stacks
        self.ops = 0
        self.syncs = 0
        self.by_op: Counter[str] = Counter()
        self.sync_stacks: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.ops += 1
        self.by_op[name] += 1
        if name in SYNC_OPS:
            self.syncs += 1
            if self.stacks:
                self.sync_stacks.append("".join(traceback.format_stack(limit=12)[:-1]))
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, OpCounter]:
    """(fn(*args, **kwargs), its OpCounter)."""
    with OpCounter() as counter:
        out = fn(*args, **kwargs)
    return out, counter


def graph_breaks(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The first line of each reason torch.compile breaks the graph of `fn(*args, **kwargs)` (torch._dynamo.explain;
    resets dynamo's caches first, so the count is of this call alone)."""
    torch._dynamo.reset()
    info = torch._dynamo.explain(fn)(*args, **kwargs)
    return [str(getattr(b, "reason", b)).split("\n")[0] for b in info.break_reasons]


def recompiles() -> int:
    """Frames dynamo compiled since the last `torch._dynamo.reset()` or `reset_compile_counters()`, beyond the
    first of each (torch._dynamo.utils.counters["stats"]: unique graphs compiled minus the first)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def reset_compile_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


__all__ = ["SYNC_OPS", "OpCounter", "count_ops", "graph_breaks", "recompiles", "reset_compile_counters"]
