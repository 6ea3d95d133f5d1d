"""Issue 42 item 3: defaults that agree with the README.

* One default pairing ("half", HF's layout) for every rotary part, so with no options RoPE ⊂ STRING ⊂ ESPR holds
  as stated: STRING at P = I and ESPR at its commuting init rotate exactly as RoPE (float64).
* Token positions as a 1-D tensor (N,) (integer or float) for every part with coord_dim 1.
* The experiments whose runs are recorded under results/ keep the pairing they were recorded with."""

from __future__ import annotations

import pytest
import torch

from symformer.positional import ESPR, STRING, CirculantSTRING, LearnedPE, RoPE, SinusoidalPE, partial_rotary
from symformer.registry import POSITIONAL

N = 64


def _qk(head_dim, n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, n, head_dim, generator=g, dtype=torch.float64) for _ in range(2))


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("head_dim", [8, 16, 64])
def test_string_with_no_options_is_rope(head_dim):
    """STRING(head_dim) (init_scale 0: P = I) rotates q and k exactly as RoPE(head_dim) (RoPE ⊂ STRING, T2.7)."""
    q, k = _qk(head_dim)
    pos = torch.arange(N, dtype=torch.float64)[:, None]
    rope, string = RoPE(head_dim).double(), STRING(head_dim).double()
    assert string.pairing == rope.pairing == "half"
    for a, b in zip(string(q, k, pos), rope(q, k, pos)):
        assert _rel(a, b) <= 1e-12
    assert _rel(string.matrix(pos), rope.matrix(pos)) <= 1e-12


def test_string_and_espr_start_from_rope_mixed_in_two_dimensions():
    """For C > 1 STRING and ESPR start from the RoPE-mixed frequencies (Cayley-STRING's init): RoPE(mode="mixed")
    with the same seed draws the same directions (a given seed, or seed=None after the same torch.manual_seed)."""
    q, k = _qk(16)
    pos = torch.randn(N, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 8
    for seed in (3, None):
        torch.manual_seed(0)
        ref = RoPE(16, 2, mode="mixed", seed=seed).double()(q, k, pos)
        for make in (STRING, ESPR):
            torch.manual_seed(0)
            part = make(16, 2, seed=seed).double()
            for a, b in zip(part(q, k, pos), ref):
                assert _rel(a, b) <= 1e-12, (make.__name__, seed)


@pytest.mark.parametrize("head_dim", [8, 16, 64])
def test_espr_commuting_init_with_no_options_is_rope(head_dim):
    """ESPR(head_dim)'s commuting init with P = I is RoPE(head_dim) in the same (default) pairing."""
    q, k = _qk(head_dim)
    pos = torch.arange(N, dtype=torch.float64)[:, None]
    espr = ESPR(head_dim).double()
    assert espr.pairing == "half"
    for a, b in zip(espr(q, k, pos), RoPE(head_dim).double()(q, k, pos)):
        assert _rel(a, b) <= 1e-12


def test_espr_commuting_init_on_the_active_block_is_rope_of_d_act():
    q, k = _qk(16)
    pos = torch.arange(N, dtype=torch.float64)[:, None]
    rq, rk = ESPR(16, d_act=8).double()(q, k, pos)
    eq, ek = RoPE(8).double()(q[..., :8], k[..., :8], pos)
    assert _rel(rq[..., :8], eq) <= 1e-12 and _rel(rk[..., :8], ek) <= 1e-12
    assert rq[..., 8:].abs().max() == 0


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_a_named_pairing_agrees_across_parts(pairing):
    q, k = _qk(16)
    pos = torch.arange(N, dtype=torch.float64)[:, None]
    ref = RoPE(16, pairing=pairing).double()(q, k, pos)
    for part in (STRING(16, pairing=pairing).double(), ESPR(16, pairing=pairing).double()):
        for a, b in zip(part(q, k, pos), ref):
            assert _rel(a, b) <= 1e-12


def test_registry_factories_default_to_half_pairing():
    for name in ("rope", "string", "espr"):
        part = POSITIONAL.build(name, head_dim=16, coord_dim=1, n_heads=2, d_model=32)
        assert part.pairing == "half", name
    inner = POSITIONAL.build("partial", head_dim=16, coord_dim=1, inner="string").inner
    assert inner.pairing == "half"
    with pytest.raises(ValueError, match="pairing"):
        ESPR(16, pairing="rotate")


# ------------------------------------------------------------------------------------------- token positions
def _parts(coord_dim=1):
    torch.manual_seed(0)
    return {
        "rope": RoPE(16, coord_dim),
        "string": STRING(16, coord_dim, init_scale=0.2),
        "circulant_string": CirculantSTRING(16, coord_dim),
        "espr": ESPR(16, coord_dim, commuting_init=False),
        "partial": partial_rotary(16, coord_dim=coord_dim),
        "sinusoidal": SinusoidalPE(16, coord_dim),
        "learned": LearnedPE(16, coord_dim, max_len=N),
    }


def _call(part, q, k, pos, key_pos=None):
    if part.kind == "additive":
        return (part(q[:, 0], pos),)
    return part(q, k, pos) if key_pos is None else part(q, k, pos, key_positions=key_pos)


@pytest.mark.parametrize("name", list(_parts()))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_one_d_token_positions_are_accepted(name, dtype):
    """torch.arange(N) (any integer dtype, or float) gives what the (N, 1) positions give, exactly."""
    part = _parts()[name]
    q, k = (t.float() for t in _qk(16, n=12))
    pos = torch.arange(12, dtype=dtype)
    for a, b in zip(_call(part, q, k, pos), _call(part, q, k, pos[:, None])):
        assert torch.equal(a, b)
    if part.kind == "rotary":  # key positions and the analysis methods too
        kp = torch.arange(12, dtype=dtype) + 3
        for a, b in zip(_call(part, q, k, pos, kp), _call(part, q, k, pos[:, None], kp[:, None])):
            assert torch.equal(a, b)
        assert torch.equal(part.matrix(pos.double()), part.matrix(pos.double()[:, None]))
        assert torch.equal(part.rotate(q, pos), part.rotate(q, pos[:, None]))
        assert torch.equal(part.rotate(q, pos), _call(part, q, k, pos)[0])  # rotate is forward's rotation


@pytest.mark.parametrize("name", list(_parts()))
def test_one_d_positions_for_two_coordinates_name_positions(name):
    part = _parts(2)[name]
    q, k = (t.float() for t in _qk(16, n=12))
    with pytest.raises(ValueError, match=r"positions: got 'a 1-D tensor of shape \(12,\)'.*coord_dim 1"):
        _call(part, q, k, torch.arange(12))
    if part.kind == "rotary":
        with pytest.raises(ValueError, match="key_positions"):
            _call(part, q, k, torch.zeros(12, 2), torch.arange(12))


def test_batched_two_d_token_positions_say_how_to_pass_them():
    """(B, N) is ambiguous with (N, C): refused, with the fix in the message."""
    q, k = _qk(16, n=12)
    with pytest.raises(ValueError, match=r"positions.*\(2, 12\).*positions\[\.\.\., None\]"):
        RoPE(16).double()(q, k, torch.arange(12).expand(2, 12))
    out = RoPE(16).double()(q, k, torch.arange(12).expand(2, 12)[..., None])
    assert torch.equal(out[0], RoPE(16).double()(q, k, torch.arange(12))[0])


# ------------------------------------------------------------------------------------------- recorded runs
def test_experiments_with_recorded_runs_keep_the_interleaved_pairing():
    """results/ (espr, extrapolation, teleport) were recorded with STRING / ESPR in the interleaved pairing, their
    default then: the builders name it so the runs reproduce."""
    from symformer.experiments import extrapolation
    from symformer.experiments.espr import ood as espr_ood
    from symformer.experiments.teleport import exactness as teleport_exactness
    from symformer.experiments.teleport import runs as teleport_runs
    from symformer.models import ViTClassifier, attention_layers
    from symformer.models.lm import CausalLM

    cfg = extrapolation.ExtrapolationConfig()
    for part in ("string", "espr"):
        lm = extrapolation.build_lm(part, cfg, 16)
        assert all(a.rotary.pairing == "interleaved" for a in attention_layers(lm)), part
    for arm in espr_ood.ARMS[2:]:  # string, espr_pen1, espr_free
        model = ViTClassifier(espr_ood.arm_config(arm, espr_ood.OODConfig()), 4, 10)
        assert all(a.rotary.pairing == "interleaved" for a in attention_layers(model)), arm
    for kind in ("string", "espr"):
        assert all(a.rotary.pairing == "interleaved" for a in attention_layers(teleport_exactness._tiny_model(kind))), (
            kind
        )
    assert teleport_runs.recorded_pairing("string") == {"pairing": "interleaved"}
    assert teleport_runs.recorded_pairing("rope") == {}
    assert isinstance(lm, CausalLM)
