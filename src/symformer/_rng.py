"""Random streams for the random parts of a construction, kept apart from the data's.

The synthetic data sets draw their embeddings from `torch.Generator().manual_seed(seed)` (data.ssfr.make_ssfr,
facts.embeddings.make_fact_set), and a builder that seeded its own generator with the same integer and drew the same
shape first got the very same numbers: ntk_mlp(seed=0) on make_ssfr(seed=0) had the keys as its first random
features (its MLP for f stored 3-70% of the facts at sizes where seed 1 stores 99.9%), and the gadget encoder's G
held the keys (a Lipschitz estimate 2.6x that of an independent G). `generator(purpose, seed)` seeds from a hash of
both, so the stream of each purpose is independent of every other purpose's and of any plain `manual_seed(seed)`.
"""

from __future__ import annotations

import hashlib
import numbers

import torch

from symformer._validation import fail


def derived_seed(purpose: str, seed: int) -> int:
    """A 63-bit seed from (purpose, seed): sha256 of "symformer:<purpose>:<seed>"."""
    digest = hashlib.sha256(f"symformer:{purpose}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(purpose: str, seed: int) -> torch.Generator:
    """A CPU generator for `purpose` ("ntk", "gadget", "jl", ...), seeded with derived_seed(purpose, seed)."""
    return torch.Generator().manual_seed(derived_seed(purpose, seed))


def init_generator(seed: int | None) -> torch.Generator | None:
    """The generator of a module's random initialisation: seeded with `seed`, or None (torch's global generator,
    as nn.Linear draws its weights, so torch.manual_seed governs it)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        fail("seed", seed, "an integer or None", TypeError)
    return torch.Generator().manual_seed(int(seed))


def layer_kwargs(kwargs: dict, layer: int | str | None) -> dict:
    """A copy of a part's kwargs for layer `layer` of a model: a given seed becomes derived_seed("layer<l>", seed), so
    that the layers of one model draw different initial parameters and the run stays reproducible (every layer drew
    the same numbers from one given seed before); without a seed (or a layer index) the kwargs are unchanged."""
    kw = dict(kwargs)
    if layer is not None and kw.get("seed") is not None:
        kw["seed"] = derived_seed(f"layer{layer}", kw["seed"])
    return kw


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator on `device` seeded with `seed` itself: the stream `torch.Generator().manual_seed(seed)` gives.
    The synthetic data sets and the experiments' data draws use it, so their recorded draws are kept; a random part
    of a construction uses `generator(purpose, seed)` instead (module docstring)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        fail("seed", seed, "an integer", TypeError)
    return torch.Generator(device=device).manual_seed(int(seed))


def fresh_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded from torch's global generator, for `seed=None`: a run that called torch.manual_seed
    stays reproducible, as nn.Linear's initialisation does."""
    return torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,)).item()))


def seed_torch(seed: int) -> None:
    """Seed torch's global generator (what nn.Linear, dropout and DataLoader shuffling draw from) for a training
    run: the one place where a run fixes the global stream."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        fail("seed", seed, "an integer", TypeError)
    torch.manual_seed(int(seed))


__all__ = [
    "derived_seed",
    "fresh_generator",
    "generator",
    "init_generator",
    "layer_kwargs",
    "seed_torch",
    "seeded_generator",
]
