"""The bilinear Hebbian constructions (facts.hebbian) and the authors' baseline protocols (gd-bilinear, ntk-relu1):
storing at the documented sizes, a float64 reference of their formulas, bad input, saved files."""

from __future__ import annotations

import math

import pytest
import torch

from symformer.facts import (
    BuildOptions,
    build_fact_mlp,
    count_params,
    decodability,
    fact_accuracy,
    load_fact_mlp,
    make_fact_set,
    method_capacity,
    save_fact_mlp,
)
from symformer.facts import hebbian as hb

# the smallest width storing every fact of make_fact_set(64, 16, seed=s), s = 0, 1, that method_capacity finds
# (docs/systems/facts.md's table of methods); plain "hebbian" stores 16 facts at d = 16 from h = 51 on
DOCUMENTED = {"hebbian-whitened": (64, 53), "hebbian-dd": (64, 24), "hebbian-als": (64, 23), "hebbian": (16, 51)}


@pytest.mark.parametrize("method", sorted(DOCUMENTED))
def test_each_variant_stores_every_fact_at_its_documented_width(method):
    F, h = DOCUMENTED[method]
    sets = [make_fact_set(F, 16, seed=s) for s in range(2)]
    if method == "hebbian-whitened":  # the search itself (cheap here); the others' widths come from the same search
        res = method_capacity(method, sets, 1, 8, 4096)
        assert (res.size, res.params) == (h, 3 * h * 16)
    for s, fs in enumerate(sets):
        mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, method, h=h, seed=s)
        assert mlp.accuracy == 1.0 and count_params(mlp) == hb.official_param_count(method, 16, h) == 3 * h * 16
    below = [
        build_fact_mlp(fs.keys, fs.values, fs.facts, method, h=h - 1, seed=s, strict=False) for s, fs in enumerate(sets)
    ]
    assert min(m.accuracy for m in below) < 1.0  # negative control: one unit less does not store every fact


def _reference(keys, values, facts, h, variant, ridge, rounds, seed):
    """Float64 formulas written out densely: features, readouts, and the feature fit as an explicit least squares
    of the n x n logit matrix against the identity over all h d entries of the factor."""
    K, V = keys.double(), values.double()[facts]
    n, d = K.shape
    A0, A1 = hb.random_factors(h, d, seed)

    def readout_ridge(Phi):
        if h > n:
            return V.T @ torch.linalg.inv(Phi @ Phi.T + ridge * torch.eye(n, dtype=torch.float64)) @ Phi
        return V.T @ Phi / n @ torch.linalg.inv(Phi.T @ Phi / n + ridge * torch.eye(h, dtype=torch.float64))

    def fit(P, W):  # P (h, n) partner projections; logits L_ij = sum_{t,a} (V W)_it P_tj X_ta K_ja
        J = torch.einsum("it,tj,ja->ijta", V @ W, P, K).reshape(n * n, h * d)
        eye = torch.eye(h * d, dtype=torch.float64)
        x = torch.linalg.solve(J.T @ J + ridge * eye, J.T @ torch.eye(n, dtype=torch.float64).flatten())
        return x.reshape(h, d)

    scale = 1 / math.sqrt(h)
    if variant in ("hebbian-dd", "hebbian-als"):
        W0 = V.T @ ((K @ A0.T) * (K @ A1.T)) / n
        for _ in range(rounds if variant == "hebbian-als" else 1):
            A1 = fit(A0 @ K.T, W0)
            A0 = fit(A1 @ K.T, W0)
        scale = 1.0
    Phi = (K @ A0.T) * (K @ A1.T) * scale
    if variant == "hebbian-als":  # the margin-optimal directions as readout targets
        V = decodability(values).U.double()[facts]
    W = V.T @ Phi / n if variant == "hebbian" else readout_ridge(Phi)
    return lambda x: ((x @ A0.T) * (x @ A1.T) * scale) @ W.T


@pytest.mark.parametrize("variant", hb.VARIANTS)
@pytest.mark.parametrize("F,h", [(24, 6), (8, 12)])  # both forms of the ridge readout: h <= n (primal), h > n (dual)
def test_variants_equal_a_float64_reference_of_the_formulas(variant, F, h):
    fs = make_fact_set(F, 4, seed=3)
    ridge = 1e-3  # a ridge that keeps the dense reference well conditioned
    mlp = hb.hebbian_mlp(fs.keys, fs.values, fs.facts, h, variant, ridge=ridge, rounds=2, seed=5, tol=1e-15)
    ref = _reference(fs.keys, fs.values, fs.facts, h, variant, ridge, 2, seed=5)
    x = torch.randn(7, 4, dtype=torch.float64)
    out, want = mlp(x), ref(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, want, rtol=1e-8, atol=1e-10 * float(want.abs().max()))


def test_more_rounds_never_raise_the_fit_objective_and_fit_projection_solves_its_normal_equations():
    fs = make_fact_set(48, 8, seed=1)
    K, V = fs.keys, fs.values[fs.facts]
    A0, A1 = hb.random_factors(16, 8, 0)
    W0 = hb.raw_readout(V, hb.bilinear_features(K, A0, A1))
    X = hb.fit_projection(A0 @ K.T, K, V, W0, 1e-6)

    def objective(A1_):
        L = V @ W0 @ hb.bilinear_features(K, A0, A1_).T
        return 0.5 * float((L - torch.eye(48, dtype=torch.float64)).square().sum()) + 0.5e-6 * float(A1_.square().sum())

    assert objective(X) < objective(A1)
    for _ in range(3):  # negative control: a perturbed solution is worse
        assert objective(X) < objective(X + 1e-3 * torch.randn_like(X))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"h": 0}, "h"),
        ({"h": 8, "variant": "hebb"}, "variant"),
        ({"h": 8, "ridge": -1.0}, "ridge"),
        ({"h": 8, "rounds": 0}, "rounds"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, name):
    fs = make_fact_set(16, 8, seed=0)
    with pytest.raises(ValueError, match=rf"^{name}: got"):
        hb.hebbian_mlp(fs.keys, fs.values, fs.facts, **kwargs)


@pytest.mark.parametrize("method", [*hb.VARIANTS, "ntk-relu1", "gd-bilinear"])
def test_methods_refuse_impossible_facts_too_narrow_widths_and_unreachable_kappa(method):
    fs = make_fact_set(16, 8, seed=0)
    keys = fs.keys.clone()
    keys[1] = keys[0]  # one key, two values: no MLP stores it
    facts = fs.facts.clone()
    facts[1] = (facts[0] + 1) % 16
    with pytest.raises(ValueError, match="^facts: got|^keys: got"):
        build_fact_mlp(keys, fs.values, facts, method, h=8)
    with pytest.raises(ValueError, match="^h: got"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, method, h=0)
    with pytest.raises(ValueError, match="^h: got None"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, method)
    with pytest.raises(ValueError, match="^kappa: got"):
        make_fact_set(16, 8, kappa=0.5, seed=0)


@pytest.mark.parametrize("method", [*hb.VARIANTS, "ntk-relu1", "gd-bilinear"])
def test_saved_mlps_of_the_new_methods_load_without_pickle(tmp_path, method):
    fs = make_fact_set(16, 8, seed=0)
    opts = BuildOptions(official_gd_epochs=20)
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, method, h=24, strict=False, options=opts)
    path = tmp_path / "f.pt"
    save_fact_mlp(path, mlp)
    saved = load_fact_mlp(path)  # torch.load(weights_only=True) inside
    assert (saved.method, saved.h, saved.params) == (method, 24, count_params(mlp))
    torch.testing.assert_close(saved.mlp(fs.keys), mlp(fs.keys), rtol=0, atol=0)
    assert fact_accuracy(saved.mlp, fs.keys, fs.values, fs.facts) == mlp.accuracy


def test_their_baseline_protocols_differ_from_ours_where_they_say():
    fs = make_fact_set(16, 8, seed=0)
    gd = build_fact_mlp(
        fs.keys, fs.values, fs.facts, "gd-bilinear", h=4, strict=False, options=BuildOptions(official_gd_epochs=30)
    )
    assert gd.activation == "linear" and gd.gated and gd.up.bias is None and gd.down.bias is None
    assert count_params(gd) == hb.official_param_count("gd-bilinear", 8, 4) == 3 * 4 * 8
    ntk = build_fact_mlp(fs.keys, fs.values, fs.facts, "ntk-relu1", h=32, strict=False)
    ours = build_fact_mlp(fs.keys, fs.values, fs.facts, "ntk", h=32, strict=False)
    assert ntk.activation == "relu" and ours.activation == "silu"
    assert hb.official_param_count("ntk-relu1", 8, 32) == count_params(ntk) + 2 * 32 + 8  # their zero biases count
    # degree 1: W_up = (1/h) sum_i (z_i * (v_f(i) P)) k_i^T with z = K W_gate^T (Hermite He_1 = z)
    K, Y = fs.keys, fs.values[fs.facts]
    W_up = ((K @ ntk.gate.weight.T) * (Y @ ntk.down.weight)).T @ K / 32
    torch.testing.assert_close(ntk.up.weight, W_up)
    assert hb.official_param_count("bin+jl", 8, 4) is None
