"""Reordering decoding states (issue 58, item 2): FAVOR+ and PLASH `select(index)` and `repeat_interleave` on
rows with different contents, then decoding on, equal the full causal forward of the reordered rows (float64,
1e-10). Mutation checks: a select that leaves out any one tensor of the state makes the comparison fail."""

import pytest
import torch

from symformer.attention import FavorAttention, PlashAttention
from symformer.attention.favor_state import FavorState
from symformer.attention.plash_state import PlashState

B, H, PRE, NEW, D = 3, 2, 7, 6, 8
INDEX = [2, 0, 1]  # every row moves


def _favor():
    return FavorAttention(D, n_features=16, chunk_size=4, seed=0).double()


def _plash():
    return PlashAttention(D, n_heads=H, M=4, D_k=8, causal_block=5, mixer_heads=2, seed=0).double().eval()


def _rand(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, H, n, D, generator=g, dtype=torch.float64) for _ in range(3)]


def _reorder_error(core, reorder: str) -> float:
    """Prefill B different rows (row 0 with every prefix key padded: no kept key, PLASH count 0 and FAVOR+'s c
    -inf), reorder the state, decode NEW different tokens per new row (crossing a PLASH block rollover; the rows
    from row 0 keep padding their first 3 new keys, so their count is still 0 there) and compare with the full
    causal forward over the reordered prefixes followed by the new tokens, at every query that has a kept key."""
    pre = _rand(B, PRE, 1)
    keep_pre = torch.ones(B, 1, 1, PRE, dtype=torch.bool)
    keep_pre[0] = False
    st = core.init_state()
    with torch.no_grad():
        core(*pre, attn_mask=keep_pre, is_causal=True, state=st)
        if reorder == "select":
            index = torch.tensor(INDEX)
            st.select(index)
        else:
            index = torch.arange(B).repeat_interleave(2)
            st.repeat_interleave(2)
        rows = index.numel()
        new = _rand(rows, NEW, 2)
        keep_new = torch.ones(rows, 1, 1, NEW, dtype=torch.bool)
        keep_new[index == 0, ..., :3] = False
        out = [
            core(*(t[..., i : i + 1, :] for t in new), attn_mask=keep_new[..., i : i + 1], is_causal=True, state=st)
            for i in range(NEW)
        ]
        seq = [torch.cat((p[index], n), dim=-2) for p, n in zip(pre, new)]
        keep = torch.cat((keep_pre[index], keep_new), dim=-1)
        full = core(*seq, attn_mask=keep, is_causal=True)[..., PRE:, :]
    seen = keep.cummax(-1).values[..., PRE:].view(rows, 1, NEW, 1)  # a query with a kept key at or before it
    return ((torch.cat(out, dim=-2) - full) * seen).abs().max().item()


CORES = [pytest.param(_favor, id="favor"), pytest.param(_plash, id="plash")]


@pytest.mark.parametrize("make", CORES)
@pytest.mark.parametrize("reorder", ["select", "repeat_interleave"])
def test_reordered_state_equals_the_full_forward(make, reorder):
    assert _reorder_error(make(), reorder) < 1e-10


def _skipping_select(fields, skip):
    def select(self, index):
        for f in fields:
            t = getattr(self, f)
            if f != skip and t is not None:
                setattr(self, f, t.index_select(0, index))

    return select


@pytest.mark.parametrize("skip", ["kvs", "c"])
def test_favor_select_missing_a_tensor_is_seen(monkeypatch, skip):
    monkeypatch.setattr(FavorState, "select", _skipping_select(("kvs", "c"), skip))
    assert _reorder_error(_favor(), "select") > 1e-6


@pytest.mark.parametrize("skip", PlashState._FIELDS)
def test_plash_select_missing_a_tensor_is_seen(monkeypatch, skip):
    fields = PlashState._FIELDS
    monkeypatch.setattr(PlashState, "_FIELDS", tuple(f for f in fields if f != skip))
    assert _reorder_error(_plash(), "select") > 1e-6
