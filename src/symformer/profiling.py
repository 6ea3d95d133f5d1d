"""Counting what makes a step slow on an accelerator, on any device: host syncs, aten ops (about one kernel
launch each in eager mode) and torch.compile graph breaks and recompiles (docs/performance.md, "GPU").

A host sync is an op that copies a device value to the host: `aten._local_scalar_dense` (`.item()`, `int(t)`,
`float(t)`, `bool(t)`, `if t:`), `aten.is_nonzero`, `aten.equal` (`torch.equal`) and `Tensor.tolist()`. On a CPU
tensor they cost nothing, but the same code on a GPU stalls the host until the device catches up, and breaks
CUDA-graph capture and `torch.compile(fullgraph=True)`. Counting them on the CPU with a TorchDispatchMode therefore
counts the syncs the code would make on a GPU, provided it takes the GPU's branches: run it under
`symformer.value_checks("never")`, which is what value checks do on an accelerator by default (_validation).

    from symformer.profiling import OpCounter, graph_breaks
    with OpCounter() as c:
        model(ids)
    c.syncs, c.ops, c.sync_stacks[:1]
"""

from __future__ import annotations

import dataclasses
import traceback
from collections import Counter
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = ("_local_scalar_dense", "is_nonzero", "equal")
# ops whose output size depends on the values: on a GPU the size is copied to the host, a sync too (counted apart,
# as `shape_syncs`, so `syncs` keeps the definition of docs/design.md and issue 57)
SHAPE_SYNC_OPS = ("nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive")


class _ToListReads:
    """`Tensor.tolist()` reads values without dispatching an aten op on the CPU (a copy on a GPU): seen by wrapping
    the method for the block. Not a TorchFunctionMode: an active one turns off fused fast paths (nn.MultiheadAttention,
    nn.TransformerEncoderLayer), so the counted code would take other branches than the uncounted one."""

    def __init__(self, counter: "OpCounter"):
        self.counter = counter
        self._saved = None

    def __enter__(self):
        original = torch.Tensor.tolist
        self._saved = torch.Tensor.__dict__.get("tolist")
        counter = self.counter

        def tolist(t, *args, **kwargs):
            counter._sync("tolist")
            return original(t, *args, **kwargs)

        torch.Tensor.tolist = tolist
        return self

    def __exit__(self, *exc):
        if self._saved is None:
            del torch.Tensor.tolist
        else:
            torch.Tensor.tolist = self._saved
        return False


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside the block (`ops`, and `by_op` per op name), the host syncs
    (`syncs`: the SYNC_OPS, i.e. `.item()`, `int/float/bool(t)`, `if t:`, `torch.equal`, plus `.tolist()`, which
    dispatches nothing on the CPU and is caught by wrapping the method) and the ops whose output size depends on
    the values (`shape_syncs`: nonzero, boolean-mask indexing, masked_select, unique; a sync on a GPU too).
    `plain_ops` is `ops` less the sync ops. With `stacks=True` it keeps the Python stack of each sync
    (`sync_stacks`) to find its source."""

    def __init__(self, stacks: bool = False):
        super().__init__()
        self.stacks = stacks
        self.ops = 0
        self.syncs = 0
        self.shape_syncs = 0
        self.by_op: Counter[str] = Counter()
        self.sync_stacks: list[str] = []
        self._tolist = _ToListReads(self)

    @property
    def plain_ops(self) -> int:
        return self.ops - sum(self.by_op[name] for name in SYNC_OPS)

    def _sync(self, name: str) -> None:
        self.syncs += 1
        if name == "tolist":
            self.by_op["tolist"] += 1
        if self.stacks:
            self.sync_stacks.append("".join(traceback.format_stack(limit=14)[:-2]))

    def __enter__(self):
        out = super().__enter__()
        self._tolist.__enter__()
        return out

    def __exit__(self, *exc):
        self._tolist.__exit__(*exc)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.ops += 1
        self.by_op[name] += 1
        if name in SYNC_OPS:
            self._sync(name)
        elif name in SHAPE_SYNC_OPS or (name == "index" and _has_bool_index(args)):
            self.shape_syncs += 1
        return func(*args, **(kwargs or {}))


def _has_bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices or ())


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


def compiled_graphs() -> int:
    """Graphs dynamo has handed to a backend in this process (`torch._dynamo.utils.counters["stats"]["unique_graphs"]`,
    which every backend and mode counts, `reduce-overhead` included): one per frame compiled, one per piece of
    a frame split by a graph break, and again for each recompile. `reset_compile_counters()` zeroes it."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclasses.dataclass
class CompileCounts:
    """What `torch.compile` did over the calls of a compiled step (`compile_counts`)."""

    first_call_graphs: int  # graphs the first call compiled: 1, or one per piece around each graph break
    recompiles: int  # graphs compiled by the later calls
    break_reasons: list[str]  # dynamo's graph-break messages during the first call

    @property
    def graph_breaks(self) -> int:
        """Graph breaks of the first call: its graphs less one, as torch._dynamo.explain counts them."""
        return max(self.first_call_graphs - 1, 0)


def compile_counts(step: Callable[[], Any], calls: int) -> CompileCounts:
    """Call `step()` (a torch.compile'd decoding step, say) `calls` times. What its first call compiles (one
    graph, or one per piece around each graph break) is the compile; anything compiled by a later call, when a
    guard fails (a new shape, a shape first seen static then marked dynamic, a changed Python value), is a
    recompile. One compiled run gives both, where `graph_breaks` (explain) would trace the step again. Dynamo
    stops recompiling a frame after `torch._dynamo.config.recompile_limit` (8) and runs it eagerly, so a count
    near that limit means "recompiles every step"."""
    from torch._dynamo.utils import counters

    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls: got {calls!r}, expected an integer >= 1")
    before, reasons_before = compiled_graphs(), Counter(counters["graph_break"])
    step()
    first = compiled_graphs()
    reasons = Counter(counters["graph_break"]) - reasons_before
    for _ in range(calls - 1):
        step()
    return CompileCounts(first - before, compiled_graphs() - first, [str(r).split("\n")[0] for r in reasons.elements()])


def recompiles(step: Callable[[], Any], calls: int) -> int:
    """Graphs compiled by calls 2..`calls` of `step()` beyond those of its first call (`compile_counts`)."""
    return compile_counts(step, calls).recompiles


def reset_compile_counters() -> None:
    """Zero dynamo's counters (compiled graphs, graph-break reasons); its compiled code is kept."""
    from torch._dynamo.utils import counters

    counters.clear()


__all__ = [
    "SHAPE_SYNC_OPS",
    "SYNC_OPS",
    "CompileCounts",
    "OpCounter",
    "compile_counts",
    "compiled_graphs",
    "count_ops",
    "graph_breaks",
    "recompiles",
    "reset_compile_counters",
]
