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


@pytest.mark.parametrize("name,cls,kw", [
    ("rope", RoPE, {}),
    ("string", STRING, {"init_scale": 0.1}),
    ("circulant_string", CirculantSTRING, {}),
    ("espr", ESPR, {"d_act": 6, "commuting_init": False, "eps_comm_penalty": 0.1, "eta_mix_penalty": 0.1}),
])
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
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=1, positional="espr",
                            positional_kwargs={"d_act": 4}, coord_dim=1)
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
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, positional="string",
                            positional_kwargs={"init_scale": 0.3}, coord_dim=2)
    model = ViTClassifier(cfg, 5, 3).double().eval()
    tokens = torch.randn(2, 4, 5, dtype=torch.float64)
    pos = torch.randn(4, 2, dtype=torch.float64)
    before = model(tokens, pos)
    assert fold_rotary(model) == 2
    assert (model(tokens, pos) - before).abs().max() <= 1e-12
