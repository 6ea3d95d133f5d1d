"""symformer.integrations.timm (issue 62): a timm-style ViT attention module (fused qkv, prefix tokens, (B, N, C)
positions) with symformer's parts, without timm; and the patch of timm's own modules where timm imports."""

from __future__ import annotations

import pytest
import torch

from symformer.integrations.timm import RotaryAttention, patch_timm
from symformer.positional import grid_positions

F64 = torch.float64


def test_recipe_equals_a_float64_reference_with_unrotated_prefix_tokens():
    torch.manual_seed(0)
    attn = RotaryAttention(32, 4, qkv_bias=True, num_prefix_tokens=2, positional_kwargs={"mode": "mixed"}).double()
    pos = grid_positions((3, 4), dtype=F64)
    x = torch.randn(2, 2 + 12, 32, dtype=F64)
    q, k, v = attn.qkv(x).reshape(2, 14, 3, 4, 8).permute(2, 0, 3, 1, 4)
    q = torch.cat((q[:, :, :2], attn.rotary.rotate(q[:, :, 2:], pos)), dim=2)  # rope-vit: q[:, :, 1:] only
    k = torch.cat((k[:, :, :2], attn.rotary.rotate(k[:, :, 2:], pos)), dim=2)
    y = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1) @ v
    ref = attn.proj(y.transpose(1, 2).reshape(2, 14, 32))
    assert (attn(x, pos) - ref).abs().max() <= 1e-12
    assert (attn(x, pos.expand(2, 12, 2)) - ref).abs().max() <= 1e-12  # per-sample (B, N, C) positions


def test_timm_attention_state_dict_loads():
    """timm's Attention names and shapes (qkv.weight (3C, C), qkv.bias, proj.*) load as they are."""
    sd = {
        "qkv.weight": torch.randn(96, 32),
        "qkv.bias": torch.randn(96),
        "proj.weight": torch.randn(32, 32),
        "proj.bias": torch.randn(32),
    }
    attn = RotaryAttention(32, 4, qkv_bias=True)
    missing, unexpected = attn.load_state_dict(sd, strict=False)
    assert unexpected == [] and all(m.startswith(("rotary.", "core.")) for m in missing)
    assert torch.equal(attn.qkv.weight, sd["qkv.weight"])


@pytest.mark.parametrize(
    "positional,attention", [("string", "softmax"), ("espr", "softmax"), ("rope", "favor"), ("rope", "plash")]
)
def test_recipe_runs_with_every_part_and_core(positional, attention):
    torch.manual_seed(0)
    attn = RotaryAttention(32, 2, num_prefix_tokens=1, positional=positional, attention=attention, grid=(3, 3))
    x = torch.randn(2, 10, 32, requires_grad=True)
    out = attn(x)
    out.sum().backward()
    assert out.shape == (2, 10, 32) and torch.isfinite(x.grad).all()


def test_padded_batch_mask():
    torch.manual_seed(0)
    attn = RotaryAttention(16, 2, num_prefix_tokens=1).double()
    x = torch.randn(1, 1 + 9, 16, dtype=F64)
    pad = torch.cat((x, torch.randn(1, 3, 16, dtype=F64)), dim=1)  # 3 padding tokens at the end
    pos = torch.cat((grid_positions(3, dtype=F64), torch.zeros(3, 2, dtype=F64)))
    keep = torch.arange(13)[None, None, None, :] < 10
    assert (attn(pad, pos, attn_mask=keep)[:, :10] - attn(x, grid_positions(3, dtype=F64))).abs().max() <= 1e-12


def test_recipe_bad_input():
    attn = RotaryAttention(16, 2, num_prefix_tokens=1)
    with pytest.raises(ValueError, match="positions.*\\(9, 2\\)"):
        attn(torch.randn(1, 10, 16), torch.zeros(10, 2))  # a position for the prefix token too
    with pytest.raises(ValueError, match="positions"):
        attn(torch.randn(1, 10, 16))  # no grid given
    with pytest.raises(ValueError, match="positional"):
        RotaryAttention(16, 2, positional="learned")


def test_patch_timm_where_timm_imports():
    try:
        import timm
    except Exception as e:  # noqa: BLE001
        with pytest.raises(ImportError, match="timm"):
            patch_timm(torch.nn.Linear(2, 2), (2, 2))
        pytest.skip(
            f"timm does not import here ({type(e).__name__}: {e}); it is not a test dependency because the "
            "registry's torchvision wheel does not load with the CPU torch wheel, and timm imports torchvision"
        )
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32).double().eval()
    x = torch.randn(1, 3, 32, 32, dtype=F64)
    assert patch_timm(model, model.patch_embed.grid_size, positional_kwargs={"mode": "mixed"}) == len(model.blocks)
    assert model(x).shape == (1, 1000)
