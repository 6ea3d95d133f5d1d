"""The decoding states' memory, exactly (issue 58 item 9): `nbytes()` equals the bytes of the tensors their module
docstrings list, at the documented shapes and dtypes, and does not grow with the context (FAVOR+: kvs (B, H, m, Dv + 1)
and c (B, H, 1, 1) in float64 for float64 inputs, float32 for 16-bit ones; PLASH: pkv (n, M, 2 d), count (n, 1),
kv (n, c + M, 2 d), bias (n, c + M) with n = B H folded rows and c = causal_block). The token counter `length` is
bookkeeping, not counted."""

from __future__ import annotations

import pytest
import torch

from symformer.attention import FavorAttention, PlashAttention

B, H, DH, DV, M_FEATURES = 2, 3, 8, 5, 16
M_PROTO, BLOCK = 4, 5


def _qkv(n, dtype, dv=DV, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, H, n, DH, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, H, n, dv, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (q, k, v)]


def _run(core, n, dtype, dv=DV):
    """A prefill of n - 3 tokens, then three single-token steps."""
    q, k, v = _qkv(n, dtype, dv)
    st = core.init_state()
    with torch.no_grad():
        core(q[..., : n - 3, :], k[..., : n - 3, :], v[..., : n - 3, :], is_causal=True, state=st)
        for i in range(n - 3, n):
            core(q[..., i : i + 1, :], k[..., i : i + 1, :], v[..., i : i + 1, :], is_causal=True, state=st)
    return st


def _size(dtype):
    return torch.empty((), dtype=dtype).element_size()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [9, 40])
def test_favor_state_nbytes_is_the_documented_layout(dtype, n):
    core = FavorAttention(DH, n_features=M_FEATURES, chunk_size=4)
    core = core.double() if dtype == torch.float64 else core
    st = _run(core, n, dtype)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    assert st.nbytes() == (B * H * M_FEATURES * (DV + 1) + B * H) * _size(acc)


@pytest.mark.parametrize("n", [9, 40])
def test_plash_state_nbytes_is_the_documented_layout(n):
    core = PlashAttention(DH, n_heads=H, M=M_PROTO, D_k=8, causal_block=BLOCK, mixer_heads=1).double().eval()
    st = _run(core, n, torch.float64, dv=DH)
    rows, d2, count_size = B * H, 2 * DH, st.count.element_size()
    floats = rows * M_PROTO * d2 + rows * (BLOCK + M_PROTO) * d2 + rows * (BLOCK + M_PROTO)
    assert st.nbytes() == floats * _size(torch.float64) + rows * count_size
