"""FAVOR+ (ESPR Tier 7): exactness of the linear-time forms, unbiasedness and variance (T7.3-T7.5),
gradients, masks, state, bad input, and the cross-check with performer-pytorch."""

from __future__ import annotations

import math

import pytest
import torch

from symformer.attention import FavorAttention, naive_attention
from symformer.attention.favor import draw_features, positive_features
from symformer.registry import ATTENTION

torch.set_num_threads(1)


def _qkv(b=2, h=3, n=37, d=8, scale=0.5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype) * scale for _ in range(3)]


def _kernel_reference(q, k, v, w, scale, causal):
    """sum_j phi(q^_i).phi(k^_j) v_j / sum_j phi(q^_i).phi(k^_j) with the unstabilised features of T7.1."""
    r = math.sqrt(scale)
    a = positive_features(q * r, w) @ positive_features(k * r, w).transpose(-1, -2)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(-1, keepdim=True)


# ------------------------------------------------------------------ exactness of the fast forms
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 16, 128])
@pytest.mark.parametrize("scale", [None, 0.2])
def test_linear_forms_equal_explicit_kernel_attention(causal, chunk, scale):
    q, k, v = _qkv()
    f = FavorAttention(8, n_features=24, chunk_size=chunk).double()
    y = f(q, k, v, is_causal=causal, scale=scale)
    ref = _kernel_reference(q, k, v, f.features, 1 / math.sqrt(8) if scale is None else scale, causal)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("block_rows", [1, 4, 10, None])
def test_streamed_blocks_with_running_stabiliser_are_exact(block_rows):
    """Key blocks of growing norm force the running stabiliser up several times (rescaled accumulators)."""
    q, k, v = _qkv()
    k = k * torch.linspace(0.2, 3.0, k.shape[-2], dtype=torch.float64)[:, None]
    f = FavorAttention(8, n_features=24, block_rows=block_rows).double()
    ref = _kernel_reference(q, k, v, f.features, 1 / math.sqrt(8), False)
    torch.testing.assert_close(f(q, k, v), ref, rtol=1e-12, atol=1e-13)
    keep = torch.rand(k.shape[-2], generator=torch.Generator().manual_seed(0)) > 0.3
    torch.testing.assert_close(
        f(q, k, v, attn_mask=keep), f(q, k[..., keep, :], v[..., keep, :]), rtol=1e-12, atol=1e-13
    )


def test_gradcheck_streamed_blocks():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=2, n=7, d=4))
    f = FavorAttention(4, n_features=5, block_rows=3).double()
    assert torch.autograd.gradcheck(lambda a, b, c: f(a, b, c), (q, k, v))


def test_stabiliser_does_not_change_output_for_large_norms():
    """Features that would overflow unstabilised (|q^|^2/2 ~ 600) still give the exact normalised output."""
    q, k, v = _qkv(n=20, scale=1.0)
    f = FavorAttention(8, n_features=16).double()
    q_big = q * 12.0
    w = f.features
    # reference in log space: log phi(q)phi(k) summed over features with logsumexp
    r = 8**-0.25
    lq = (q_big * r) @ w.T - 0.5 * (q_big * r).pow(2).sum(-1, keepdim=True)
    lk = (k * r) @ w.T - 0.5 * (k * r).pow(2).sum(-1, keepdim=True)
    logits = torch.logsumexp(lq[..., :, None, :] + lk[..., None, :, :], dim=-1)
    ref = torch.softmax(logits, -1) @ v
    torch.testing.assert_close(f(q_big, k, v), ref, rtol=1e-10, atol=1e-12)
    y32 = FavorAttention(8, n_features=16)(q_big.float() * 3, k.float() * 3, v.float())
    assert torch.isfinite(y32).all()


def test_converges_to_softmax_as_features_grow():
    q, k, v = _qkv(b=1, h=2, n=64, d=16, scale=0.6)
    exact = naive_attention(q, k, v)
    errs = []
    for m in (256, 4096):  # mean over 8 draws; m^(-1/2) predicts a ratio of 0.25
        e = [
            float((FavorAttention(16, n_features=m, seed=s).double()(q, k, v) - exact).norm() / exact.norm())
            for s in range(8)
        ]
        errs.append(sum(e) / len(e))
    assert errs[1] < 0.4 * errs[0] and errs[1] < 0.1, errs


# ------------------------------------------------------------------ features
def test_orthogonal_features_are_blockwise_orthogonal_and_gaussian_norms():
    w = draw_features(40, 16, orthogonal=True, generator=torch.Generator().manual_seed(1))
    assert w.shape == (40, 16)
    for blk in (w[:16], w[16:32], w[32:]):
        u = blk / blk.norm(dim=-1, keepdim=True)
        torch.testing.assert_close(u @ u.T, torch.eye(len(blk), dtype=torch.float64), atol=1e-13, rtol=0)


def test_orthogonal_directions_have_no_sign_bias():
    """Without the QR sign fix the first row would always point into one half-space (biasing T7.3).
    Fair coin, 800 draws: |z| > 4.5 has probability < 1e-5."""
    g = torch.Generator().manual_seed(2)
    pos = sum(int(draw_features(4, 4, True, g)[0, 0] > 0) for _ in range(800))
    assert abs(pos - 400) / math.sqrt(200) < 4.5


@pytest.mark.parametrize("orthogonal", [False, True])
def test_unbiasedness_T7_3(orthogonal):
    """Mean of 2e5 features against exp(x.y); z uses the T7.4/T7.5 i.i.d. standard deviation (conservative
    for orthogonal features, whose variance is no larger). Per point P(|z| > 4.5) ~ 7e-6 for i.i.d."""
    d, n = 8, 200_000
    w = draw_features(n, d, orthogonal, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(6)
    for nx, ny, cos in [(0.5, 0.5, 1.0), (1.0, 0.7, -0.5), (0.8, 1.0, 0.0), (1.2, 0.3, 0.3)]:
        u = torch.randn(2, d, generator=g, dtype=torch.float64)
        x = u[0] / u[0].norm()
        perp = u[1] - (u[1] @ x) * x
        perp = perp / perp.norm()
        y = ny * (cos * x + math.sqrt(1 - cos**2) * perp)
        x = nx * x
        z = positive_features(x, w) * positive_features(y, w) * n  # Z(x, y; w_t) per draw
        xy = float(x @ y)
        var = math.exp(2 * xy) * (math.exp(nx**2 + ny**2 + 2 * xy) - 1)  # T7.4
        zscore = (float(z.mean()) - math.exp(xy)) / math.sqrt(var / n)  # T7.5
        assert abs(zscore) < 4.5, (nx, ny, cos, zscore)


def test_variance_formula_T7_4_T7_5():
    """Empirical variance of the mean of n_rf i.i.d. draws against Var[Z]/n_rf, at points where the
    sample variance is estimable (predicted relative s.e. below 3%); the 0.15 tolerance is > 5 s.e."""
    d, reps = 6, 40_000
    g = torch.Generator().manual_seed(7)
    x = torch.tensor([0.4, 0.1, 0, 0, 0, 0], dtype=torch.float64)
    y = torch.tensor([0.2, -0.3, 0.1, 0, 0, 0], dtype=torch.float64)
    xy, s2 = float(x @ y), float((x + y) @ (x + y))
    var1 = math.exp(2 * xy) * (math.exp(float(x @ x + y @ y) + 2 * xy) - 1)
    for n_rf in (1, 8):
        w = torch.randn(reps * n_rf, d, generator=g, dtype=torch.float64)
        z = (torch.exp(w @ (x + y) - 0.5 * float(x @ x + y @ y))).view(reps, n_rf).mean(-1)
        rel = float(z.var()) / (var1 / n_rf) - 1
        assert math.exp(4 * s2) / reps < 0.03**2  # estimable (lognormal kurtosis bound)
        assert abs(rel) < 0.15, (n_rf, rel)


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("causal,chunk", [(False, 4), (True, 4), (True, 6)])  # chunk 6 = N: the one-chunk path
def test_gradcheck(causal, chunk):
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=2, n=6, d=4))
    f = FavorAttention(4, n_features=5, chunk_size=chunk).double()
    assert torch.autograd.gradcheck(lambda a, b, c: f(a, b, c, is_causal=causal), (q, k, v))


def test_gradcheck_with_key_padding_mask():
    q, k, v = (t.requires_grad_() for t in _qkv(b=2, h=1, n=5, d=4))
    keep = torch.tensor([[True, True, False, True, False], [True, False, True, True, True]])[:, None, None, :]
    f = FavorAttention(4, n_features=6).double()
    assert torch.autograd.gradcheck(lambda a, b, c: f(a, b, c, attn_mask=keep), (q, k, v))


# ------------------------------------------------------------------ masks
def test_key_padding_mask_equals_dropping_keys():
    q, k, v = _qkv(b=1, h=2, n=9)
    keep = torch.ones(9, dtype=torch.bool)
    keep[[1, 4, 8]] = False
    f = FavorAttention(8, n_features=32).double()
    y = f(q, k, v, attn_mask=keep)
    torch.testing.assert_close(y, f(q, k[..., keep, :], v[..., keep, :]), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    "mask",
    [
        torch.zeros(37, 37),  # additive float mask
        torch.ones(37, 37, dtype=torch.bool).tril(),  # per-query boolean mask
        torch.ones(36, dtype=torch.bool),  # wrong key length
        torch.ones(5, 3, 1, 37, dtype=torch.bool),  # wrong batch
    ],
)
def test_masks_that_cannot_be_honoured_raise(mask):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="attn_mask"):
        FavorAttention(8).double()(q, k, v, attn_mask=mask)


# ------------------------------------------------------------------ bad input
def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="n_features"):
        FavorAttention(8, n_features=0)
    with pytest.raises(TypeError, match="n_features"):
        FavorAttention(8, n_features=2.5)
    with pytest.raises(ValueError, match="head_dim"):
        FavorAttention(0)
    with pytest.raises(ValueError, match="chunk_size"):
        FavorAttention(8, chunk_size=0)
    with pytest.raises(ValueError, match="kernel_eps"):
        FavorAttention(8, kernel_eps=-1.0)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_inputs_raise_naming_the_argument(name, bad):
    t = dict(zip("qkv", _qkv()))
    t[name][1, 2, 3, 4] = bad
    for causal in (False, True):
        with pytest.raises(ValueError, match=f"^{name}: .*finite"):
            FavorAttention(8).double()(t["q"], t["k"], t["v"], is_causal=causal)


def test_shape_and_type_errors():
    q, k, v = _qkv()
    f = FavorAttention(8).double()
    with pytest.raises(ValueError, match="^k: .*head dim"):
        f(q, k[..., :6], v)
    with pytest.raises(ValueError, match="^q: .*head_dim 8"):
        f(q[..., :6], k[..., :6], v)
    with pytest.raises(ValueError, match="^v: "):
        f(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="^q: "):
        f(q[0], k, v)
    with pytest.raises(TypeError, match="^q: "):
        f(q.numpy(), k, v)
    with pytest.raises(ValueError, match="is_causal"):
        f(q[..., :5, :], k, v, is_causal=True)
    with pytest.raises(ValueError, match="scale"):
        f(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="^w: "):
        f.set_features(torch.zeros(3, 8))


# ------------------------------------------------------------------ state, redraw, registry, model
def test_state_dict_reproduces_module_and_redraw_is_deterministic():
    a = FavorAttention(8, n_features=20, seed=4)
    b = FavorAttention(8, n_features=20, seed=9)
    b.load_state_dict(a.state_dict())
    q, k, v = _qkv(dtype=torch.float32)
    a.eval()
    b.eval()
    torch.testing.assert_close(a(q, k, v), b(q, k, v))
    w0 = a.features.clone()
    a.train()
    b.train()
    for _ in range(3):  # forward never redraws (the schedule is train.callbacks.FeatureRedraw)
        a(q, k, v)
        b(q, k, v)
    assert torch.equal(a.features, w0)
    a.redraw()
    b.redraw()
    assert not torch.equal(a.features, w0) and torch.equal(a.features, b.features)
    a.eval()
    w1 = a.features.clone()
    for _ in range(5):
        a(q, k, v)
    assert torch.equal(a.features, w1)


def test_registered_and_usable_in_a_causal_lm():
    from symformer.models import CausalLM, TransformerConfig

    core = ATTENTION.build("favor", head_dim=8, n_heads=2, d_model=16, n_features=32)
    assert isinstance(core, FavorAttention) and core.n_features == 32
    torch.manual_seed(0)
    model = CausalLM(
        TransformerConfig(d_model=16, n_heads=2, attention="favor", attention_kwargs={"n_features": 16}), vocab_size=11
    )
    idx = torch.randint(0, 11, (2, 13))
    loss = model.loss(idx, idx)
    loss.backward()
    assert torch.isfinite(loss)
    # causality: the output at position t does not depend on later tokens
    idx2 = idx.clone()
    idx2[:, 7:] = (idx2[:, 7:] + 1) % 11
    torch.testing.assert_close(model(idx)[:, :7], model(idx2)[:, :7])


def test_rope_rotated_inputs_estimate_rotated_softmax():
    """FAVOR+ on the output of a rotary module estimates softmax attention on the rotated q, k."""
    from symformer.positional import RoPE

    q, k, v = _qkv(b=1, h=2, n=48, d=16, scale=0.6)
    rope = RoPE(16).double()
    pos = torch.arange(48, dtype=torch.float64)[:, None]
    qr, kr = rope(q, k, pos)
    exact = naive_attention(qr, kr, v)
    f = FavorAttention(16, n_features=4096, seed=1).double()
    assert float((f(qr, kr, v) - exact).norm() / exact.norm()) < 0.1


# ------------------------------------------------------------------ performer-pytorch cross-check
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_equals_performer_pytorch(causal, dtype, tol):
    performer = pytest.importorskip("performer_pytorch")
    torch.manual_seed(0)
    fa = performer.FastAttention(32, nb_features=64, causal=causal).to(dtype)
    q, k, v = _qkv(b=2, h=2, n=300, d=32, scale=1.0, dtype=dtype)
    ours = FavorAttention(32, n_features=64, kernel_eps=1e-4, denominator_eps=1e-6 if causal else 0.0).to(dtype)
    ours.set_features(fa.projection_matrix)
    diff = float((ours(q, k, v, is_causal=causal) - fa(q, k, v)).abs().max())
    assert diff <= tol, diff


def test_espr_rotated_inputs_with_active_scale():
    """ESPR returns q~, k~ on the active space with scale 1/sqrt(d_act); FAVOR+ uses q^ = d_act^(-1/4) q~ (T7.2)."""
    from symformer.positional import ESPR

    q, k, v = _qkv(b=1, h=2, n=40, d=16, scale=0.5)
    espr = ESPR(16, 1, d_act=8, commuting_init=False).double()
    pos = torch.arange(40, dtype=torch.float64)[:, None]
    with torch.no_grad():
        qt, kt = espr(q, k, pos)
    f = FavorAttention(16, n_features=32).double()
    ref = _kernel_reference(qt, kt, v, f.features, espr.scale, False)
    torch.testing.assert_close(f(qt, kt, v, scale=espr.scale), ref, rtol=1e-12, atol=1e-13)
    exact = naive_attention(qt, kt, v, scale=espr.scale)
    big = FavorAttention(16, n_features=4096, seed=2).double()
    assert float((big(qt, kt, v, scale=espr.scale) - exact).norm() / exact.norm()) < 0.1


@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_training_one_block_form_equals_streamed_blocks(eps):
    """Under autograd (block_rows=None) FAVOR+ runs one block with [V, 1] fused; values and gradients
    must equal the streamed form (explicit blocks), with a key-padding mask, in float64."""
    from symformer.attention.favor import favor_noncausal_streamed

    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 11, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    w = torch.randn(24, 8, generator=g, dtype=torch.float64)
    keep = (torch.rand(2, 1, 11, 1, generator=g) > 0.3).double()
    a = favor_noncausal_streamed(q, k, v, w, 0.3, keep, eps)
    b = favor_noncausal_streamed(q, k, v, w, 0.3, keep, eps, block_rows=4)
    assert (a - b).abs().max() <= 1e-12
    ga = torch.autograd.grad(a.sum(), (q, k, v))
    gb = torch.autograd.grad(b.sum(), (q, k, v))
    assert max((x - y).abs().max() for x, y in zip(ga, gb)) <= 1e-12
    with torch.no_grad():
        assert (favor_noncausal_streamed(q, k, v, w, 0.3, keep, eps) - a).abs().max() <= 1e-12
    if eps:  # with eps > 0 the detached key stabiliser no longer cancels (module doc): no exact gradient to check
        return
    small = [t[:1, :1, :5].detach().clone().requires_grad_(True) for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda x, y, z: favor_noncausal_streamed(x, y, z, w, 0.3, keep[:1, :, :5], eps), small
    )


@pytest.mark.parametrize("causal,chunk", [(False, 128), (True, 128), (True, 5)])
@pytest.mark.parametrize("mask", [False, True])
def test_training_forms_values_and_gradients_equal_explicit_kernel(causal, chunk, mask):
    """Under autograd the features are softmax-stabilised (a per-query factor, and one factor per (batch, head)
    for the keys, both cancelling) and, for phi(K)^T products, stored feature-major: values and gradients
    w.r.t. q, k, v must equal those of the unstabilised explicit kernel in float64."""
    if causal and mask:
        return
    q, k, v = (t.requires_grad_() for t in _qkv(n=37))
    f = FavorAttention(8, n_features=24, chunk_size=chunk).double()
    keep = torch.rand(37, generator=torch.Generator().manual_seed(1)) > 0.3 if mask else None
    y = f(q, k, v, is_causal=causal, attn_mask=keep)
    kk, vv = (k[..., keep, :], v[..., keep, :]) if mask else (k, v)
    ref = _kernel_reference(q, kk, vv, f.features, 1 / math.sqrt(8), causal)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-13)
    gout = torch.randn_like(y)
    got = torch.autograd.grad(y, (q, k, v), gout)
    want = torch.autograd.grad(ref, (q, k, v), gout)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)
    small = [t[:1, :1, :6].detach().clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(lambda a, b, c: f(a, b, c, is_causal=causal), small)


def test_training_forms_stable_for_large_norms_and_denominator_eps():
    """Softmax-stabilised training features stay finite where unstabilised ones overflow (float32), and with
    denominator_eps (which sees the key features' scale) the max-stabilised form is kept: equal to no-grad."""
    q, k, v = _qkv(n=20, scale=1.0, dtype=torch.float32)
    f = FavorAttention(8, n_features=16)
    y = f((q * 36).requires_grad_(), (k * 3).requires_grad_(), v, is_causal=True)
    y.sum().backward()
    assert torch.isfinite(y).all()
    fe = FavorAttention(8, n_features=16, denominator_eps=1e-6).double()
    q64, k64, v64 = _qkv(n=20)
    with torch.no_grad():
        ref = fe(q64, k64, v64, is_causal=True)
    torch.testing.assert_close(fe(q64.requires_grad_(), k64, v64, is_causal=True), ref, rtol=1e-13, atol=1e-14)


def test_key_features_keep_the_max_form_in_float16():
    """The softmax key form's entries are ~1/(N m), below float16's normal range: float16 keeps the max form
    (largest feature exactly 1); float32 uses the softmax form (the block sums to 1)."""
    from symformer.attention.favor import _key_features

    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 2, 512, 16, generator=g)
    w = torch.randn(64, 16, generator=g)
    f32 = _key_features(k, w, 0.25, 0.0)
    assert torch.allclose(f32.sum(dim=(-1, -2)), torch.ones(1, 2))
    f16 = _key_features(k.half(), w.half(), 0.25, 0.0)
    assert f16.dtype == torch.float16 and torch.equal(f16.amax(dim=(-1, -2)), torch.ones(1, 2, dtype=torch.float16))
