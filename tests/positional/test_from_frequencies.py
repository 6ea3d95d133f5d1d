"""RotaryPositional.from_frequencies for the built-in parts (the rotary contract the Hugging Face patch reads): RoPE,
STRING at P = I and ESPR at its commuting init start as the RoPE with the given frequencies, in either pairing;
ESPR on part of the head and circulant STRING keep their constructor's start; `pairings` and `partial_head` say
what the patch may ask of each."""

from __future__ import annotations

import pytest
import torch

from symformer.positional import ESPR, STRING, CirculantSTRING, RoPE, rotary_parts

DIM = 8
#: frequencies no base produces: the parts must copy them, not recompute them
FREQS = torch.tensor([0.9, 0.31, 0.07, 0.0123], dtype=torch.float64)
POSITIONS = torch.arange(7.0, dtype=torch.float64)[:, None]


def _rotation(part) -> torch.Tensor:
    return part.double().matrix(POSITIONS)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("cls", [RoPE, STRING, ESPR])
def test_parts_with_pairs_start_as_the_rope_of_the_frequencies(cls, pairing):
    with torch.no_grad():
        rope = RoPE(DIM, pairing=pairing)
        rope.beta.copy_(FREQS[:, None].float())
    ref = _rotation(rope)
    part = cls.from_frequencies(FREQS, pairing, base=500.0)
    assert part.head_dim == DIM and part.pairing == pairing and pairing in cls.pairings
    assert (_rotation(part) - ref).abs().max().item() <= 1e-12
    assert (_rotation(cls(DIM, pairing=pairing, base=500.0)) - ref).abs().max().item() > 1e-3  # the copy matters


def test_espr_off_its_whole_head_commuting_init_keeps_the_constructors_generators():
    """d_act < head_dim (or init noise): the frequencies do not fit the active block, so the generators are those
    of ESPR(head_dim, d_act, base) for the same seed."""
    for opts in ({"d_act": 4}, {"init_scale": 0.01, "seed": 3}):
        part = ESPR.from_frequencies(FREQS, "half", base=500.0, **opts)
        assert torch.equal(part.generators(), ESPR(DIM, base=500.0, **opts).generators())


def test_circulant_string_builds_from_its_base():
    part = CirculantSTRING.from_frequencies(FREQS, base=500.0, seed=2)
    assert part.head_dim == DIM and CirculantSTRING.pairings == ()
    assert torch.equal(part.c, CirculantSTRING(DIM, base=500.0, seed=2).c)


def test_declared_capabilities():
    parts = rotary_parts()
    assert {"rope", "string", "circulant_string", "espr"} <= set(parts)
    assert [n for n in ("rope", "string", "circulant_string", "espr") if not parts[n].partial_head] == ["espr"]
    with pytest.raises(TypeError, match="unexpected keyword"):
        RoPE.from_frequencies(FREQS, nonsense=1)
