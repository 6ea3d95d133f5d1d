"""Registry build through TransformerConfig(positional=...) and a ViTClassifier forward/backward."""

from __future__ import annotations

import pytest
import torch

from symformer.models.transformer import TransformerConfig, attention_layers, fold_rotary, penalties
from symformer.models.vit import ViTClassifier
from symformer.positional import (
    ESPR,
    STRING,
    CirculantSTRING,
    RoPE,
)
from symformer.registry import POSITIONAL


@pytest.mark.parametrize(
    "name,cls,kw",
    [
        ("rope", RoPE, {}),
        ("string", STRING, {"init_scale": 0.1}),
        ("circulant_string", CirculantSTRING, {}),
        ("espr", ESPR, {"d_act": 6, "commuting_init": False, "eps_comm_penalty": 0.1, "eta_mix_penalty": 0.1}),
    ],
)
def test_vit_forward_backward(name, cls, kw):
    assert name in POSITIONAL
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, positional=name, positional_kwargs=kw, coord_dim=2)
    model = ViTClassifier(cfg, token_dim=5, n_classes=3)
    layers = attention_layers(model)
    assert all(isinstance(layer.rotary, cls) for layer in layers)
    tokens = torch.randn(4, 9, 5)
    grid = torch.stack(torch.meshgrid(torch.arange(3.0), torch.arange(3.0), indexing="ij"), -1).reshape(9, 2)
    logits = model(tokens, grid)
    assert logits.shape == (4, 3) and torch.isfinite(logits).all()
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0])) + penalties(model)
    loss.backward()
    for p in model.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    rot_params = [p for layer in layers for p in layer.rotary.parameters() if p.requires_grad]
    assert not rot_params or any(p.grad.abs().sum() > 0 for p in rot_params)  # RoPE: fixed beta


def test_espr_scale_reaches_attention():
    # T4.4: the layer must use 1/sqrt(d_act); check against a manual softmax attention
    torch.manual_seed(1)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=1, positional="espr", positional_kwargs={"d_act": 4}, coord_dim=1
    )
    layer = attention_layers(ViTClassifier(cfg, 3, 2).double())[0]
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    pos = torch.arange(5.0, dtype=torch.float64)[:, None]
    q, k, v = (layer._heads(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    qr, kr = layer.rotary(q, k, pos)
    att = torch.softmax(qr @ kr.mT / 2.0, -1) @ v  # sqrt(d_act) = 2
    want = layer.o_proj(att.transpose(1, 2).reshape(1, 5, 16))
    assert (layer(x, pos) - want).abs().max() <= 1e-12


def test_folded_string_vit_same_logits():
    torch.manual_seed(2)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=2, positional="string", positional_kwargs={"init_scale": 0.3}, coord_dim=2
    )
    model = ViTClassifier(cfg, 5, 3).double().eval()
    tokens = torch.randn(2, 4, 5, dtype=torch.float64)
    pos = torch.randn(4, 2, dtype=torch.float64)
    before = model(tokens, pos)
    assert fold_rotary(model) == 2
    assert (model(tokens, pos) - before).abs().max() <= 1e-12


def _initial(model) -> list[torch.Tensor]:
    """Each attention layer's random initial part parameters (STRING's skew, CirculantSTRING's c, ESPR's generators)."""
    return [
        next(p for n, p in layer.rotary.named_parameters() if n in ("skew_param", "c", "gen_param")).detach()
        for layer in attention_layers(model)
    ]


@pytest.mark.parametrize(
    "name,kw", [("string", {"init_scale": 0.3}), ("circulant_string", {}), ("espr", {"commuting_init": False})]
)
def test_every_layer_draws_its_own_initial_part(name, kw):
    """Without a seed a part draws from torch's global generator (as nn.Linear does): layers differ, and
    torch.manual_seed reproduces the model; with a seed, layer l takes its own seed derived from it (layers differ,
    the model is the same whatever the global generator's state, and another seed gives another model)."""

    def build(**extra):
        cfg = TransformerConfig(
            d_model=16, n_heads=2, n_layers=3, positional=name, coord_dim=2, positional_kwargs={**kw, **extra}
        )
        return _initial(ViTClassifier(cfg, token_dim=5, n_classes=3))

    def distinct(ps):
        return all(not torch.equal(ps[i], ps[j]) for i in range(len(ps)) for j in range(i))

    torch.manual_seed(0)
    a = build()
    torch.manual_seed(0)
    assert distinct(a) and all(torch.equal(x, y) for x, y in zip(a, build(), strict=True))
    torch.manual_seed(1)
    b = build(seed=7)
    torch.manual_seed(2)
    assert distinct(b) and all(torch.equal(x, y) for x, y in zip(b, build(seed=7), strict=True))
    assert not torch.equal(b[0], build(seed=8)[0])


def test_deterministic_inits_draw_nothing_and_a_bad_seed_is_refused():
    """RoPE-equal inits (STRING init_scale 0, ESPR's commuting init) use no generator: the global stream is left as
    it is; a seed that is not an integer gets a TypeError naming it."""
    torch.manual_seed(3)
    state = torch.get_rng_state()
    STRING(8, 1)
    ESPR(8, 1)
    assert torch.equal(torch.get_rng_state(), state)
    with pytest.raises(TypeError, match=r"^seed: got 1.5, expected an integer or None"):
        STRING(8, 1, init_scale=0.1, seed=1.5)
