"""The core "favor_learned" (linearize.learned_favor): FAVOR+ behind learned per-head maps. Identity maps give FAVOR+
itself; trained maps keep the decoding contract (a state equals the full causal forward); gradients pass gradcheck;
the forward, backward and decoding step make no host sync and compile whole (issue 57's rules)."""

import pytest
import torch

import symformer
from symformer.attention import FavorAttention
from symformer.attention.decoding import decoding_cores
from symformer.linearize import LearnedFavorAttention
from symformer.profiling import OpCounter
from symformer.registry import ATTENTION


def _qkv(n=9, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [0.5 * torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64).requires_grad_(grad) for _ in range(3)]


def _trained(seed=1):
    core = LearnedFavorAttention(4, n_heads=3, n_features=8, chunk_size=3, seed=0).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # maps away from the identity, as stage 1 leaves them
        core.q_map.add_(0.3 * torch.randn(core.q_map.shape, generator=g, dtype=torch.float64))
        core.k_map.add_(0.3 * torch.randn(core.k_map.shape, generator=g, dtype=torch.float64))
    return core


def test_registered_as_a_decoding_core():
    assert decoding_cores()["favor_learned"] is LearnedFavorAttention
    core = ATTENTION.build("favor_learned", head_dim=4, n_heads=3, d_model=12, n_features=8)
    assert core.q_map.shape == (3, 4, 4) and not core.builds_lazily


@pytest.mark.parametrize("causal", [False, True])
def test_identity_maps_are_favor(causal):
    q, k, v = _qkv()
    mine = LearnedFavorAttention(4, n_heads=3, n_features=8, chunk_size=3, seed=0).double()
    plain = FavorAttention(4, n_features=8, chunk_size=3, seed=0).double()
    assert (mine(q, k, v, is_causal=causal) - plain(q, k, v, is_causal=causal)).abs().max() < 1e-14
    # negative control: trained maps change the output
    assert (_trained()(q, k, v, is_causal=causal) - plain(q, k, v, is_causal=causal)).abs().max() > 1e-3


def test_maps_are_favor_of_the_mapped_inputs():
    q, k, v = _qkv()
    core = _trained()
    plain = FavorAttention(4, n_features=8, chunk_size=3, seed=0).double()
    qm = torch.einsum("bhnd,hde->bhne", q, core.q_map)
    km = torch.einsum("bhnd,hde->bhne", k, core.k_map)
    assert (core(q, k, v, is_causal=True) - plain(qm, km, v, is_causal=True)).abs().max() < 1e-14


def test_decoding_equals_the_causal_forward():
    q, k, v = _qkv()
    core = _trained()
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[0, ..., :2] = False
    full = core(q, k, v, attn_mask=keep, is_causal=True)
    st = core.init_state()
    steps = [core(q[..., :4, :], k[..., :4, :], v[..., :4, :], attn_mask=keep[..., :4], is_causal=True, state=st)]
    for i in range(4, 9):
        s = slice(i, i + 1)
        steps.append(core(q[..., s, :], k[..., s, :], v[..., s, :], attn_mask=keep[..., s], is_causal=True, state=st))
    assert (torch.cat(steps, -2) - full)[..., 2:, :].abs().max() < 1e-12


def test_gradcheck():
    q, k, v = (t[:1].detach().requires_grad_() for t in _qkv(n=4))
    core = _trained()
    fn = lambda q, k, v, a, b: core(q, k, v, is_causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, core.q_map, core.k_map))


def test_bfloat16_inputs_are_computed_once_in_float32():
    q, k, v = (t.float() for t in _qkv())
    core = _trained().float()
    ref = core(q, k, v, is_causal=True)
    low = core(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert low.dtype == torch.bfloat16 and (low.float() - ref).abs().max() < 0.05


def test_wrong_head_count_is_refused():
    q, k, v = _qkv()
    core = LearnedFavorAttention(4, n_heads=2, n_features=8)
    with pytest.raises(ValueError, match=r"^q: got 'shape \(2, 3, 9, 4\)', expected \(B, 2, N, 4\)"):
        core(q.float(), k.float(), v.float())


def test_forward_backward_and_step_make_no_host_sync():
    q, k, v = _qkv(grad=True)
    core = _trained()
    with symformer.value_checks("never"), OpCounter(stacks=True) as c:
        core(q, k, v, is_causal=True).sum().backward()
        st = core.init_state()
        with torch.no_grad():
            core(q[..., :4, :], k[..., :4, :], v[..., :4, :], is_causal=True, state=st)
            core(q[..., 4:5, :], k[..., 4:5, :], v[..., 4:5, :], is_causal=True, state=st)
    assert c.syncs == 0, c.sync_stacks[:1]


@pytest.mark.slow  # ~12 s of compilation
def test_forward_and_backward_compile_whole_graph():
    torch._dynamo.reset()
    q, k, v = _qkv(grad=True)
    core = _trained()
    fn = torch.compile(lambda q, k, v: core(q, k, v, is_causal=True), fullgraph=True, backend="aot_eager")
    y, y0 = fn(q, k, v), core(q, k, v, is_causal=True)
    g = torch.autograd.grad(y.square().sum(), (q, core.q_map))
    g0 = torch.autograd.grad(y0.square().sum(), (q, core.q_map))
    assert (y - y0).abs().max() < 1e-12 and max((a - b).abs().max() for a, b in zip(g, g0)) < 1e-12
    torch._dynamo.reset()
