"""Tiny float64 models for every positional kind the teleport groups support."""

from __future__ import annotations

import torch

from symformer.models import TransformerConfig, ViTClassifier, attention_layers

KINDS = [
    "none",
    "sinusoidal",
    "learned",
    "rope-interleaved",
    "rope-half",
    "string",
    "circulant-string",
    "espr",
    "espr-noncommuting",
    "partial-rope",
    "partial-string",
]


def positions(n: int = 6) -> torch.Tensor:
    return torch.stack([torch.arange(n) % 3, torch.arange(n) // 3], -1).to(torch.float64)


def tiny_model(kind: str, seed: int = 0, mlp: str = "relu", n_layers: int = 2) -> ViTClassifier:
    """d_model 16, 2 heads of Dh 8, 2-D positions; STRING/ESPR are swapped in when not registered."""
    torch.manual_seed(seed)
    base, kw = kind, {}
    if kind.startswith("rope-"):
        base, kw = "rope", {"pairing": kind.split("-")[1]}
    swap = None
    if kind in ("string", "circulant-string", "espr", "espr-noncommuting", "partial-rope", "partial-string"):
        swap, base = kind, "rope"
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=n_layers, positional=base, positional_kwargs=kw, coord_dim=2, mlp=mlp, max_len=8
    )
    model = ViTClassifier(cfg, 4, 3).to(torch.float64)
    if swap is not None:
        for a in attention_layers(model):
            a.rotary = make_rotary(swap).to(torch.float64)
    return model


def make_rotary(kind: str):
    from symformer.positional import ESPR, STRING, CirculantSTRING, PartialRotary, RoPE

    if kind == "partial-rope":  # 4 of the 8 coordinates rotated (2-D positions), GL on the other 4
        return PartialRotary(RoPE(head_dim=4, coord_dim=2), 8)
    if kind == "partial-string":
        return PartialRotary(STRING(head_dim=4, coord_dim=2, init_scale=0.3), 8)
    if kind == "espr":  # commuting init: RoPE on the active block, then a random post-rotation
        r = ESPR(head_dim=8, coord_dim=2, d_act=6)
        with torch.no_grad():
            r.skew_param.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
        return r
    if kind == "espr-noncommuting":
        return ESPR(head_dim=8, coord_dim=2, commuting_init=False, init_scale=0.3)
    if kind == "string":
        return STRING(head_dim=8, coord_dim=2, init_scale=0.3)
    return CirculantSTRING(head_dim=8, coord_dim=2)


def batch(seed: int = 1, b: int = 5, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, 4, generator=g, dtype=torch.float64), positions(n), torch.randint(0, 3, (b,), generator=g)


def setup(kind: str = "rope-interleaved"):
    """(model, its symmetry group, a loss closure) with the gradient of that loss in place."""
    from torch import nn

    from symformer.teleport import symmetry_group

    m = tiny_model(kind)
    x, pos, y = batch()

    def loss_fn():
        return nn.functional.cross_entropy(m(x, pos), y)

    m.zero_grad()
    loss_fn().backward()
    return m, symmetry_group(m), loss_fn
