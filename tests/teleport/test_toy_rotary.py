"""A new rotary part needs one file in positional/ and one registration, nothing in teleport (issue 18).

The toy part below (a plane rotation, written only against the RotaryPositional interface) is registered,
built into a ViT through TransformerConfig, and teleported; the model's function must not change (float64).
Its Q/K group comes from the interface's default (the commutant of its relative rotations): U^T must commute
with rotations of the plane (0, 1), i.e. U = (a I + b J) (+) GL(Dh - 2), of dimension 2 + (Dh - 2)^2."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from symformer.models import TransformerConfig, ViTClassifier, attention_layers
from symformer.positional import RotaryPositional
from symformer.registry import POSITIONAL
from symformer.teleport import QKGroup, symmetry_group, teleport_step

NAME = "toy_plane_test_only"


class PlaneRotary(RotaryPositional):
    """Rotates coordinates (0, 1) of every head by the angle omega . r; the other coordinates are untouched."""

    def __init__(self, head_dim: int, coord_dim: int = 1):
        super().__init__()
        self.head_dim, self.coord_dim = head_dim, coord_dim
        self.omega = nn.Parameter(torch.linspace(0.3, 0.9, coord_dim))

    def generators(self) -> torch.Tensor:
        e = torch.zeros(self.head_dim, self.head_dim, dtype=self.omega.dtype)
        e[1, 0], e[0, 1] = 1.0, -1.0
        return self.omega[:, None, None] * e

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        a = torch.einsum("...c,cij->...ij", positions.to(self.omega.dtype), self.generators())
        return torch.linalg.matrix_exp(a)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        m = self.matrix(positions)
        m = m[:, None] if m.ndim == 4 else m  # (B, N, D, D) -> (B, 1, N, D, D) over heads
        return (m.to(x.dtype) @ x[..., None])[..., 0]

    def forward(self, q, k, positions, key_positions=None):
        kp = self._check_qk(q, k, positions, key_positions)
        return self.rotate(q, positions), self.rotate(k, kp)


@pytest.fixture
def toy_registered():
    POSITIONAL.register(NAME)(PlaneRotary)
    yield
    POSITIONAL._items.pop(NAME)  # the registry is process-wide: leave no test-only part behind


def _model_and_batch():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, positional=NAME, coord_dim=2, mlp="relu", max_len=8)
    model = ViTClassifier(cfg, 4, 3).to(torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 6, 4, generator=g, dtype=torch.float64)
    pos = torch.stack([torch.arange(6) % 3, torch.arange(6) // 3], -1).to(torch.float64)
    return model, x, pos, torch.randint(0, 3, (5,), generator=g)


def test_registered_toy_part_is_teleported_without_changing_the_function(toy_registered):
    model, x, pos, y = _model_and_batch()
    assert all(isinstance(a.rotary, PlaneRotary) for a in attention_layers(model))
    G = symmetry_group(model)
    assert G.qk_dimensions() == [2 + 6**2] * 2  # the commutant of plane rotations in Dh = 8
    assert {id(p) for p in G.dependent_parameters()} == {id(a.rotary.omega) for a in attention_layers(model)}
    with torch.no_grad():
        before = model(x, pos)
    gen = torch.Generator().manual_seed(2)
    G.apply(model, G.random(gen))  # a generic element: dense GL block, permutations, FFN scalings
    with torch.no_grad():
        after = model(x, pos)
    assert float((after - before).abs().max()) <= 1e-12 * float(before.abs().max())


def test_toy_part_teleport_step_and_a_wrong_group_breaks_it(toy_registered):
    model, x, pos, y = _model_and_batch()
    G = symmetry_group(model)

    def loss_fn():
        return nn.functional.cross_entropy(model(x, pos), y)

    loss_fn().backward()
    l0 = float(loss_fn().detach())
    out = teleport_step(model, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(1))
    assert out.applied and abs(float(loss_fn().detach()) - l0) <= 1e-12
    # the test can fail: GL(d_h) on Q/K (the group of a model without rotation) changes the function
    for s in G.sites:
        s.qk = QKGroup(s.head_dim)
    with torch.no_grad():
        before = model(x, pos)
        G.apply(model, G.random(torch.Generator().manual_seed(3), permute=False, ffn=False))
        assert float((model(x, pos) - before).abs().max()) > 1e-3


def test_an_approximate_attention_core_is_refused():
    """The core declares exactness (AttentionCore.exact_softmax); FAVOR+ does not, so no group exists."""
    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=1,
        positional="rope",
        coord_dim=2,
        attention="favor",
        attention_kwargs={"n_features": 8},
    )
    with pytest.raises(ValueError, match="attention: got 'FavorAttention', expected an exact softmax core"):
        symmetry_group(ViTClassifier(cfg, 4, 3))
