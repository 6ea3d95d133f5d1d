"""Parts (a) and (b) of experiment `teleport`: invariance of the model under random group elements for every PE kind,
the negative checks, and closed-form candidate gradient norms against brute force. float64 on the CPU, where they
are exact (they do not follow RunContext.device)."""

from __future__ import annotations

import torch
from torch import nn

from symformer._rng import seed_torch, seeded_generator
from symformer.experiments.teleport.plan import pe_settings
from symformer.models import TransformerConfig, ViTClassifier, attention_layers
from symformer.positional import ESPR, STRING, pair_indices
from symformer.teleport import HGroup, QKGroup, brute_force_norms, closed_form_norms, symmetry_group


def _tiny_model(kind: str, seed: int = 0):
    seed_torch(seed)
    base, kw = pe_settings()[kind]
    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=2,
        positional=base,
        positional_kwargs=dict(kw),
        coord_dim=2,
        mlp="relu",
        max_len=8,
    )
    model = ViTClassifier(cfg, 4, 3).to(torch.float64)
    gen = seeded_generator(seed + 3)
    for i, a in enumerate(attention_layers(model)):
        part_seed = 1000 * (seed + 1) + i  # a P of its own per layer and trial (not the parts' default seed 0)
        if kind == "string":  # a random learned P, so the group is a genuine conjugate P H P^T
            a.rotary = STRING(
                head_dim=8, coord_dim=2, init_scale=0.3, seed=part_seed, pairing="interleaved", mode="mixed_random"
            ).to(torch.float64)  # the recorded runs' pairing and random-direction init
        if kind == "espr":  # non-commuting generators and a post-rotation (beyond STRING)
            a.rotary = ESPR(
                head_dim=8,
                coord_dim=2,
                commuting_init=False,
                init_scale=0.3,
                seed=part_seed,
                pairing="interleaved",
                mode="mixed_random",
            ).to(torch.float64)  # the recorded runs' pairing and random-direction init
            with torch.no_grad():
                a.rotary.skew_param.normal_(0, 0.3, generator=gen)
    return model


def _batch(seed: int = 1, b: int = 6, n: int = 6):
    g = seeded_generator(seed)
    pos = torch.stack([torch.arange(n) % 3, torch.arange(n) // 3], -1).to(torch.float64)
    return torch.randn(b, n, 4, generator=g, dtype=torch.float64), pos, torch.randint(0, 3, (b,), generator=g)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def invariance_checks(trials: int) -> dict:
    errs, dims = {}, {}
    x, pos, _ = _batch()
    for kind in pe_settings():
        worst = 0.0
        for t in range(trials):
            m = _tiny_model(kind, seed=t)
            with torch.no_grad():
                y0 = m(x, pos)
                G = symmetry_group(m)
                G.apply(m, G.random(seeded_generator(100 + t)))  # generic element, perms, FFN scales
                worst = max(worst, _rel(m(x, pos), y0))
        errs[kind], dims[kind] = worst, G.qk_dimensions()[0]
    return {"errs": errs, "dims": dims, **negative_checks(x, pos)}


def negative_checks(x, pos) -> dict:
    """A generic diagonal U, and H built on the other pairing, must break RoPE (Sec. 3.2)."""
    out = {}
    gen = seeded_generator(7)
    for name, make in (
        ("diag", lambda d: QKGroup(d).near_identity((2,), 0.5, gen)),
        ("wrong", lambda d: HGroup(d, pair_indices(d, "half")).random((2,), gen)),
    ):
        m = _tiny_model("rope-interleaved")
        with torch.no_grad():
            y0 = m(x, pos)
            G = symmetry_group(m)
            g = G.identity()
            g.qk = [make(s.head_dim) for s in G.sites]
            G.apply(m, g)
            out[name] = _rel(m(x, pos), y0)
    return {"diag": out["diag"], "wrong": out["wrong"]}


def closed_form_checks(samples: int = 16) -> float:
    x, pos, y = _batch()
    worst = 0.0
    for kind in pe_settings():
        m = _tiny_model(kind)
        G = symmetry_group(m)

        def loss_fn(m=m):
            return nn.functional.cross_entropy(m(x, pos), y)

        m.zero_grad()
        loss_fn().backward()
        cands = G.sample(samples, 0.65, seeded_generator(11), ffn=True)
        cf, bf = closed_form_norms(m, G, cands), brute_force_norms(m, G, cands, loss_fn)
        worst = max(worst, float(((cf - bf).abs() / bf).max()))
    return worst
