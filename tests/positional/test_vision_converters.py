"""timm's and rope-vit's rotary layouts (issue 62): axial blocks layout, x / y order, and converters from
hand-built state dicts in their layout, against float64 transcriptions of their formulas (timm
build_rotary_pos_embed / get_mixed_freqs / apply_rot_embed_cat; rope-vit compute_axial_cis / compute_mixed_cis)."""

from __future__ import annotations

import math

import pytest
import torch

from symformer.positional import RoPE
from symformer.positional.grids import grid_positions, with_prefix
from symformer.positional.vision import from_rope_vit, from_timm_state_dict, rope_vit_axial, timm_axial

F64 = torch.float64


@pytest.fixture
def f64_default():
    """Parts built with float64 masters (master_dtype follows torch's default dtype)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(F64)
    yield
    torch.set_default_dtype(old)


def ref_rot(x: torch.Tensor) -> torch.Tensor:  # timm's rot: [-x1, x0, -x3, x2, ...]
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def ref_apply_cat(x, sin_emb, cos_emb):  # apply_rot_embed_cat(half=False)
    return x * cos_emb + ref_rot(x) * sin_emb


def ref_timm_cat(feat_shape, dim, temperature, in_pixels, max_res, linear_bands, grid_indexing):
    """build_rotary_pos_embed in float64: interleaved (sin, cos) tables (N, Dh)."""
    n = dim // 4
    if in_pixels:
        if linear_bands:
            bands = torch.linspace(1.0, max_res / 2, n, dtype=F64)
        else:
            bands = 2 ** torch.linspace(0, math.log(max_res, 2) - 1, n, dtype=F64)
        bands = bands * torch.pi
    else:
        bands = 1.0 / (temperature ** (torch.arange(0, n, 1, dtype=F64) / n))
    shape = list(feat_shape) if grid_indexing == "ij" else [feat_shape[1], feat_shape[0]]
    if in_pixels:
        t = [torch.linspace(-1.0, 1.0, steps=s, dtype=F64) for s in shape]
    else:
        t = [torch.arange(s, dtype=F64) for s in shape]
    grid = torch.stack(torch.meshgrid(t, indexing=grid_indexing), dim=-1).unsqueeze(-1)
    pos = grid * bands
    npos = feat_shape[0] * feat_shape[1]
    return (pos.sin().reshape(npos, -1).repeat_interleave(2, -1), pos.cos().reshape(npos, -1).repeat_interleave(2, -1))


def ref_rope_vit_axial(x, dim, end_x, end_y, theta):
    """rope-vit's compute_axial_cis + apply_rotary_emb in float64."""
    f = 1.0 / (theta ** (torch.arange(0, dim, 4)[: (dim // 4)].to(F64) / dim))
    t = torch.arange(end_x * end_y, dtype=F64)
    t_x, t_y = t % end_x, torch.div(t, end_x, rounding_mode="floor")
    fx, fy = torch.outer(t_x, f), torch.outer(t_y, f)
    cis = torch.cat([torch.polar(torch.ones_like(fx), fx), torch.polar(torch.ones_like(fy), fy)], dim=-1)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * cis).flatten(-2)


def _pos(h, w, kind, order):
    return grid_positions((h, w), kind, order=order, dtype=F64)


@pytest.mark.parametrize("size", [(4, 4), (3, 5), (14, 20)])
@pytest.mark.parametrize("in_pixels", [False, True])
@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
@pytest.mark.parametrize("order", ["yx", "xy"])
def test_axial_timm_layout_vs_reference_f64(f64_default, size, in_pixels, grid_indexing, order):
    """axial_timm_layout_vs_reference_f64 <= 1e-12: RotaryEmbeddingCat's rotation from timm_axial's RoPE."""
    dh = 16
    sin, cos = ref_timm_cat(size, dh, 10000.0, in_pixels, 224, False, grid_indexing)
    part = timm_axial(dh, in_pixels=in_pixels, grid_indexing=grid_indexing, position_order=order)
    x = torch.randn(2, 3, size[0] * size[1], dh, dtype=F64)
    pos = _pos(*size, "pixel" if in_pixels else "integer", order)
    assert (part.rotate(x, pos) - ref_apply_cat(x, sin, cos)).abs().max() <= 1e-12


def test_axial_layouts_differ_and_blocks_match_rope_vit(f64_default):
    x = torch.randn(1, 2, 12, 16, dtype=F64)
    pos = _pos(3, 4, "integer", "yx")
    ref = ref_rope_vit_axial(x, 16, 4, 3, 100.0)
    assert (rope_vit_axial(16).rotate(x, pos) - ref).abs().max() <= 1e-12
    assert (rope_vit_axial(16, position_order="xy").rotate(x, _pos(3, 4, "integer", "xy")) - ref).abs().max() <= 1e-12
    ours = RoPE(16, 2, 100.0, pairing="interleaved", axis_layout="blocks", axis_order=(1, 0))
    assert (ours.rotate(x, pos) - ref).abs().max() <= 1e-12
    # negative controls: the interleaved axis layout and the other x / y order are other rotations
    inter = RoPE(16, 2, 100.0, pairing="interleaved", axis_layout="interleaved", axis_order=(1, 0))
    assert (inter.rotate(x, pos) - ref).abs().max() > 1e-3
    swapped = RoPE(16, 2, 100.0, pairing="interleaved", axis_layout="blocks")
    assert (swapped.rotate(x, pos) - ref).abs().max() > 1e-3


@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
@pytest.mark.parametrize("order", ["yx", "xy"])
def test_timm_mixed_state_dict_vs_reference_f64(grid_indexing, order):
    depth, heads, dh, (h, w) = 2, 3, 16, (3, 5)
    freqs = torch.randn(2, depth, heads, dh // 2, dtype=F64)
    parts = from_timm_state_dict(
        {"rope.freqs": freqs, "blocks.0.attn.qkv.weight": torch.zeros(1)}, "rope.", grid_indexing, order
    )
    shape = [h, w] if grid_indexing == "ij" else [w, h]
    xp, yp = torch.meshgrid(
        torch.arange(shape[0], dtype=F64), torch.arange(shape[1], dtype=F64), indexing=grid_indexing
    )
    t_x, t_y = xp.flatten(), yp.flatten()
    x = torch.randn(2, heads, h * w, dh, dtype=F64)
    for layer, part in enumerate(parts):
        ang = t_x[None, :, None] * freqs[0, layer][:, None] + t_y[None, :, None] * freqs[1, layer][:, None]
        ref = ref_apply_cat(x, ang.sin().repeat_interleave(2, -1), ang.cos().repeat_interleave(2, -1))
        assert (part.rotate(x, _pos(h, w, "integer", order)) - ref).abs().max() <= 1e-12


def test_rope_vit_mixed_state_dict_vs_reference_f64(tmp_path):
    from safetensors.torch import save_file

    depth, heads, dh, (h, w) = 2, 4, 8, (4, 3)
    freqs = torch.randn(2, depth, heads * dh // 2, dtype=F64)
    save_file({"freqs": freqs}, str(tmp_path / "m.safetensors"))
    t = torch.arange(w * h, dtype=F64)
    t_x, t_y = t % w, torch.div(t, w, rounding_mode="floor")
    x = torch.randn(1, heads, h * w, dh, dtype=F64)
    for source in ({"freqs": freqs}, tmp_path / "m.safetensors"):
        for layer, part in enumerate(from_rope_vit(source, n_heads=heads)):
            f = (t_x.unsqueeze(-1) @ freqs[0, layer].unsqueeze(-2)).view(h * w, heads, -1).permute(1, 0, 2)
            f = f + (t_y.unsqueeze(-1) @ freqs[1, layer].unsqueeze(-2)).view(h * w, heads, -1).permute(1, 0, 2)
            xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
            ref = torch.view_as_real(xc * torch.polar(torch.ones_like(f), f)).flatten(-2)
            assert (part.rotate(x, _pos(h, w, "integer", "yx")) - ref).abs().max() <= 1e-12
            assert part.beta.requires_grad and part.beta.shape == (heads, dh // 2, 2)


def test_converters_refuse_bad_names_shapes_and_pickle(tmp_path):
    with pytest.raises(ValueError, match="state_dict.*rope.freqs_cos"):
        from_timm_state_dict({"rope.freqs_cos": torch.zeros(3)})
    with pytest.raises(ValueError, match="state_dict.*no 'rope.freqs'"):
        from_timm_state_dict({})
    with pytest.raises(ValueError, match="state_dict.*shape \\(2, 3\\)"):
        from_timm_state_dict({"rope.freqs": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="n_heads"):
        from_rope_vit({"freqs": torch.zeros(2, 1, 10)}, n_heads=3)
    with pytest.raises(ValueError, match="position_order"):
        from_rope_vit({"freqs": torch.zeros(2, 1, 8)}, n_heads=2, position_order="zx")
    torch.save({"freqs": torch.zeros(2, 1, 8)}, tmp_path / "m.pt")
    with pytest.raises(ValueError, match="state_dict.*safetensors"):
        from_rope_vit(tmp_path / "m.pt", n_heads=2)
    with pytest.raises(ValueError, match="axis_layout"):
        RoPE(8, 2, axis_layout="halves")
    with pytest.raises(ValueError, match="axis_order"):
        RoPE(8, 2, axis_order=(0, 0))
    with pytest.raises(ValueError, match="grid_indexing"):
        timm_axial(16, grid_indexing="yx")


def test_grid_positions_and_prefix():
    assert grid_positions(3, "centred")[:, 0].tolist() == [-1.0] * 3 + [0.0] * 3 + [1.0] * 3
    assert grid_positions((2, 4), ref_size=(2, 2))[:, 1].max() == 1.5  # 0..3 rescaled by 2/4
    assert with_prefix(grid_positions(2), 2).shape == (6, 2)
    with pytest.raises(ValueError, match="size"):
        grid_positions((2, 0))
    with pytest.raises(ValueError, match="kind"):
        grid_positions(2, "cm")
