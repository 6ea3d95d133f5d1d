"""RoPE-Mixed as rope-vit defines it (issue 62): per-head learnable frequencies from rope-vit's initialisation,
against a float64 transcription of rope-vit's equations (init_random_2d_freqs, compute_mixed_cis,
apply_rotary_emb); the old random-direction init under its own name; STRING / ESPR starting from it."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

from symformer._rng import generator as purpose_generator
from symformer.models import TransformerConfig
from symformer.models.transformer import Encoder, attention_layers
from symformer.positional import ESPR, STRING, RoPE
from symformer.positional.frequencies import rope_vit_frequencies

F64 = torch.float64


def ref_init_random_2d_freqs(dim: int, num_heads: int, theta: float, gen: torch.Generator) -> torch.Tensor:
    """rope-vit's init_random_2d_freqs in float64: (2, H, Dh/2) = (freqs_x, freqs_y), one angle per head."""
    freqs_x, freqs_y = [], []
    mag = 1 / (theta ** (torch.arange(0, dim, 4)[: (dim // 4)].to(F64) / dim))
    for _ in range(num_heads):
        angles = torch.rand(1, generator=gen, dtype=F64) * 2 * torch.pi
        freqs_x.append(torch.cat([mag * torch.cos(angles), mag * torch.cos(torch.pi / 2 + angles)], dim=-1))
        freqs_y.append(torch.cat([mag * torch.sin(angles), mag * torch.sin(torch.pi / 2 + angles)], dim=-1))
    return torch.stack([torch.stack(freqs_x), torch.stack(freqs_y)])


def ref_mixed_rotate(x: torch.Tensor, freqs: torch.Tensor, t_x: torch.Tensor, t_y: torch.Tensor) -> torch.Tensor:
    """compute_mixed_cis + apply_rotary_emb of rope-vit in float64: x (B, H, N, Dh), freqs (2, H, Dh/2)."""
    ang = t_x[None, :, None] * freqs[0][:, None, :] + t_y[None, :, None] * freqs[1][:, None, :]  # (H, N, Dh/2)
    cis = torch.polar(torch.ones_like(ang), ang)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * cis).flatten(-2)


def _grid(w: int, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.arange(w * h, dtype=F64)
    return t % w, torch.div(t, w, rounding_mode="floor")  # rope-vit's init_t_xy


@pytest.mark.parametrize("dim,heads,seed", [(16, 3, 0), (64, 6, 7), (8, 1, 2)])
def test_rope_mixed_vs_reference_f64(dim, heads, seed):
    """rope_mixed_vs_reference_f64 <= 1e-12: our mode="mixed" (interleaved pairs, positions (x, y)) rotates as
    rope-vit's equations do with the angles drawn from the same generator."""
    ref_freqs = ref_init_random_2d_freqs(dim, heads, 10.0, purpose_generator("rope.mixed", seed))
    old = torch.get_default_dtype()
    torch.set_default_dtype(F64)  # a float64 master (master_dtype), so the init itself is compared in float64
    try:
        rope = RoPE(dim, 2, pairing="interleaved", mode="mixed", n_heads=heads, seed=seed)
    finally:
        torch.set_default_dtype(old)
    assert (rope.beta - ref_freqs.permute(1, 2, 0)).abs().max() <= 1e-15
    f32 = RoPE(dim, 2, pairing="interleaved", mode="mixed", n_heads=heads, seed=seed)  # float32 master: rounded once
    assert torch.equal(f32.beta, ref_freqs.permute(1, 2, 0).float())
    t_x, t_y = _grid(5, 4)
    q, k = torch.randn(2, heads, 20, dim, dtype=F64), torch.randn(2, heads, 20, dim, dtype=F64)
    qr, kr = rope(q, k, torch.stack((t_x, t_y), -1))
    err = max(
        (qr - ref_mixed_rotate(q, ref_freqs, t_x, t_y)).abs().max(),
        (kr - ref_mixed_rotate(k, ref_freqs, t_x, t_y)).abs().max(),
    )
    assert err <= 1e-12
    # negative control: the other x / y order is another rotation
    qs, _ = rope(q, k, torch.stack((t_y, t_x), -1))
    assert (qs - ref_mixed_rotate(q, ref_freqs, t_x, t_y)).abs().max() > 1e-3


def test_rope_mixed_is_learnable_per_head_and_mixed_random_is_the_old_frozen_init():
    rope = RoPE(16, 2, mode="mixed", n_heads=4)
    assert isinstance(rope.beta, torch.nn.Parameter) and rope.beta.shape == (4, 8, 2)
    assert RoPE(16, 2, mode="mixed").beta.shape == (8, 2)  # one head's frequencies, shared
    assert not isinstance(RoPE(16, 2, mode="mixed", learnable=False).beta, torch.nn.Parameter)
    old = RoPE(16, 2, mode="mixed_random", seed=0)
    assert not isinstance(old.beta, torch.nn.Parameter)
    mags = old.beta.double().norm(dim=-1)
    assert torch.allclose(mags, 1e4 ** (-torch.arange(8, dtype=F64) / 8), rtol=1e-6)  # base 1e4, 8 magnitudes
    # rope-vit: temperature 10, Dh/4 magnitudes each in two orthogonal directions
    beta = rope_vit_frequencies(16, 2, n_heads=5, seed=1)
    assert torch.allclose(beta[:, :4].norm(dim=-1), beta[:, 4:].norm(dim=-1))
    assert torch.allclose(beta[0, :4].norm(dim=-1), 10 ** (-torch.arange(4, dtype=F64) / 4))
    assert (beta[:, 0] * beta[:, 4]).sum(-1).abs().max() < 1e-15
    ang = torch.atan2(beta[:, 0, 1], beta[:, 0, 0])
    assert ang.unique().numel() == 5  # one angle per head


def test_model_builds_per_head_learnable_rope_mixed_per_layer():
    cfg = TransformerConfig(
        d_model=32,
        n_heads=4,
        n_layers=2,
        coord_dim=2,
        positional="rope",
        positional_kwargs={"mode": "mixed", "seed": 0},
    )
    enc = Encoder(cfg)
    betas = [a.rotary.beta for a in attention_layers(enc)]
    assert all(isinstance(b, torch.nn.Parameter) and b.shape == (4, 4, 2) for b in betas)
    assert (betas[0] - betas[1]).abs().max() > 1e-3  # each layer draws its own angles
    x, pos = torch.randn(2, 9, 32), torch.stack(torch.meshgrid(torch.arange(3), torch.arange(3), indexing="ij"), -1)
    enc(x, pos.reshape(9, 2)).sum().backward()
    assert all(b.grad is not None and b.grad.abs().sum() > 0 for b in betas)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_gradcheck_rope_mixed_frequencies(pairing):
    rope = RoPE(8, 2, pairing=pairing, mode="mixed", n_heads=2, seed=0).double()
    q, k = torch.randn(1, 2, 5, 8, dtype=F64), torch.randn(1, 2, 5, 8, dtype=F64)
    pos = torch.randn(5, 2, dtype=F64) * 3

    def f(beta):
        qr, kr = functional_call(rope, {"beta": beta}, (q, k, pos))
        return qr @ kr.transpose(-1, -2)

    assert torch.autograd.gradcheck(f, (rope.beta.detach().clone().requires_grad_(),))


def test_string_and_espr_start_from_rope_vit_mixed():
    """STRING with P = I starts as per-head RoPE-Mixed (it takes n_heads too); ESPR, whose generators the heads
    share, starts as one head's RoPE-Mixed."""
    q, k = torch.randn(2, 3, 6, 16, dtype=F64), torch.randn(2, 3, 6, 16, dtype=F64)
    pos = torch.randn(6, 2, dtype=F64) * 4
    ref = RoPE(16, 2, mode="mixed", n_heads=3, seed=4).double()(q, k, pos)
    for a, b in zip(STRING(16, 2, n_heads=3, seed=4).double()(q, k, pos), ref):
        assert (a - b).abs().max() <= 1e-12
    ref1 = RoPE(16, 2, mode="mixed", seed=4).double()(q, k, pos)
    for a, b in zip(ESPR(16, 2, seed=4).double()(q, k, pos), ref1):
        assert (a - b).abs().max() <= 1e-12


def test_rope_mixed_bad_input():
    rope = RoPE(8, 2, mode="mixed", n_heads=3)
    with pytest.raises(ValueError, match="q.*3 heads"):
        rope(torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="mode"):
        RoPE(8, 2, mode="mixd")
    with pytest.raises(ValueError, match="n_heads"):
        RoPE(8, 2, mode="mixed", n_heads=0)


def test_recorded_experiments_keep_the_random_direction_init():
    """Recorded runs that built 2-D STRING / ESPR / RoPE-mixed name the old init, so their numbers reproduce."""
    from symformer.experiments.espr.arms import ARMS
    from symformer.experiments.espr.ood import OODConfig, arm_config
    from symformer.experiments.precision.rotation_checks import build_part
    from symformer.experiments.teleport import runs as teleport_runs

    assert build_part("rope_mixed", 2).mode == "mixed_random"
    assert build_part("string", 2).rope.mode == "mixed_random" and build_part("string", 1).rope.mode == "axial"
    assert teleport_runs.recorded_pairing("string", 2)["mode"] == "mixed_random"
    assert "mode" not in teleport_runs.recorded_pairing("string", 1)
    for arm in ARMS:
        if arm.positional in ("string", "espr"):
            assert arm_config(arm, OODConfig()).positional_kwargs["mode"] == "mixed_random"


def test_teleport_head_permutation_carries_per_head_frequencies():
    """Per-head frequencies break the plain head permutation symmetry: the group carries beta with the heads."""
    from symformer.models import ViTClassifier
    from symformer.teleport import symmetry_group

    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=1,
        coord_dim=2,
        positional="rope",
        positional_kwargs={"mode": "mixed", "seed": 0},
    )
    torch.manual_seed(0)
    model = ViTClassifier(cfg, 4, 3).double()
    x, pos = torch.randn(5, 6, 4, dtype=F64), torch.randn(6, 2, dtype=F64)
    with torch.no_grad():
        ref = model(x, pos)
    group = symmetry_group(model)
    group.apply(model, group.random(torch.Generator().manual_seed(0)))
    with torch.no_grad():
        assert (model(x, pos) - ref).abs().max() <= 1e-12
