"""symformer.profiling: host syncs and ops (OpCounter), graph breaks (explain) and recompiles (dynamo counters)."""

from __future__ import annotations

import pytest
import torch

from symformer.profiling import OpCounter, compile_counts, compiled_graphs, count_ops, graph_breaks, recompiles


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(lambda x: x.sum().item(), id="item"),
        pytest.param(lambda x: bool(x.sum() > 0), id="bool"),
        pytest.param(lambda x: int(x[0]), id="int"),
        pytest.param(lambda x: 1 if x.sum() > 0 else 0, id="if"),
        pytest.param(lambda x: torch.equal(x, x), id="equal"),
        pytest.param(lambda x: x.tolist(), id="tolist"),
    ],
)
def test_host_reads_count_as_syncs_not_plain_ops(read):
    x = torch.arange(4.0)
    with OpCounter(stacks=True) as c:
        read(x)
    assert c.syncs == 1
    assert c.plain_ops == c.ops - sum(c.by_op[n] for n in ("_local_scalar_dense", "is_nonzero", "equal"))
    assert c.plain_ops <= 2  # the reduction / comparison / select before the read, never the read itself
    assert len(c.sync_stacks) == 1 and "read(x)" in c.sync_stacks[0]


def test_plain_ops_make_no_sync():
    x = torch.randn(3, 4)
    (y, c) = count_ops(lambda: (x @ x.T).softmax(-1) + 1)
    assert c.syncs == 0 and c.shape_syncs == 0
    assert c.ops == c.plain_ops == 4 and c.by_op["mm"] == 1  # t, mm, _softmax, add


def test_value_dependent_sizes_count_as_shape_syncs():
    x = torch.tensor([0.0, 1.0, 2.0])
    with OpCounter() as c:
        x.nonzero()
        x[x > 0]
        x[torch.tensor([0, 2])]  # integer indexing: the size is known, no sync
    assert c.shape_syncs == 2 and c.syncs == 0


def _reads_a_value(x):
    y = x * 2
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def _branch_free(x):
    return torch.where(x.sum() > 0, x * 2 + 1, x * 2 - 1)


def test_graph_breaks_finds_an_item_read():
    reasons = graph_breaks(_reads_a_value, torch.ones(4))
    assert len(reasons) >= 1
    assert graph_breaks(_branch_free, torch.ones(4)) == []


def test_recompiles_counts_graphs_compiled_after_the_first_call():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x * 2 + 1, backend="eager")
    shapes = iter([3, 3, 3, 3])
    assert recompiles(lambda: fn(torch.ones(next(shapes))), 4) == 0  # one shape: compiled once, never again

    torch._dynamo.reset()
    fn = torch.compile(lambda x: x.cos() - 1, backend="eager")
    sizes = iter(range(3, 13))
    # a new size: one recompile with the size made dynamic, then that graph serves every later size
    assert recompiles(lambda: fn(torch.ones(next(sizes))), 10) == 1

    torch._dynamo.reset()
    g = torch.compile(lambda x, n: x + n, backend="eager", dynamic=False)
    ints = iter(range(5))
    before = compiled_graphs()
    assert recompiles(lambda: g(torch.ones(2), next(ints)), 3) == 2  # a static Python int: a graph per value
    assert compiled_graphs() - before == 3
    with pytest.raises(ValueError, match="calls"):
        recompiles(lambda: None, 0)


def test_compile_counts_breaks_of_the_first_call_as_explain_counts_them():
    torch._dynamo.reset()
    step = torch.compile(_reads_a_value, backend="eager")
    x = torch.ones(4)
    counts = compile_counts(lambda: step(x), 3)
    assert counts.graph_breaks == len(graph_breaks(_reads_a_value, x)) >= 1
    assert counts.recompiles == 0 and len(counts.break_reasons) >= 1
    torch._dynamo.reset()
    step = torch.compile(_branch_free, backend="eager")
    counts = compile_counts(lambda: step(x), 2)
    assert (counts.first_call_graphs, counts.graph_breaks, counts.break_reasons) == (1, 0, [])


def test_counting_keeps_fused_fast_paths():
    """The counter must not change what it counts: an active TorchFunctionMode turns off the fused fast path of
    nn.TransformerEncoderLayer (PLASH's mixer), which would count ~44 ops for a layer that launches one."""
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad(), OpCounter() as c:
        layer(x)
    assert dict(c.by_op) == {"_transformer_encoder_layer_fwd": 1}
    with OpCounter() as c:  # and .tolist() is still seen, and the method restored after the block
        torch.ones(2).tolist()
    assert c.syncs == 1 and "tolist" not in torch.Tensor.__dict__
