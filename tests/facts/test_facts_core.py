"""Embeddings, whitening fold-back, the MLP module, decodability (vs cvxpy) and the constructions."""

from __future__ import annotations

import pytest
import torch

from symformer.facts import (
    build_fact_mlp,
    decodability,
    fact_accuracy,
    fact_margin,
    fold_whitening,
    make_fact_set,
    random_fact_map,
    sample_embeddings,
    set_condition_number,
    validate_fact_set,
    whitening_matrix,
)
from symformer.facts.capacity import (
    BuildOptions,
    FactStorageError,
    capacity_search,
    method_capacity,
)
from symformer.facts.decoders import decodes, gd_decoder, jl_decoder
from symformer.facts.embeddings import condition_number, fact_pairs_to_map
from symformer.facts.encoders import (
    central_difference_encoder,
    gated_encoder,
    relu_lagrangian_encoder,
    solve_gadgets,
    two_hot_encoder,
    two_hot_gated_encoder,
    two_hot_keys,
)
from symformer.facts.mlp import FactMLP, count_params


@pytest.fixture(scope="module")
def small():
    fs = make_fact_set(64, 16, seed=0)
    return fs, decodability(fs.values)


# ---- embeddings -----------------------------------------------------------------------------------
def test_fact_maps():
    f = random_fact_map(50, seed=1)
    assert torch.equal(torch.sort(f).values, torch.arange(50))
    g = random_fact_map(50, 7, bijective=False, seed=1)
    assert g.shape == (50,) and int(g.max()) < 7
    with pytest.raises(ValueError, match="n_values"):
        random_fact_map(5, 4, bijective=True)


def test_embeddings_sphere_and_kappa():
    x = sample_embeddings(100, 8, seed=0)
    assert torch.allclose(x.norm(dim=1), torch.ones(100, dtype=torch.float64), atol=1e-14)
    y = set_condition_number(x, 50.0)
    assert abs(condition_number(y) - 50.0) < 1e-9
    sx, sy = torch.linalg.svd(x, full_matrices=False), torch.linalg.svd(y, full_matrices=False)
    assert abs(float(sx.S[0] - sy.S[0])) < 1e-12  # largest singular value preserved
    assert torch.allclose(sx.Vh.abs(), sy.Vh.abs(), atol=1e-10)  # singular vectors kept
    with pytest.raises(ValueError, match="kappa"):
        sample_embeddings(10, 3, kappa=0.5)
    with pytest.raises(ValueError, match="kind"):
        sample_embeddings(10, 3, kind="cube")


def test_whitening_partial_and_fold_back():
    torch.manual_seed(0)
    x = set_condition_number(sample_embeddings(200, 6, seed=2), 30.0)
    W1 = whitening_matrix(x, 1.0, ridge=0.0)
    xw = x @ W1
    assert torch.allclose(xw.T @ xw / 200, torch.eye(6, dtype=torch.float64), atol=1e-10)
    Wh = whitening_matrix(x, 0.5, ridge=0.0)
    assert torch.allclose(Wh @ Wh, W1, atol=1e-10)  # W_alpha = W_zca^alpha
    assert torch.allclose(whitening_matrix(x, 0.0), torch.eye(6, dtype=torch.float64), atol=1e-14)
    # an MLP built on whitened embeddings, folded back, gives the same scores on raw embeddings
    K, V = x[:40], x[40:80]
    Tk, Tv = whitening_matrix(K, 0.7), whitening_matrix(V, 0.7)
    mlp = FactMLP(6, 10, bias=True, out_bias=True)
    with torch.no_grad():
        for p in mlp.parameters():
            p.normal_()
    scores_white = mlp(K @ Tk) @ (V @ Tv).T
    fold_whitening(mlp, Tk, Tv)
    assert torch.allclose(mlp(K) @ V.T, scores_white, atol=1e-10, rtol=1e-10)


def test_whitening_paper_text_fold_is_wrong():
    """App. A.1.3 says the inverse W_alpha^{-1} is folded into the down-projection; that breaks the scores."""
    x = set_condition_number(sample_embeddings(60, 5, seed=3), 20.0)
    T = whitening_matrix(x, 1.0)
    mlp = FactMLP(5, 8)
    with torch.no_grad():
        for p in mlp.parameters():
            p.normal_()
    white = mlp(x @ T) @ (x @ T).T
    mlp.down.left_multiply(torch.linalg.inv(T))
    with torch.no_grad():
        mlp.gate.weight.copy_(mlp.gate.weight @ T.T)
        mlp.up.weight.copy_(mlp.up.weight @ T.T)
    assert not torch.allclose(mlp(x) @ x.T, white, atol=1e-3)


def test_validate_fact_set_errors():
    K = torch.randn(4, 3, dtype=torch.float64)
    V = torch.randn(5, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="facts"):
        validate_fact_set(K, V, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="values"):
        validate_fact_set(K, torch.randn(5, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="facts"):
        validate_fact_set(K, V, torch.tensor([0, 1, 2, 9]))
    Kd = torch.cat([K[:3], K[:1]])
    with pytest.raises(ValueError, match="duplicating"):
        validate_fact_set(Kd, V, torch.tensor([0, 1, 2, 3]))
    validate_fact_set(Kd, V, torch.tensor([0, 1, 2, 0]))  # duplicate key, same target: fine
    with pytest.raises(TypeError, match="facts"):
        validate_fact_set(K, V, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="two values"):
        fact_pairs_to_map([(0, 1), (1, 2), (0, 3)], 2)


# ---- decodability ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d,kappa", [(25, 3, 1.0), (40, 6, 10.0), (30, 4, 1.0)])
def test_rho_matches_cvxpy(n, d, kappa):
    pytest.importorskip("cvxpy")
    from symformer.facts.decodability import rho_reference_cvxpy

    V = sample_embeddings(n, d, kind="gaussian" if kappa == 1.0 and d == 4 else "sphere", kappa=kappa, seed=n)
    info = decodability(V)
    ref = rho_reference_cvxpy(V)
    ok = ref > 0
    assert torch.equal(ok, info.rho_i > 0)
    assert float(((info.rho_i[ok] - ref[ok]).abs() / ref[ok]).max()) <= 1e-5
    assert abs(info.rho - float(info.rho_i.min())) == 0.0


def test_rho_certificate_and_direction(small):
    fs, info = small
    V = fs.values
    for i in (0, 17, 63):
        X = V[i] - torch.cat([V[:i], V[i + 1 :]])
        X = X / X.norm(dim=1, keepdim=True)
        assert abs(float((X @ info.U[i]).min()) - float(info.rho_i[i])) < 1e-12
        assert abs(float(info.U[i].norm()) - 1) < 1e-12
        # no random unit direction does better than the optimum
        dirs = torch.randn(2000, V.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(i))
        dirs = dirs / dirs.norm(dim=1, keepdim=True)
        assert float((X @ dirs.T).min(0).values.max()) <= float(info.rho_i[i]) + 1e-12


def test_rho_reports_non_vertices():
    V = sample_embeddings(20, 3, seed=4)
    V = torch.cat([V, 0.2 * V[:3].mean(0, keepdim=True), V[:2].mean(0, keepdim=True)])  # interior, on an edge
    info = decodability(V)
    assert info.not_vertices == [20, 21] and info.rho == 0.0
    assert float(info.rho_i[:20].min()) > 0 and info.max_gap <= 1e-8
    K = sample_embeddings(22, 3, seed=9)
    with pytest.raises(ValueError, match=r"values \[20, 21\] that are not vertices"):
        build_fact_mlp(K, V, torch.arange(22), "bin+jl", m=8)


def test_rho_pinned_high_anisotropy():
    """Issue #11: the old solver dropped the support from its working set, cycled, and gave anchor 235 -0.51."""
    fs = make_fact_set(256, 32, kappa=1000.0, seed=7)
    info = decodability(fs.values)
    assert info.not_vertices == [] and info.max_gap <= 1e-8
    # reference value from cvxpy (CLARABEL, default tolerances) for this anchor: 0.21330...
    assert abs(float(info.rho_i[235]) - 0.2133) < 5e-5
    X = fs.values[235] - torch.cat([fs.values[:235], fs.values[236:]])
    X = X / X.norm(dim=1, keepdim=True)
    assert abs(float((X @ info.U[235].double()).min()) - float(info.rho_i[235])) < 1e-12


def test_rho_bad_input():
    with pytest.raises(TypeError, match="values"):
        decodability([[1.0, 2.0]])
    with pytest.raises(ValueError, match="values"):
        decodability(torch.ones(1, 3))
    with pytest.raises(ValueError, match="values"):
        decodability(torch.ones(3))
    V = sample_embeddings(8, 3, seed=0)
    for bad, what in [(float("nan"), r"NaN or inf in row\(s\) \[2\]"), (float("inf"), r"NaN or inf in row\(s\) \[2\]")]:
        W = V.clone()
        W[2, 1] = bad
        with pytest.raises(ValueError, match=what):
            decodability(W)
    W = V.clone()
    W[4] = 0.0
    with pytest.raises(ValueError, match=r"all-zero row\(s\) \[4\]"):
        decodability(W)
    W = torch.cat([V, V[1:2], V[5:6], V[1:2]])
    with pytest.raises(ValueError, match=r"duplicated rows \[\[1, 8, 10\], \[5, 9\]\]"):
        decodability(W)


def test_rho_not_converged_names_anchors(monkeypatch):
    import importlib

    mod = importlib.import_module("symformer.facts.decodability")
    monkeypatch.setattr(mod, "GAP_TOL", -1.0)  # nothing can be certified: the error must name the anchors
    with pytest.raises(mod.DecodabilityNotConverged, match=r"anchor\(s\) 0 \(gap"):
        decodability(sample_embeddings(6, 3, seed=1))


# ---- encoders -------------------------------------------------------------------------------------
def _codes(fs, info, m=24, seed=0):
    dec = jl_decoder(fs.values, m, seed=seed, info=info)
    return dec, dec.C[fs.facts]


@pytest.mark.parametrize("bias", [False, True])
def test_gadget_exact_codes_shared_G(small, bias):
    fs, info = small
    dec, codes = _codes(fs, info)
    enc = gated_encoder(fs.keys, codes, bias=bias)
    out = enc.down.codes(enc.hidden(fs.keys))
    assert float((out - codes).abs().max().detach()) < 1e-8
    # one G shared by all m code blocks
    ht = enc.h // codes.shape[1]
    G = enc.gate.weight.view(codes.shape[1], ht, -1)
    assert torch.equal(G, G[:1].expand_as(G))


def test_gadget_requirements():
    fs = make_fact_set(64, 16, seed=1)
    codes = torch.randn(64, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="h_tilde"):
        solve_gadgets(fs.keys, codes, 3)  # 16 * 3 < 64
    Kr = fs.keys.clone()
    Kr[:, -1] = 0.0  # rank-deficient keys
    with pytest.raises(ValueError, match="general position"):
        solve_gadgets(Kr, codes, 4)
    with pytest.raises(ValueError, match="targets"):
        solve_gadgets(fs.keys, codes[:10], 4)


def test_central_difference_and_lagrangian(small):
    fs, info = small
    dec, codes = _codes(fs, info)
    cd = central_difference_encoder(fs.keys, codes)
    with torch.no_grad():
        cd_codes = cd.down.codes(cd.hidden(fs.keys))
    assert not cd.gated and float((cd_codes - codes).abs().max()) < 1e-6 * float(codes.abs().max())
    # E = [1/(2 eps), -1/(2 eps)] (the printed eps^{-1/2} is a typo)
    ht = cd.h // (2 * codes.shape[1])
    assert torch.allclose(
        cd.down.e.view(codes.shape[1], 2, ht)[:, 0], torch.full((1,), 0.5 / cd.eps, dtype=torch.float64)
    )
    lg = relu_lagrangian_encoder(fs.keys, codes)
    assert lg.activation == "relu" and not lg.gated
    with torch.no_grad():
        lg_codes = lg.down.codes(lg.hidden(fs.keys))
    assert float((lg_codes - codes).abs().max()) < 1e-8


@pytest.mark.parametrize("gated", [True, False])
def test_two_hot_encoders_exact(gated):
    K = two_hot_keys(6)
    c = torch.rand(K.shape[0], 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3 - 1
    enc = (two_hot_gated_encoder if gated else two_hot_encoder)(K, c)
    with torch.no_grad():
        out = enc.down.codes(enc.hidden(K))
    assert float((out - c).abs().max()) < 1e-13
    assert enc.h == 4 * 6
    with pytest.raises(ValueError, match="two-hot"):
        two_hot_encoder(K + 0.1, c)


# ---- decoders and full constructions ---------------------------------------------------------------
def test_jl_decoder_sign_and_gd(small):
    fs, info = small
    assert decodes(jl_decoder(fs.values, 96, seed=1, info=info), fs.values) == 1.0
    s = jl_decoder(fs.values, 96, kind="sign", seed=1, info=info)
    assert set(torch.unique(s.D * 96**0.5).round().tolist()) <= {-1.0, 1.0}
    assert decodes(gd_decoder(fs.values, 8, steps=300), fs.values) == 1.0


@pytest.mark.parametrize(
    "method,kw",
    [
        ("bin+jl", {"m": 96}),
        ("bin-bias+jl", {"m": 96}),
        ("bin+jl-sign", {"m": 96}),
        ("cd+jl", {"m": 96}),
        ("lagrangian+jl", {"m": 96}),
        ("bin+gd", {"m": 8}),
        ("naive", {}),
        ("ntk-mo", {"h": 16384}),
    ],
)
def test_constructions_store_all(small, method, kw):
    fs, info = small
    opts = BuildOptions(decoder_steps=300)
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, method, info=info, options=opts, **kw)
    assert mlp.accuracy == 1.0 and fact_margin(mlp, fs.keys, fs.values, fs.facts) > 0
    assert mlp.n_params() == count_params(mlp) > 0


def test_construction_whitened_anisotropic():
    fs = make_fact_set(64, 16, kappa=30.0, seed=5)
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=96, options=BuildOptions(whiten=1.0))
    assert fact_accuracy(mlp, fs.keys, fs.values, fs.facts) == 1.0


def test_construction_refuses_to_fail_silently(small):
    fs, info = small
    with pytest.raises(FactStorageError, match="stores"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=1, info=info)
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=1, info=info, strict=False)
    assert mlp.accuracy < 1.0


def test_build_bad_input(small):
    fs, info = small
    with pytest.raises(ValueError, match="method"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, "bogus", m=4)
    with pytest.raises(ValueError, match="max_m: got 0"):  # m=None searches m <= max_m (test_fact_mlp_api.py)
        build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", max_m=0)
    with pytest.raises(ValueError, match="h"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, "ntk")
    with pytest.raises(ValueError, match="width"):
        build_fact_mlp(fs.keys, fs.values[:, :8], fs.facts, "bin+jl", m=4)


# ---- capacity -------------------------------------------------------------------------------------
def test_capacity_search_finds_threshold():
    calls = []

    def evaluate(size, seed):
        calls.append((size, seed))
        return (1.0 if size >= 37 or (seed == 0 and size >= 20) else 0.5), 10 * size

    size, seen = capacity_search(evaluate, 2, 1, 8)
    assert size == 37 and seen[37] == (1.0, 370) and seen[36][0] == 0.5


def test_method_capacity_bits(small):
    fs, info = small
    r = method_capacity("bin+jl", [fs], 2, 64, infos=[info])
    assert r.size is not None and r.params > 0
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=r.size, info=info)
    assert mlp.accuracy == 1.0
    with pytest.raises(FactStorageError):
        build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=r.size - 1, info=info)
    assert abs(r.bits_per_param - 64 * 6 / r.params) < 1e-12


@pytest.mark.parametrize("method,h", [("gd-swiglu", 24), ("gd-relu", 48)])
def test_gd_trained_mlps_store(method, h):
    fs = make_fact_set(32, 8, seed=3)
    opts = BuildOptions(train_epochs=3000, train_lr=1e-2)
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, method, h=h, options=opts)
    assert mlp.accuracy == 1.0 and mlp.gated == (method == "gd-swiglu")


def test_ntk_blocks_and_evaluation_batches_change_nothing(small, monkeypatch):
    """ntk_mlp sums W_up over row blocks of Hermite features and fact_accuracy caps its batches by the hidden
    width (memory at F = 4096, h = 131,072): same weights as the one-shot formula of Alg. 5 to float64
    rounding, same accuracy."""
    from symformer.facts import baselines
    from symformer.facts import mlp as mlp_mod

    fs, _ = small
    ref = baselines.ntk_mlp(fs.keys, fs.values, fs.facts, 512, seed=3)  # one block: NTK_BLOCK // 512 >= 64 rows
    K, Y = fs.keys.double(), fs.values.double()[fs.facts]
    W_gate, P = ref.gate.weight.double(), ref.down.weight.double()
    one_shot = (baselines.hermite(K @ W_gate.T, 2) * (Y @ P)).T @ K / 512
    torch.testing.assert_close(ref.up.weight.double(), one_shot, rtol=1e-12, atol=1e-15)
    monkeypatch.setattr(baselines, "NTK_BLOCK", 512 * 5)  # 5 rows per block, the last one short
    blocked = baselines.ntk_mlp(fs.keys, fs.values, fs.facts, 512, seed=3)
    torch.testing.assert_close(blocked.up.weight, ref.up.weight, rtol=1e-12, atol=1e-15)
    acc = fact_accuracy(ref, fs.keys, fs.values, fs.facts)
    monkeypatch.setattr(mlp_mod, "MAX_ACTIVATIONS", 512 * 3)  # batches of 3 keys
    assert fact_accuracy(ref, fs.keys, fs.values, fs.facts) == acc and 0 < acc < 1
