"""The core "favor_learned" (linearize.learned_favor): FAVOR+ behind learned per-head maps, with FAVOR+'s features or
Hedgehog's (feature_map). Identity maps give FAVOR+ itself (Hedgehog's: close to softmax attention); trained maps
keep the decoding contract (a state equals the full causal forward); gradients pass gradcheck; the forward, backward
and decoding step make no host sync and compile whole (issue 57's rules); 16-bit inputs agree with float32."""

import pytest
import torch

import symformer
from symformer.attention import FavorAttention
from symformer.attention.decoding import decoding_cores
from symformer.linearize import LearnedFavorAttention
from symformer.linearize.learned_favor import FEATURE_MAPS, hedgehog_features
from symformer.profiling import OpCounter
from symformer.registry import ATTENTION


def _qkv(n=9, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [0.5 * torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64).requires_grad_(grad) for _ in range(3)]


def _trained(seed=1, feature_map="favor"):
    core = LearnedFavorAttention(4, n_heads=3, n_features=8, chunk_size=3, seed=0, feature_map=feature_map).double()
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


@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_decoding_equals_the_causal_forward(feature_map):
    q, k, v = _qkv()
    core = _trained(feature_map=feature_map)
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[0, ..., :2] = False
    full = core(q, k, v, attn_mask=keep, is_causal=True)
    st = core.init_state()
    steps = [core(q[..., :4, :], k[..., :4, :], v[..., :4, :], attn_mask=keep[..., :4], is_causal=True, state=st)]
    for i in range(4, 9):
        s = slice(i, i + 1)
        steps.append(core(q[..., s, :], k[..., s, :], v[..., s, :], attn_mask=keep[..., s], is_causal=True, state=st))
    assert (torch.cat(steps, -2) - full)[..., 2:, :].abs().max() < 1e-12


@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_step_applies_the_maps_as_the_forward_does(feature_map):
    """`step` is public (FavorAttention's decoding API): called directly it must apply the learned maps once, as
    `forward(state=...)` does, and give the last rows of the full causal forward."""
    q, k, v = _qkv()
    core = _trained(feature_map=feature_map)
    full = core(q, k, v, is_causal=True)
    st = core.init_state()
    steps = [core.step(q[..., :5, :], k[..., :5, :], v[..., :5, :], st)]
    steps += [core.step(q[..., i : i + 1, :], k[..., i : i + 1, :], v[..., i : i + 1, :], st) for i in range(5, 9)]
    assert (torch.cat(steps, -2) - full).abs().max() < 1e-12
    # negative control: FAVOR+'s own step on the raw inputs is another attention
    st = core.init_state()
    raw = FavorAttention.step(core, q, k, v, st) if feature_map == "favor" else None
    assert raw is None or (raw - full).abs().max() > 1e-3


@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_gradcheck(feature_map):
    q, k, v = (t[:1].detach().requires_grad_() for t in _qkv(n=4))
    core = _trained(feature_map=feature_map)
    fn = lambda q, k, v, a, b: core(q, k, v, is_causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, core.q_map, core.k_map))


@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_bfloat16_inputs_are_computed_once_in_float32(feature_map):
    q, k, v = (t.float() for t in _qkv())
    core = _trained(feature_map=feature_map).float()
    ref = core(q, k, v, is_causal=True)
    low = core(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert low.dtype == torch.bfloat16 and (low.float() - ref).abs().max() < 0.05


def test_wrong_head_count_is_refused():
    q, k, v = _qkv()
    core = LearnedFavorAttention(4, n_heads=2, n_features=8)
    with pytest.raises(ValueError, match=r"^q: got 'shape \(2, 3, 9, 4\)', expected \(B, 2, N, 4\)"):
        core(q.float(), k.float(), v.float())


@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_forward_backward_and_step_make_no_host_sync(feature_map):
    q, k, v = _qkv(grad=True)
    core = _trained(feature_map=feature_map)
    with symformer.value_checks("never"), OpCounter(stacks=True) as c:
        core(q, k, v, is_causal=True).sum().backward()
        st = core.init_state()
        with torch.no_grad():
            core(q[..., :4, :], k[..., :4, :], v[..., :4, :], is_causal=True, state=st)
            core(q[..., 4:5, :], k[..., 4:5, :], v[..., 4:5, :], is_causal=True, state=st)
    assert c.syncs == 0, c.sync_stacks[:1]


@pytest.mark.slow  # ~12 s of compilation
@pytest.mark.parametrize("feature_map", FEATURE_MAPS)
def test_forward_and_backward_compile_whole_graph(feature_map):
    torch._dynamo.reset()
    q, k, v = _qkv(grad=True)
    core = _trained(feature_map=feature_map)
    fn = torch.compile(lambda q, k, v: core(q, k, v, is_causal=True), fullgraph=True, backend="aot_eager")
    y, y0 = fn(q, k, v), core(q, k, v, is_causal=True)
    g = torch.autograd.grad(y.square().sum(), (q, core.q_map))
    g0 = torch.autograd.grad(y0.square().sum(), (q, core.q_map))
    assert (y - y0).abs().max() < 1e-12 and max((a - b).abs().max() for a, b in zip(g, g0)) < 1e-12
    # the decoding step compiles whole too (the state updated in place), equal to the eager one
    with torch.no_grad():
        sts = [core.init_state(), core.init_state()]
        for st in sts:
            core(q[..., :4, :], k[..., :4, :], v[..., :4, :], is_causal=True, state=st)
        q1, k1, v1 = (t[..., 4:5, :].detach() for t in (q, k, v))
        step = torch.compile(lambda q, k, v: core(q, k, v, is_causal=True, state=sts[0]), fullgraph=True)
        assert (step(q1, k1, v1) - core(q1, k1, v1, is_causal=True, state=sts[1])).abs().max() < 1e-12
        assert (sts[0].kvs - sts[1].kvs).abs().max() < 1e-12
    torch._dynamo.reset()


def test_hedgehog_is_linear_attention_over_its_features():
    q, k, v = _qkv()
    core = _trained(feature_map="hedgehog")
    s = 0.5**0.5  # sqrt(scale), scale = 1 / sqrt(4)
    w = core.features
    qf = hedgehog_features(s * torch.einsum("bhnd,hde->bhne", q, core.q_map), w)
    kf = hedgehog_features(s * torch.einsum("bhnd,hde->bhne", k, core.k_map), w)
    a = (qf @ kf.transpose(-1, -2)).tril()
    want = (a @ v) / a.sum(-1, keepdim=True)
    assert qf.shape[-1] == 2 * core.n_features
    assert (core(q, k, v, is_causal=True) - want).abs().max() < 1e-13
    # negative control: FAVOR+'s features behind the same maps give another output
    assert (_trained(feature_map="favor")(q, k, v, is_causal=True) - want).abs().max() > 1e-3


def test_hedgehog_at_identity_maps_is_close_to_softmax_attention():
    q, k, v = _qkv()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    core = LearnedFavorAttention(4, n_heads=3, n_features=4096, seed=0, feature_map="hedgehog").double()
    assert (core(q, k, v, is_causal=True) - ref).abs().max() < 0.03  # 0.013 measured; m = 4096 directions
    # negative control: maps away from the identity move it off softmax attention
    with torch.no_grad():
        core.q_map.mul_(3.0)
    assert (core(q, k, v, is_causal=True) - ref).abs().max() > 0.05


def test_hedgehog_state_reorders_and_counts_its_bytes():
    q, k, v = _qkv()
    core = _trained(feature_map="hedgehog")
    st = core.init_state()
    core(q[..., :4, :], k[..., :4, :], v[..., :4, :], is_causal=True, state=st)
    assert st.kvs.shape == (2, 3, 16, 5) and st.nbytes() > 0
    st.select(torch.tensor([1, 0]))
    y = core(
        q[1:2, :, :5].expand(2, -1, -1, -1),
        k[1:2, :, :5].expand(2, -1, -1, -1),
        v[1:2, :, :5].expand(2, -1, -1, -1),
        is_causal=True,
    )
    step = core(q[..., 4:5, :].flip(0), k[..., 4:5, :].flip(0), v[..., 4:5, :].flip(0), is_causal=True, state=st)
    assert (step[0] - y[0, :, 4:5]).abs().max() < 1e-12


@pytest.mark.parametrize(
    "kw, name",
    [({"feature_map": "cosine"}, "feature_map"), ({"feature_map": "hedgehog", "kernel_eps": 1e-4}, "kernel_eps")],
)
def test_bad_feature_map_options_are_refused_by_name(kw, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        LearnedFavorAttention(4, n_heads=2, n_features=8, **kw)
