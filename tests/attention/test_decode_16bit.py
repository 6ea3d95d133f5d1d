"""Token-by-token FAVOR+ decoding in 16 bits against float64 (issue 58 item 7): a bfloat16 / float16 decode of 1024
tokens (a short prefill, then one token per step, so the running sums and the running stabiliser see ~1000 updates,
not the single chunk the older check covered) equals the float64 full causal forward with the same features rounded
once to the input dtype, on >= 99% of the entries, and everywhere to within one ulp of the dtype plus 2^-20 of the
largest output (an entry that cancels to far below the values keeps the float32 error of their scale).

Why: a 16-bit step computes in float32 (favor_state.accumulation_dtype: the features are exponentials and z sums N of
them) and rounds its output once. The float32 sums carry a relative error of order sqrt(N) 2^-24 ~ 2e-6 at N = 1024,
a few thousandths of a bfloat16 ulp (2^-8) and about 1% of a float16 ulp (2^-11), so round16(y32) = round16(y64) on
nearly all entries (measured: bfloat16 0.9998, float16 0.9991). A state accumulated in the input dtype (the negative
control) rounds every update and is off on most entries."""

from __future__ import annotations

import copy

import pytest
import torch

from symformer.attention import FavorAttention

B, H, N, DH, PREFILL = 1, 2, 1024, 16, 16
SPACING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # half an ulp at |y| in [1, 2)


def _inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (0.5 * torch.randn(B, H, N, DH, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, H, N, DH, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (q, k, v)]  # 16-bit values: float64 sees the very same inputs


def decode(core, q, k, v):
    st = core.init_state()
    with torch.no_grad():
        ys = [core(q[..., :PREFILL, :], k[..., :PREFILL, :], v[..., :PREFILL, :], is_causal=True, state=st)]
        for i in range(PREFILL, N):
            s = slice(i, i + 1)
            ys.append(core(q[..., s, :], k[..., s, :], v[..., s, :], is_causal=True, state=st))
    return torch.cat(ys, dim=-2)


def decode_vs_float64(dtype):
    core = FavorAttention(DH, n_features=64, chunk_size=16, seed=0)
    q, k, v = _inputs(dtype)
    y16 = decode(core, q, k, v)
    with torch.no_grad():
        y64 = copy.deepcopy(core).double()(q.double(), k.double(), v.double(), is_causal=True)
    return y16, y64


def _ulp(y: torch.Tensor, dtype) -> torch.Tensor:
    """The dtype's spacing at |y| (normal range)."""
    e = torch.floor(torch.log2(y.abs().clamp_min(torch.finfo(dtype).smallest_normal)))
    return torch.exp2(e) * 2 * SPACING[dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_decoding_equals_the_float64_forward_rounded_once(dtype):
    y16, y64 = decode_vs_float64(dtype)
    assert y16.dtype == dtype and y16.shape == y64.shape
    share = float((y16 == y64.to(dtype)).double().mean())
    assert share >= 0.99, share
    off = (y16.double() - y64).abs()
    bound = _ulp(y64, dtype) + 2.0**-20 * float(y64.abs().max())
    assert bool((off <= bound).all()), float((off / bound).max())
    late = (y16[..., -256:, :] == y64[..., -256:, :].to(dtype)).double().mean()  # after ~1000 state updates
    assert float(late) >= 0.99, float(late)


def test_a_state_accumulated_in_16_bits_fails(monkeypatch):
    """Negative control: the running sums kept in bfloat16 (accumulation_dtype returning the input dtype)."""
    from symformer.attention import favor_state

    monkeypatch.setattr(favor_state, "accumulation_dtype", lambda dt: dt)
    y16, y64 = decode_vs_float64(torch.bfloat16)
    share = float((y16 == y64.to(torch.bfloat16)).double().mean())
    assert share < 0.9, share
