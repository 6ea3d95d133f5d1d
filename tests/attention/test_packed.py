"""Packed sequences in the cores and models (issue 61): cu_seqlens / segment_ids give each document the outputs of
the document alone (float64, <= 1e-10), the hand-written packed forms pass gradcheck, make no host sync and compile
whole; bad boundaries are a ValueError naming the argument."""

import pytest
import torch

import symformer
from symformer.attention import FavorAttention, PlashAttention, SoftmaxAttention
from symformer.attention.boundaries import doc_from_cu_seqlens
from symformer.attention.packed import favor_causal_packed, plash_causal_packed
from symformer.models import CausalLM, TransformerConfig
from symformer.profiling import OpCounter

LENS = ((3, 17, 2, 9, 30, 1), (25, 4, 4, 4, 4, 21))  # two rows of 62 tokens: short, long, unaligned documents
N = 62


def _core(name, block=4):
    if name == "softmax":
        return SoftmaxAttention()
    if name == "favor":
        return FavorAttention(8, n_features=16, chunk_size=5, seed=0).double()
    return PlashAttention(8, M=4, D_k=8, causal_block=block, mixer_heads=2, seed=0).double().eval()


def _qkv(b=2, n=N, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, 2, n, 8, generator=g, dtype=torch.float64, requires_grad=grad) for _ in range(3)]


def _segments(rows=LENS):
    return torch.stack([torch.repeat_interleave(torch.arange(len(r)), torch.tensor(r)) for r in rows])


def _alone_diff(core, out, q, k, v, rows=LENS):
    worst = 0.0
    for r, lens in enumerate(rows):
        a = 0
        for n in lens:
            with torch.no_grad():
                ref = core(
                    q[r : r + 1, :, a : a + n], k[r : r + 1, :, a : a + n], v[r : r + 1, :, a : a + n], None, True
                )
            worst = max(worst, (out[r : r + 1, :, a : a + n] - ref).abs().max().item())
            a += n
    return worst


CASES = [("softmax", 4), ("favor", 4)] + [("plash", c) for c in (1, 3, 4, 7, 16, 64)]


@pytest.mark.parametrize(("name", "block"), CASES, ids=[f"{n}-c{c}" for n, c in CASES])
def test_each_packed_document_equals_it_alone(name, block):
    core, (q, k, v) = _core(name, block), _qkv()
    with torch.no_grad():
        out = core(q, k, v, is_causal=True, segment_ids=_segments())
    assert _alone_diff(core, out, q, k, v) <= 1e-10


@pytest.mark.parametrize("name", ["softmax", "favor", "plash"])
def test_cu_seqlens_flat_and_per_row_equal_segment_ids(name):
    core, (q, k, v) = _core(name), _qkv()
    cum = [torch.tensor((0, *r)).cumsum(0) for r in LENS]
    flat = torch.cat([cum[0], cum[1][1:] + N]).int()  # flash-attention: over the B * N flattened tokens
    per_row = torch.stack(cum).int()
    with torch.no_grad():
        ref = core(q, k, v, is_causal=True, segment_ids=_segments())
        for cu in (flat, per_row):
            assert torch.equal(core(q, k, v, is_causal=True, cu_seqlens=cu), ref)


def test_a_leak_across_documents_is_caught():
    """Negative control: without the boundaries the same row changes later documents' outputs."""
    core, (q, k, v) = _core("favor"), _qkv()
    with torch.no_grad():
        assert _alone_diff(core, core(q, k, v, is_causal=True), q, k, v) > 1e-3


def test_packed_forms_pass_gradcheck():
    g = torch.Generator().manual_seed(0)
    doc = _segments(((3, 5, 1, 4),))
    qf, kf = (torch.rand(1, 1, 13, 4, generator=g, dtype=torch.float64, requires_grad=True) + 0.1 for _ in range(2))
    v = torch.randn(1, 1, 13, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: favor_causal_packed(a, b, c, doc, 4), (qf, kf, v), fast_mode=True)
    core = _core("plash", 2)
    doc = _segments(((3, 1, 3),))
    q, k, v = (torch.randn(1, 7, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    f = lambda a, b, c: plash_causal_packed(core, a, b, c, None, doc)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


CU = torch.tensor([0, 3, 20, 22, 31, 61, 62], dtype=torch.int32)


@pytest.mark.parametrize("name", ["softmax", "favor", "plash"])
def test_packed_forward_and_backward_make_no_host_sync(name):
    core, (q, k, v) = _core(name), _qkv(b=1, grad=True)
    with symformer.value_checks("never"), OpCounter(stacks=True) as c:
        core(q, k, v, is_causal=True, cu_seqlens=CU).sum().backward()
    assert c.syncs == 0, c.sync_stacks[:1]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "favor", "plash"])
def test_packed_forward_compiles_whole(name):
    core, (q1, k1, v1) = _core(name), _qkv(b=1)
    cu = CU
    torch._dynamo.reset()
    f = torch.compile(lambda a, b, d: core(a, b, d, is_causal=True, cu_seqlens=cu), fullgraph=True, backend="eager")
    with torch.no_grad():
        assert (f(q1, k1, v1) - core(q1, k1, v1, is_causal=True, cu_seqlens=cu)).abs().max() <= 1e-12
    torch._dynamo.reset()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"cu_seqlens": torch.tensor([0, 30, 20, 62], dtype=torch.int32)}, "cu_seqlens.*increasing"),
        ({"cu_seqlens": torch.tensor([0, 30, 61], dtype=torch.int32)}, "cu_seqlens.*total length 62"),
        ({"cu_seqlens": torch.tensor([1, 30, 62], dtype=torch.int32)}, "cu_seqlens.*0 first"),
        ({"cu_seqlens": torch.tensor([0.0, 62.0])}, "cu_seqlens.*integer"),
        ({"segment_ids": torch.tensor([[0] * 31 + [1] * 31]).flip(-1)}, "segment_ids.*non-decreasing"),
        ({"segment_ids": torch.zeros(1, 61, dtype=torch.long)}, "segment_ids.*shape"),
    ],
)
@pytest.mark.parametrize("name", ["softmax", "favor", "plash"])
def test_bad_boundaries_are_a_value_error_naming_the_argument(name, kw, match):
    core, (q, k, v) = _core(name), _qkv(b=1)
    with pytest.raises((ValueError, TypeError), match=match):
        core(q, k, v, is_causal=True, **kw)


def test_linear_cores_refuse_packing_without_causality_or_with_a_state():
    seg = _segments()
    q, k, v = _qkv()
    for name in ("favor", "plash"):
        core = _core(name)
        with pytest.raises(ValueError, match="is_causal"):
            core(q, k, v, segment_ids=seg)
        with pytest.raises(ValueError, match="state"):
            core(q, k, v, is_causal=True, state=core.init_state(), segment_ids=seg)


def test_cu_seqlens_over_flattened_rows_must_split_at_row_starts():
    with pytest.raises(ValueError, match="every row start"):
        doc_from_cu_seqlens(torch.tensor([0, 40, 124], dtype=torch.int32), 2, N)


@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
@pytest.mark.parametrize("attention", ["softmax", "favor", "plash"])
def test_causal_lm_packed_logits_equal_each_document_alone(attention, positional):
    opts = {"favor": {"n_features": 16, "chunk_size": 4}, "plash": {"M": 4, "D_k": 8, "causal_block": 4}}
    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=2,
        attention=attention,
        positional=positional,
        attention_kwargs=opts.get(attention, {}),
    )
    torch.manual_seed(0)
    lm = CausalLM(cfg, vocab_size=13).double().eval()
    lens = (5, 9, 3)
    ids = torch.randint(0, 13, (1, sum(lens)))
    cu = torch.tensor((0, 5, 14, 17), dtype=torch.int32)
    with torch.no_grad():
        out = lm(ids, cu_seqlens=cu)
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            assert (out[:, a:b] - lm(ids[:, a:b])).abs().max() <= 1e-10
        with pytest.raises(ValueError, match="positions"):
            lm(ids, torch.arange(17)[:, None], cu_seqlens=cu)  # positions that do not restart
