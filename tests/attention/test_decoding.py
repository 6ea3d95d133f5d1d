"""Causal decoding states of FAVOR+ and PLASH: exact against the full causal forward (float64), key padding, state
invalidation, 16-bit inputs against a float64 reference at thousands of positions."""

import copy

import pytest
import torch

from symformer.attention import FavorAttention, PlashAttention
from symformer.attention.favor_state import FavorState
from symformer.attention.plash_state import PlashState


def _qkv(b=2, h=2, n=29, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in range(3)]


def _favor(**kw):
    return FavorAttention(8, **{"n_features": 16, "chunk_size": 4, **kw}).double()


def _plash(**kw):
    args = {"n_heads": 2, "M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2, **kw}
    return PlashAttention(8, **args).double().eval()


def _left_padding(b, n, pad):
    keep = torch.ones(b, 1, 1, n, dtype=torch.bool)
    keep[0, ..., :pad] = False
    return keep


def _decode(core, q, k, v, keep, prefill):
    """Outputs of a prefill of `prefill` tokens, then one token at a time, with one state."""
    st = core.init_state()
    mask = (lambda a, b: None) if keep is None else (lambda a, b: keep[..., a:b])
    ys = [
        core(
            q[..., :prefill, :],
            k[..., :prefill, :],
            v[..., :prefill, :],
            attn_mask=mask(0, prefill),
            is_causal=True,
            state=st,
        )
    ]
    for i in range(prefill, q.shape[-2]):
        ys.append(
            core(
                q[..., i : i + 1, :],
                k[..., i : i + 1, :],
                v[..., i : i + 1, :],
                attn_mask=mask(i, i + 1),
                is_causal=True,
                state=st,
            )
        )
    return torch.cat(ys, dim=-2), st


@pytest.mark.parametrize("make", [_favor, _plash], ids=["favor", "plash"])
@pytest.mark.parametrize("pad", [0, 7])
@pytest.mark.parametrize("prefill", [1, 12])
def test_state_decoding_equals_full_causal_forward(make, pad, prefill, device):
    core = make().to(device)
    q, k, v = (t.to(device) for t in _qkv())
    keep = _left_padding(2, 29, pad).to(device) if pad else None
    with torch.no_grad():
        full = core(q, k, v, attn_mask=keep, is_causal=True)
        y, st = _decode(core, q, k, v, keep, prefill)
    assert (y - full)[..., pad:, :].abs().max() < 1e-10  # 29 tokens: five PLASH blocks of 5, seven FAVOR chunks of 4
    assert (y - full)[1].abs().max() < 1e-10
    if pad:
        assert y[0, :, :pad].abs().max() == 0  # a query that sees no kept key: output 0 (finite)
    assert st.nbytes() > 0


@pytest.mark.parametrize("make", [_favor, _plash], ids=["favor", "plash"])
def test_padded_keys_do_not_reach_any_output(make):
    core = make()
    q, k, v = _qkv()
    keep = _left_padding(2, 29, 7)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, :7] += 5.0
    v2[0, :, :7] -= 3.0
    with torch.no_grad():
        a = core(q, k, v, attn_mask=keep, is_causal=True)
        b = core(q, k2, v2, attn_mask=keep, is_causal=True)
        unmasked = core(q, k, v, is_causal=True)
    assert (a - b)[0, :, 7:].abs().max() < 1e-12
    assert (a - unmasked)[0, :, 7:].abs().max() > 1e-3  # the mask is honoured, not ignored


def test_plash_masked_causal_gradcheck():
    core = _plash(M=3, D_k=4, causal_block=3)
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=2, n=7, d=8))
    keep = torch.tensor([False, False, True, True, True, False, True]).view(1, 1, 1, 7)
    assert torch.autograd.gradcheck(
        lambda q, k, v: core(q, k, v, attn_mask=keep, is_causal=True), (q, k, v), fast_mode=True
    )


def test_favor_redraw_invalidates_a_live_state():
    core = _favor()
    q, k, v = _qkv(n=3)
    st = core.init_state()
    core(q, k, v, is_causal=True, state=st)
    core.redraw()
    with pytest.raises(ValueError, match="^state: .*redrawn"):
        core(q[..., :1, :], k[..., :1, :], v[..., :1, :], is_causal=True, state=st)


def test_state_bad_input():
    fav, pl = _favor(), _plash()
    q, k, v = _qkv(n=3)
    with pytest.raises(TypeError, match="^state: got 'PlashState'"):
        fav(q, k, v, is_causal=True, state=PlashState())
    with pytest.raises(TypeError, match="^state: got 'FavorState'"):
        pl(q, k, v, is_causal=True, state=FavorState())
    with pytest.raises(ValueError, match="^is_causal: "):
        fav(q, k, v, is_causal=False, state=fav.init_state())
    with pytest.raises(ValueError, match="^kernel_eps / denominator_eps: "):
        _favor(kernel_eps=1e-4).init_state()
    with pytest.raises(ValueError, match="^attn_mask: .*can only drop keys"):
        pl(q, k, v, attn_mask=torch.ones(3, 3, dtype=torch.bool).tril(), is_causal=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("make", [_favor, _plash], ids=["favor", "plash"])
def test_16bit_inputs_match_a_float64_reference(make, dtype, device):
    """Thousands of positions: the features' sums (FAVOR+) and Stage I-II (PLASH) run in float32, so the output is
    the float64 result on the same (rounded) inputs within the dtype's rounding; the state decodes the same."""
    core = make(n_features=64, chunk_size=256) if make is _favor else make(causal_block=256, M=8)
    core = core.to(device)
    q, k, v = (t.to(device=device, dtype=dtype) for t in _qkv(b=1, h=2, n=2048, seed=3, dtype=torch.float32))
    half = copy.deepcopy(core).to(dtype)
    with torch.no_grad():  # the reference: float64 on the same rounded inputs and parameters
        ref = copy.deepcopy(half).double()(q.double(), k.double(), v.double(), is_causal=True)
        y = half(q, k, v, is_causal=True)
        st = half.init_state()
        half(q[..., :2000, :], k[..., :2000, :], v[..., :2000, :], is_causal=True, state=st)
        last = half(q[..., 2000:, :], k[..., 2000:, :], v[..., 2000:, :], is_causal=True, state=st)
    eps = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    bound = 2 * eps * ref.abs().max()
    assert y.dtype == dtype and last.dtype == dtype
    assert (y.double() - ref).abs().max() <= bound
    assert (last.double() - ref[..., 2000:, :]).abs().max() <= bound
    if make is _favor:
        assert half.features.dtype == torch.float32  # the float32 master survives .to(16 bits)


@pytest.mark.parametrize("make", [_favor, _plash], ids=["favor", "plash"])
def test_autocast_runs_the_core_in_float32(make, device):
    core = make().float().to(device)
    q, k, v = (t.to(device) for t in _qkv(n=40, dtype=torch.float32))
    with torch.no_grad():
        plain = core(q, k, v, is_causal=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            auto = core(q, k, v, is_causal=True)
    assert auto.dtype == torch.float32 and torch.equal(auto, plain)
