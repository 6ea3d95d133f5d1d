"""PlashAttention: shapes, exactness of each stage in float64, chunking, gradcheck, bad input."""

import math

import pytest
import torch

from symformer.attention.plash import PlashAttention
from symformer.attention.softmax import naive_attention
from symformer.registry import ATTENTION


def _qkv(b=2, h=2, nq=5, nk=7, dh=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, dh, generator=g, dtype=torch.float64) for n in (nq, nk, nk)]


def _small(**kw):
    args = dict(head_dim=4, n_heads=2, d_model=8, M=3, degrees=(1, 2), D_k=(5, 6), mixer_heads=2)
    args.update(kw)
    return PlashAttention(**args).double().eval()


def test_registered_and_cross_attention_shape():
    core = ATTENTION.build("plash", head_dim=4, n_heads=2, d_model=8, M=3, D_k=8, mixer_heads=2)
    q, k, v = (x.float() for x in _qkv(nq=3, nk=11))
    assert core(q, k, v).shape == (2, 2, 3, 4)


def test_stage1_weighted_sums_and_chunking():
    m = _small(chunk_size=2)
    _, k, v = _qkv()
    kf, vf = k.flatten(0, 1), v.flatten(0, 1)
    a = torch.softmax(kf @ m.prototypes.t() / m.tau, dim=-1)  # eqs. (2)-(5), not means
    kt, vt = m.compress(kf, vf)
    assert torch.allclose(kt, a.transpose(-1, -2) @ kf, atol=1e-13)
    assert torch.allclose(vt, a.transpose(-1, -2) @ vf, atol=1e-13)


def test_chunk_size_does_not_change_output():
    q, k, v = _qkv(nq=9, nk=13)
    a, b = _small(chunk_size=2), _small(chunk_size=1000)
    b.load_state_dict(a.state_dict())
    assert torch.allclose(a(q, k, v), b(q, k, v), atol=1e-13)


def test_stage3_is_exact_softmax_readout():
    m = _small()
    q, k, v = _qkv()
    t = m.trace(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1))
    ref = naive_attention(q.flatten(0, 1), t.k_g, t.v_g)  # eq. (12) with 1/sqrt(d_k)
    assert torch.allclose(t.out, ref, atol=1e-13)
    assert torch.allclose(m(q, k, v).flatten(0, 1), ref, atol=1e-13)


def test_norm_control_lemma_d2():
    m = _small(tau_g=3.0)
    _, k, v = _qkv()
    kt, vt = m.compress(k.flatten(0, 1), v.flatten(0, 1))
    norms = m.normalized_features(kt, vt).norm(dim=-1)
    assert bool((norms <= 1 / 3.0 + 1e-15).all()) and torch.allclose(norms, torch.full_like(norms, 1 / 3.0))


def test_sketch_stage_matches_explicit_tensorsketch():
    m = _small()
    g = torch.randn(4, 3, 8, dtype=torch.float64)
    from symformer.attention.sketch import tensor_sketch_explicit

    for i, (z, dk) in enumerate(zip(m.sketch_features(g), m.D_k)):
        assert torch.allclose(
            z, tensor_sketch_explicit(g, getattr(m, f"hash_{i}"), getattr(m, f"sign_{i}"), dk), atol=1e-13
        )


def test_state_dict_reproduces_block():
    a, b = _small(seed=1), _small(seed=2)
    q, k, v = _qkv()
    assert not torch.allclose(a(q, k, v), b(q, k, v))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(q, k, v), b(q, k, v))


def test_gradcheck_all_stages():
    m = _small(chunk_size=3)
    q, k, v = (x.requires_grad_() for x in _qkv(b=1, h=2, nq=3, nk=4))
    assert torch.autograd.gradcheck(lambda q, k, v: m(q, k, v), (q, k, v), eps=1e-6, atol=1e-6)
    # parameters of Stage I (prototypes), Stage II (beta, psi) and Stage III (W_V) through the output
    q2, k2, v2 = (x.detach() for x in (q, k, v))
    for name in ("prototypes", "beta", "psi.weight", "w_v.weight"):
        p0 = dict(m.named_parameters())[name].detach().clone().requires_grad_()

        def f(p, name=name):
            return torch.func.functional_call(m, {name: p}, (q2, k2, v2))

        assert torch.autograd.gradcheck(f, (p0,), eps=1e-6, atol=1e-6)


def test_in_forecaster():
    from symformer.models import Forecaster, TransformerConfig

    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=1,
        positional="sinusoidal",
        attention="plash",
        attention_kwargs={"M": 4, "D_k": 8},
    )
    model = Forecaster(cfg, n_vars=3, seq_len=12, label_len=6, pred_len=4)
    assert model(torch.randn(2, 12, 3)).shape == (2, 4, 3)


def test_flops_positive_and_linear_in_n():
    m = PlashAttention(128, 4, 512)
    f1, f2 = m.flops(4096, 4096), m.flops(8192, 8192)
    assert 0 < f1 < f2 < 2 * f1 + 1 and math.isclose(f2 - f1, m.flops(12288, 12288) - f2)


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"M": 0}, "M"),
        ({"D_k": 0}, "D_k"),
        ({"degrees": ()}, "degrees"),
        ({"degrees": (0,)}, "degrees"),
        ({"D_k": (4,)}, "D_k"),
        ({"tau": 0.0}, "tau"),
        ({"tau_g": -1.0}, "tau_g"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"mixer_heads": 3}, "mixer_heads"),
    ],
)
def test_bad_constructor_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        _small(**kw)


def test_bad_forward_inputs():
    m = _small()
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="k"):
        m(q, k[:, :, :0], v[:, :, :0])  # N_k = 0
    with pytest.raises(ValueError, match="k"):
        m(q, k[..., :3], v)  # mismatched q/k widths
    bad = q.clone()
    bad[0, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="q"):
        m(bad, k, v)
    with pytest.raises(ValueError, match="is_causal"):
        m(q, k, v, is_causal=True)  # causal needs N_q == N_k
    with pytest.raises(ValueError, match="attn_mask"):
        m(q, k, v, attn_mask=torch.ones(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="head_dim"):
        m(q[..., :2], k[..., :2], v[..., :2])
    with pytest.raises(TypeError, match="q"):
        m(q.numpy(), k, v)


def test_causal_variant_depends_only_on_the_past():
    m = _small(causal_block=3)
    q, k, v = _qkv(nq=10, nk=10)
    y = m(q, k, v, is_causal=True)
    for j in (0, 4, 9):
        k2, v2 = k.clone(), v.clone()
        k2[..., j, :] += 1.0
        v2[..., j, :] -= 2.0
        y2 = m(q, k2, v2, is_causal=True)
        assert torch.allclose(y[..., :j, :], y2[..., :j, :], atol=1e-14, rtol=0)
        assert not torch.allclose(y[..., j:, :], y2[..., j:, :])


def test_causal_variant_is_exact_within_one_block():
    m = _small(causal_block=16)
    q, k, v = _qkv(nq=7, nk=7)
    assert torch.allclose(m(q, k, v, is_causal=True), naive_attention(q, k, v, is_causal=True), atol=1e-13)


def test_causal_blocks_match_stagewise_reference():
    """Query i of block b reads the Stage I-III summaries of the keys of blocks < b (none for block 0, whose
    summaries are never built) and its own block's keys up to i, in one softmax."""
    m = _small(causal_block=3)
    q, k, v = (x[:, :1] for x in _qkv(b=1, h=2, nq=8, nk=8))
    y = m(q, k, v, is_causal=True)[0, 0]
    qf, kf, vf = q[0], k[0], v[0]
    for i in range(8):
        b0 = i // 3 * 3
        logits, values = qf[0, i] @ kf[0, b0 : i + 1].mT / 2, vf[0, b0 : i + 1]
        if b0:
            z = m.mixer(m.embed(m.sketch_features(m.normalized_features(*m.compress(kf[:, :b0], vf[:, :b0])))))
            logits = torch.cat([qf[0, i] @ m.w_k(z)[0].mT / 2, logits], -1)
            values = torch.cat([m.w_v(z)[0], values])
        assert torch.allclose(y[i], torch.softmax(logits, -1) @ values, atol=1e-13, rtol=0)


def test_causal_gradcheck():
    m = _small(causal_block=2)
    q, k, v = (x.requires_grad_() for x in _qkv(b=1, h=1, nq=5, nk=5))
    assert torch.autograd.gradcheck(lambda q, k, v: m(q, k, v, is_causal=True), (q, k, v), eps=1e-6, atol=1e-6)


def test_streamed_readout_equals_autograd_path():
    """No-grad forward writes chunks in place; the autograd path concatenates. Same numbers."""
    m = _small(chunk_size=2)
    q, k, v = _qkv(nq=9, nk=13)
    with torch.no_grad():
        streamed = m(q, k, v)
    tracked = m(q.clone().requires_grad_(), k, v)
    assert tracked.requires_grad
    assert torch.allclose(streamed, tracked.detach(), atol=1e-14)


@pytest.mark.parametrize("arg", ["k", "v"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_keys_or_values_are_named(arg, value):
    """k and v are checked through the M x d Stage I summaries; the error still names the argument."""
    m = _small()
    q, k, v = _qkv()
    bad = {"k": k.clone(), "v": v.clone()}
    bad[arg][1, 0, 3, 2] = value
    with pytest.raises(ValueError, match=f"^{arg}: "):
        m(q, bad["k"], bad["v"])


def test_overflowing_finite_keys_raise():
    m = _small().float()
    q, k, v = (x.float() for x in _qkv())
    huge = torch.full_like(k, 3e38)  # finite, but K P^T and A^T K overflow float32
    assert torch.isfinite(huge).all()
    with pytest.raises(ValueError, match="^k: .*overflow"):
        m(q, huge, v)


def test_overflowing_finite_values_name_v():
    m = _small().float()
    q, k, v = (x.float() for x in _qkv())
    huge = torch.full_like(v, 3e38)  # finite, but A^T V sums past float32's range
    with pytest.raises(ValueError, match="^v: .*overflow"):
        m(q, k, huge)


def test_built_under_a_16bit_default_dtype_draws_the_float32_prototypes():
    """from_pretrained(dtype=) builds modules under a 16-bit default dtype: the prototypes are the float32 build's
    rounded once (a draw made in bfloat16 is another draw), and the hashes are the same, so a seed names one model."""
    a = PlashAttention(8, n_heads=2, M=4, D_k=8, seed=1)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        b = PlashAttention(8, n_heads=2, M=4, D_k=8, seed=1)
    finally:
        torch.set_default_dtype(old)
    assert b.prototypes.dtype == torch.bfloat16 and torch.equal(b.prototypes, a.prototypes.to(torch.bfloat16))
    for name, x in a.named_buffers():
        assert torch.equal(x, dict(b.named_buffers())[name]), name
