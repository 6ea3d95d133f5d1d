"""Random streams for the random parts of a construction, kept apart from the data's.

The synthetic data sets draw their embeddings from `torch.Generator().manual_seed(seed)` (facts.lm.ssfr.make_ssfr,
facts.embeddings.make_fact_set), and a builder that seeded its own generator with the same integer and drew the same
shape first got the very same numbers: ntk_mlp(seed=0) on make_ssfr(seed=0) had the keys as its first random
features (its MLP for f stored 3-70% of the facts at sizes where seed 1 stores 99.9%), and the gadget encoder's G
held the keys (a Lipschitz estimate 2.6x that of an independent G). `generator(purpose, seed)` seeds from a hash of
both, so the stream of each purpose is independent of every other purpose's and of any plain `manual_seed(seed)`.

The one seeding rule (CONTRIBUTING): every part, builder and data set takes `seed: int | None` with nn.Linear's
meaning: None draws from torch's global generator (so `torch.manual_seed` governs it), an integer fixes the draw, and
anything else is a TypeError naming `seed`. A model's per-layer seeds are derived once, where the layers are built
(models.layers, integrations' configure / patch_positional), by `layer_kwargs`. No module outside this one calls
`manual_seed` or constructs a `torch.Generator` (tests/test_seeding.py).
"""

from __future__ import annotations

import hashlib
import numbers

import torch

from symformer._validation import fail


def check_seed(seed, name: str = "seed") -> int | None:
    """`seed` if it is an integer (bool excluded) or None, else a TypeError naming `name`."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        fail(name, seed, "an integer or None", TypeError)
    return None if seed is None else int(seed)


def global_seed() -> int:
    """A seed drawn from torch's global generator, for a part that must store its seed (FAVOR+'s redraws)
    when given seed=None: torch.manual_seed governs it."""
    return int(torch.randint(2**31 - 1, (), device="cpu"))  # on the CPU under a meta-device context too


def resolve_seed(seed: int | None) -> int:
    """The integer a draw uses: `seed` itself, or for None one drawn from torch's global generator (global_seed),
    for a builder that derives several streams from one seed (`seed + 7`, a data set's per-kind streams)."""
    return global_seed() if check_seed(seed) is None else int(seed)


def derived_seed(purpose: str, seed: int) -> int:
    """A 63-bit seed from (purpose, seed): sha256 of "symformer:<purpose>:<seed>"."""
    if check_seed(seed) is None:
        fail("seed", seed, "an integer", TypeError)
    digest = hashlib.sha256(f"symformer:{purpose}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(purpose: str, seed: int | None) -> torch.Generator:
    """A CPU generator for `purpose` ("ntk", "gadget", "jl", ...), seeded with derived_seed(purpose, seed);
    seed=None: `fresh_generator()` (seeded from torch's global generator)."""
    if check_seed(seed) is None:
        return fresh_generator()
    return torch.Generator().manual_seed(derived_seed(purpose, seed))


def init_generator(seed: int | None) -> torch.Generator | None:
    """The generator of a module's random initialisation: seeded with `seed`, or None (torch's global generator,
    as nn.Linear draws its weights, so torch.manual_seed governs it)."""
    if check_seed(seed) is None:
        return None
    return torch.Generator().manual_seed(int(seed))


def layer_kwargs(kwargs: dict, layer: int | str | None) -> dict:
    """A copy of a part's kwargs for layer `layer` of a model: a given seed becomes derived_seed("layer<l>", seed), so
    that the layers of one model draw different initial parameters and the run stays reproducible (every layer drew
    the same numbers from one given seed before); without a seed (or a layer index) the kwargs are unchanged."""
    kw = dict(kwargs)
    if layer is not None and check_seed(kw.get("seed")) is not None:
        kw["seed"] = derived_seed(f"layer{layer}", kw["seed"])
    return kw


def seeded_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator on `device` seeded with `seed` itself: the stream `torch.Generator().manual_seed(seed)` gives;
    seed=None: `fresh_generator(device)` (seeded from torch's global generator).
    The synthetic data sets and the experiments' data draws use it, so their recorded draws are kept; a random part
    of a construction uses `generator(purpose, seed)` instead (module docstring)."""
    if check_seed(seed) is None:
        return fresh_generator(device)
    return torch.Generator(device=device).manual_seed(int(seed))


def fresh_generator(device: str | torch.device = "cpu") -> torch.Generator:
    """A generator seeded from torch's global generator, for `seed=None`: a run that called torch.manual_seed
    stays reproducible, as nn.Linear's initialisation does."""
    return torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), device="cpu").item()))


def seed_torch(seed: int | None) -> None:
    """Seed torch's global generator (what nn.Linear, dropout and DataLoader shuffling draw from) for a training
    run: the one place where a run fixes the global stream. seed=None leaves the global stream as it is."""
    if check_seed(seed) is not None:
        torch.manual_seed(int(seed))


__all__ = [
    "check_seed",
    "derived_seed",
    "global_seed",
    "fresh_generator",
    "generator",
    "init_generator",
    "layer_kwargs",
    "resolve_seed",
    "seed_torch",
    "seeded_generator",
]
