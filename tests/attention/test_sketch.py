"""CountSketch / TensorSketch: FFT form vs explicit tensor form, Prop. C.4 statistically, hash independence."""

import itertools
import math

import pytest
import torch

from symformer.attention.sketch import (
    IRREDUCIBLE,
    CountSketch,
    TensorSketch,
    bucket_hashes,
    convolution_power,
    poly_mod_p,
    sign_from_coefficients,
    sign_hashes,
    tensor_sketch,
    tensor_sketch_dense,
)


def _unit(g, d):
    x = torch.randn(d, generator=g, dtype=torch.float64)
    return x / x.norm()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_fft_form_equals_explicit_tensor_form(k):
    ts = TensorSketch(5, 7, k, seed=k)
    x = torch.randn(3, 5, dtype=torch.float64)
    assert torch.allclose(ts(x), ts.explicit(x), atol=1e-13, rtol=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_dense_gemm_form_equals_scatter_fft_form(k):
    """PLASH's GEMM CountSketches (tensor_sketch_dense) give the same TS_k as index_add + FFT, with gradients."""
    g = torch.Generator().manual_seed(k)
    h, s = bucket_hashes(k, 6, 8, g), sign_hashes(k, 6, g).double()
    x = torch.randn(4, 3, 6, generator=g, dtype=torch.float64, requires_grad=True)
    a, b = tensor_sketch_dense(x, h, s, 8), tensor_sketch(x, h, s, 8)
    assert (a - b).abs().max() <= 1e-13
    w = torch.randn_like(a)
    (ga,), (gb,) = torch.autograd.grad(a, x, w), torch.autograd.grad(b, x, w)
    assert (ga - gb).abs().max() <= 1e-13
    assert torch.autograd.gradcheck(lambda t: tensor_sketch_dense(t, h, s, 8), (x,))


def test_count_sketch_matrix_and_state_dict():
    cs = CountSketch(9, 4, seed=1)
    x = torch.randn(2, 9, dtype=torch.float64)
    assert torch.allclose(cs(x), x @ cs.matrix().t(), atol=1e-14)
    other = CountSketch(9, 4, seed=2)
    other.load_state_dict(cs.state_dict())
    assert torch.equal(other(x), cs(x))


def test_convolution_power_is_repeated_circular_convolution():
    g = torch.randn(5, dtype=torch.float64)
    pad = torch.nn.functional.pad(g, (0, 3))
    ref = torch.zeros(8, dtype=torch.float64)
    for i, j in itertools.product(range(8), range(8)):
        ref[(i + j) % 8] += pad[i] * pad[j]
    assert torch.allclose(convolution_power(g, 2, 8), ref, atol=1e-13)


def _estimates(x, y, k, draws, d, D, g):
    h = bucket_hashes(k * draws, d, D, g).view(k, draws, d)
    s = sign_hashes(k * draws, d, g).double().view(k, draws, d)
    return (tensor_sketch(x, h, s, D) * tensor_sketch(y, h, s, D)).sum(-1)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_unbiased_inner_product(k):
    # eq. (47). Two-sided |z| < 4.5: false-alarm rate ~7e-6 for a correct estimator (fixed seed).
    g = torch.Generator().manual_seed(10 + k)
    d, D, draws = 12, 16, 6000
    x = _unit(g, d)
    y = x + 0.6 * _unit(g, d)
    y = y / y.norm()
    est = _estimates(x, y, k, draws, d, D, g)
    z = (est.mean() - float(x @ y) ** k) / (est.std() / math.sqrt(draws))
    assert abs(float(z)) < 4.5


def _var_upper(est):
    """Variance estimate plus 4 standard errors (one-sided false-alarm ~3e-5)."""
    c = est - est.mean()
    se = (c**2).std() / math.sqrt(len(est))
    return float(est.var()), float(est.var() - 4 * se), float(est.var() + 4 * se)


def test_prop_c4_variance_bound_k1():
    g = torch.Generator().manual_seed(3)
    d, D = 12, 16
    for x, y in ((_unit(g, d), _unit(g, d)), (torch.full((d,), d**-0.5, dtype=torch.float64),) * 2):
        est = _estimates(x, y, 1, 8000, d, D, g)
        _, lo, _ = _var_upper(est)
        assert lo <= (float(x @ y) ** 2 + 1.0) / D  # eq. (48), k = 1


@pytest.mark.parametrize("k", [2, 3])
def test_prop_c4_variance_bound_fails_for_higher_degree(k):
    # The proof of Prop. C.4 drops index patterns of the tensor lift; at x = y = uniform the variance exceeds
    # (<x,y>^{2k} + 1) / D = 2 / D significantly, while the AMM bound (2 + 3^k) / D (Avron et al. 2014) holds.
    g = torch.Generator().manual_seed(20 + k)
    d, D = 16, 16
    u = torch.full((d,), d**-0.5, dtype=torch.float64)
    est = _estimates(u, u, k, 8000, d, D, g)
    _, lo, hi = _var_upper(est)
    assert lo > 2.0 / D
    assert lo <= (2 + 3**k) / D


def test_bucket_hash_three_wise_independent_small_field():
    # Exhaustive over F_7^3 with D = p = 7 (no rejection): every value triple at distinct points appears once.
    p = 7
    coef = torch.tensor(list(itertools.product(range(p), repeat=3)), dtype=torch.int64)
    vals = poly_mod_p(coef, torch.arange(p), p)
    for pts in itertools.combinations(range(p), 3):
        keys = vals[:, list(pts)] @ torch.tensor([p * p, p, 1])
        assert torch.equal(torch.bincount(keys, minlength=p**3), torch.ones(p**3, dtype=torch.int64))


def test_bucket_hash_rejection_range_and_uniformity():
    g = torch.Generator().manual_seed(0)
    h = bucket_hashes(4000, 6, 5, g, prime=11)  # D < p: rejection of the whole polynomial
    assert int(h.min()) >= 0 and int(h.max()) < 5
    counts = torch.bincount(h[:, 0], minlength=5).double()
    chi2 = float(((counts - 800) ** 2 / 800).sum())
    assert chi2 < 23.5  # chi^2_4 upper 1e-4 quantile


def test_sign_hash_four_wise_independent_small_field():
    # Exhaustive over GF(8)^4: at any 4 distinct points every sign pattern appears 8^4 / 16 times.
    w = 3
    coef = torch.tensor(list(itertools.product(range(8), repeat=4)), dtype=torch.int64)
    s = sign_from_coefficients(coef, torch.arange(8), w)
    for pts in itertools.combinations(range(8), 4):
        keys = ((1 - s[:, list(pts)]) // 2) @ torch.tensor([8, 4, 2, 1])
        assert torch.equal(torch.bincount(keys, minlength=16), torch.full((16,), 256, dtype=torch.int64))


def _gf2_mod(a: int, b: int) -> int:
    while a.bit_length() >= b.bit_length():
        a ^= b << (a.bit_length() - b.bit_length())
    return a


@pytest.mark.parametrize("w", sorted(IRREDUCIBLE))
def test_field_polynomials_irreducible(w):
    poly = IRREDUCIBLE[w]
    assert poly.bit_length() == w + 1
    for div in range(2, 2 ** (w // 2 + 1)):
        if div.bit_length() - 1 <= w // 2:
            assert _gf2_mod(poly, div) != 0


def test_bad_input():
    with pytest.raises(ValueError, match="out_dim"):
        CountSketch(4, 0)
    with pytest.raises(ValueError, match="in_dim"):
        TensorSketch(0, 4, 2)
    with pytest.raises(ValueError, match="degree"):
        TensorSketch(4, 4, 0)
    with pytest.raises(ValueError, match="x"):
        CountSketch(4, 3)(torch.randn(2, 5))
    with pytest.raises(TypeError, match="x"):
        CountSketch(4, 3)([1.0, 2.0])
    with pytest.raises(ValueError, match="x"):
        CountSketch(4, 3)(torch.tensor([1.0, float("nan"), 0.0, 0.0]))
    with pytest.raises(ValueError, match="prime"):
        bucket_hashes(1, 4, 3, torch.Generator(), prime=12)
