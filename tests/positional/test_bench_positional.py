"""The `positional` benchmark suite: registration, fixed ratio names, ratio arithmetic (no timing asserts)."""

from __future__ import annotations

import pytest
import torch

from symformer.benchmarks.base import BenchResult, load_all
from symformer.benchmarks.positional import _ratios, _rotators


def test_registered():
    assert "positional" in load_all()


def test_ratio_names_and_values():
    cells = {
        ("rot", "rope", "S1", "fwd"): 1.0,
        ("rot", "rotary_embedding_torch", "S1", "fwd"): 4.0,
        ("rot", "rope", "S2", "fwd+bwd"): 3.0,
        ("rot", "rotary_embedding_torch", "S2", "fwd+bwd"): 6.0,
        ("layer", "rope", "S1", "train fwd+bwd"): 2.0,
        ("layer", "espr", "S1", "train fwd+bwd"): 2.5,
        ("layer", "rope", "S1", "infer fwd"): 1.0,
        ("layer", "string_folded", "S1", "infer fwd"): 1.02,
    }
    res = BenchResult()
    _ratios(res, cells)
    assert res.ratios["rope_vs_rotary_embedding_torch"] == pytest.approx(0.5)  # worst cell
    assert res.ratios["rope_vs_rotary_embedding_torch[S1,fwd]"] == pytest.approx(0.25)
    assert res.ratios["espr_layer_vs_rope_layer"] == pytest.approx(1.25)
    assert res.ratios["string_folded_layer_vs_rope_layer"] == pytest.approx(1.02)


def test_rotators_agree_on_logits():
    # every timed rotation computes the same kind of thing: RoPE and rotary-embedding-torch give equal outputs
    torch.manual_seed(0)
    rots = _rotators(8, "cpu")
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    pos = torch.arange(5.0)[:, None]
    ours = rots["rope"](q, k, pos)
    if "rotary_embedding_torch" in rots:
        theirs = rots["rotary_embedding_torch"](q, k, pos)
        assert (ours[0] - theirs[0]).abs().max() <= 1e-5
    for name in ("string_unfolded", "string_folded", "espr_cached_exp", "rope_half"):
        a, b = rots[name](q, k, pos)
        assert a.shape == q.shape and b.shape == k.shape


def test_half_pairing_and_espr2d_ratio_names():
    from symformer.benchmarks.positional import HEADLINE

    cells = {
        ("rot", "rope", HEADLINE, "fwd"): 1.0,
        ("rot", "rope_half", HEADLINE, "fwd"): 1.2,
        ("rot", "rotary_embedding_torch", HEADLINE, "fwd"): 6.0,
        ("rot", "rope", "S2", "fwd"): 1.0,
        ("rot", "rope_half", "S2", "fwd"): 3.0,  # not the cell
        ("layer", "rope_grid2d", "S1", "train fwd+bwd"): 2.0,
        ("layer", "espr_grid2d", "S1", "train fwd+bwd"): 3.0,
    }
    res = BenchResult()
    _ratios(res, cells)
    assert res.ratios["rope_half_vs_interleaved"] == pytest.approx(1.2)
    assert res.ratios["rope_half_vs_interleaved[S2,fwd]"] == pytest.approx(3.0)
    assert res.ratios["rope_half_vs_rotary_embedding_torch"] == pytest.approx(0.2)
    assert res.ratios["espr2d_train_vs_rope_layer"] == pytest.approx(1.5)


def test_interleaved_ratio_is_a_positive_number():
    from symformer.benchmarks.positional import interleaved_ratio

    x = torch.randn(64, 64)
    r = interleaved_ratio(lambda: x @ x, lambda: x + x, 3)
    assert r > 0 and r == r


def test_vision_rows_exactness_and_ratio_names():
    """The 2-D rows' float64 exactness is the tests' (<= 1e-12), and the parts they time rotate the same logits
    as their matrices (a fast check, no timing)."""
    from symformer.benchmarks.positional_vision import _parts, exactness_f64

    errs = exactness_f64()
    assert set(errs) == {"rope_mixed_vs_reference_f64", "axial_timm_layout_vs_reference_f64"}
    assert all(v <= 1e-12 for v in errs.values())
    parts = _parts(2, 8)
    assert set(parts) == {"rope_mixed_2d", "rope_axial_timm_2d", "string_2d", "espr_2d"}
    assert parts["rope_mixed_2d"].beta.shape == (2, 4, 2)


def test_timm_references_rotate_as_our_parts():
    """The timm-equivalent reference rows compute our mixed and axial rotations (float32 rounding), and the
    mixed reference's frequency gradient is ours: the ratios compare equal work. Negative control: another head's
    frequencies give another rotation."""
    from symformer.benchmarks.positional_vision import _parts, _references
    from symformer.positional import grid_positions

    parts = _parts(2, 8)
    pos = grid_positions(5)
    refs = _references(parts, pos)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 2, 25, 8, generator=g), torch.randn(3, 2, 25, 8, generator=g)
    for ours, ref in (("rope_mixed_2d", "timm_reference_mixed_2d"), ("rope_axial_timm_2d", "timm_reference_axial_2d")):
        a, b = parts[ours](q, k, pos)
        ra, rb = refs[ref](q, k)
        assert (a - ra).abs().max() <= 1e-5 and (b - rb).abs().max() <= 1e-5
    (parts["rope_mixed_2d"](q, k, pos)[0] ** 2 * q).sum().backward()
    (refs["timm_reference_mixed_2d"](q, k)[0] ** 2 * q).sum().backward()
    ours_grad = parts["rope_mixed_2d"].beta.grad.permute(2, 0, 1)
    assert torch.allclose(ours_grad, refs["timm_reference_mixed_2d"].freqs.grad, rtol=1e-4, atol=1e-4)
    other = type(parts["rope_mixed_2d"])(8, 2, mode="mixed", n_heads=2, seed=1)
    swapped = _references({**parts, "rope_mixed_2d": other}, pos)
    assert (swapped["timm_reference_mixed_2d"](q, k)[0] - parts["rope_mixed_2d"](q, k, pos)[0]).abs().max() > 1e-2


def test_lower_bound_ratio_names_and_flop_counts():
    """The lower-bound rows time what they name: at a small shape, STRING's matmul GFLOP are its six dense products
    (2 x 3 x 2 rows Dh^2) plus the Cayley solve's, and ESPR's application is 6 x rows x Dh^2 x 2 (no timing asserts)."""
    from symformer.benchmarks.positional_vision import _fwd_bwd, _parts, lower_bounds
    from symformer.positional import grid_positions

    parts = _parts(2, 8)
    pos = grid_positions(4)
    q, k = (torch.randn(3, 2, 16, 8).requires_grad_() for _ in range(2))
    out = lower_bounds(parts, q, k, pos, _fwd_bwd(parts["rope_mixed_2d"], q, k, pos), 1, "cpu")
    assert {n.rsplit("_", 1)[0] for n in out} == {
        "string_2d_dense_products_vs_rope_mixed",
        "string_2d_rope_part_vs_rope_mixed",
        "espr_2d_application_vs_rope_mixed",
        "string_2d_fwd_bwd_matmul_gflop",
        "espr_2d_fwd_bwd_matmul_gflop",
        "espr_2d_application_matmul_gflop",
    }
    rows = 3 * 2 * 16
    assert out["espr_2d_application_matmul_gflop_4x4"] * 1e9 == pytest.approx(6 * rows * 8 * 8 * 2)
    assert out["string_2d_fwd_bwd_matmul_gflop_4x4"] * 1e9 >= 6 * rows * 8 * 8 * 2
    assert all(v > 0 for v in out.values())
