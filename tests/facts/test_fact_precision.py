"""Fact MLPs in 16-bit hosts (issue 40 item 4): a construction stays in its float64 / float32 dtype and a bfloat16
host runs a copy cast once (facts.slot.FactSlot), and that copy decodes the facts as the float64 construction
does.

Tolerance for decoding: with s the scores <out(k), v_j> and e = max |s_bf16 - s_float64| over the values, the
decoded fact can change only where the float64 margin (best - second best score) is below 2 e. So every key whose
margin is above 2 e must decode to the same value, and the bfloat16 accuracy may fall below the float64 one by at most
the share of keys within 2 e (zero for the analytic constructions here, whose margins are a third of the scores;
gradient-descent MLPs leave a few keys within it, and are left out for time).
"""

from __future__ import annotations

import copy

import pytest
import torch

from symformer.facts import build_fact_mlp, make_fact_set, swap_fact_mlp
from symformer.facts.capacity import BuildOptions
from symformer.facts.lm import FactRecallConfig, FactRecallTransformer

BF16 = torch.bfloat16
METHODS = [
    ("bin+jl", {"m": 96}),
    ("bin+jl-sign", {"m": 96}),
    ("cd+jl", {"m": 96}),
    ("lagrangian+jl", {"m": 96}),
    ("naive", {}),
]


@pytest.fixture(scope="module")
def facts():
    return make_fact_set(64, 16, seed=0)


def _host(vocab: int = 10, d: int = 16) -> FactRecallTransformer:
    torch.manual_seed(0)
    return FactRecallTransformer(FactRecallConfig(vocab_size=vocab, d_model=d), torch.randn(vocab, d))


def _build(fs, method, kw):
    return build_fact_mlp(fs.keys, fs.values, fs.facts, method, options=BuildOptions(decoder_steps=300), **kw)


def _same_params(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("order", ["swap_then_cast", "cast_then_swap"])
def test_construction_is_cast_once_and_kept(facts, order):
    mlp = _build(facts, "bin+jl", {"m": 96})
    keep = copy.deepcopy(mlp)
    host = _host()
    if order == "swap_then_cast":
        swap_fact_mlp(host, mlp)
        host = host.to(BF16)
    else:
        swap_fact_mlp(host.to(BF16), mlp)
    slot = host.fact.mlp
    assert slot is not mlp and slot.dtype == BF16
    assert _same_params(slot, copy.deepcopy(keep).to(BF16))  # one rounding from float64, not via float32
    assert mlp.dtype == torch.float64 and _same_params(mlp, keep)  # the caller's construction is untouched
    assert "fact.host_probe" not in host.state_dict()


def test_float32_host_runs_the_construction_as_it_is(facts):
    mlp = _build(facts, "bin+jl", {"m": 96})
    host = _host()
    swap_fact_mlp(host, mlp)
    assert host.fact.mlp is mlp and mlp.dtype == torch.float64


def test_a_construction_needing_float32_stays_float32_in_a_bf16_host(facts):
    """The central-difference encoder cancels below bfloat16 rounding: cast to bfloat16 it decodes at chance."""
    mlp = _build(facts, "cd+jl", {"m": 96})
    host = _host().to(BF16)
    swap_fact_mlp(host, mlp)
    assert host.fact.mlp.dtype == torch.float32
    naive = copy.deepcopy(mlp).to(BF16)  # what a plain cast does
    s = naive(facts.keys.to(BF16)).double() @ facts.values.double().T
    assert float((s.argmax(1) == facts.facts).double().mean()) < 0.5


@pytest.mark.parametrize("method,kw", METHODS)
def test_bf16_host_decodes_as_float64(facts, method, kw, device):
    mlp = _build(facts, method, kw)
    host = _host().to(device=device, dtype=BF16)
    swap_fact_mlp(host, mlp)
    v = facts.values.double()
    with torch.no_grad():
        s64 = mlp(facts.keys.to(mlp.dtype)).double() @ v.T
        out = host.fact(facts.keys.to(device=device, dtype=BF16)).cpu()  # the host's activations are bfloat16
        assert out.dtype == BF16
        s16 = out.double() @ v.T
    err = float((s16 - s64).abs().max())
    top = s64.topk(2, dim=1).values
    decided = (top[:, 0] - top[:, 1]) > 2 * err  # keys decided beyond rounding (module docstring)
    assert torch.equal(s16.argmax(1)[decided], s64.argmax(1)[decided])
    acc16, acc64 = ((s.argmax(1) == facts.facts).double().mean() for s in (s16, s64))
    assert float(acc16) >= float(acc64) - float((~decided).double().mean())
    assert float(acc64) == 1.0 and bool(decided.all())  # analytic constructions: every key beyond rounding
