"""Teleportation of 16-bit models (issue 40 item 4): the group action is computed in float32 from the bfloat16 weights
and written back once, so a teleported bfloat16 model computes the same function within bfloat16 rounding.

Bounds, and why:
  * one rounding per weight: the teleported bfloat16 weights equal the float64 action on the same bfloat16 weights
    rounded once to bfloat16 exactly on >= 99% of the entries, and everywhere to 1 bfloat16 ulp plus 2^-20 of the
    tensor's largest entry (float32 arithmetic then rounding is a double rounding, one ulp off near a tie; an entry
    that cancels to far below its inputs carries the float32 error of the inputs' scale, 16 float32 ulps here). A
    product in 16 bits would round every factor and be off on a large share of the entries;
  * invariance within rounding: the teleported bfloat16 model's logits L1 carry two independent weight roundings (the
    cast of the float32 weights to bfloat16, then the write-back of g theta); the bfloat16 model cast from the
    float32-teleported weights (L_rr) and the un-teleported bfloat16 model (L0) carry one each. Independent rounding
    errors add in quadrature, so rms(L1 - L32) <= 2 sqrt(rms(L_rr - L32')^2 + rms(L0 - L32)^2), with L32 and L32' the
    float32 model's logits before and after its own teleport (so the right side holds rounding only, and an element
    outside the group fails the bound); the factor 2 is slack for the spread of an rms over ~100 logits (30 draws
    gave at most 1.46).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tests.teleport._models import KINDS, batch, tiny_model

from symformer.teleport import symmetry_group, update_optimizer_state

BF16 = torch.bfloat16


def _kinds():
    return list(KINDS)


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())


def check_one_rounding(m16, element, group_of) -> None:
    """group_of(m16).transformed(element) against the float64 action on a float64 copy of the same bfloat16 weights,
    rounded once to bfloat16."""
    m64 = copy.deepcopy(m16).to(torch.float64)
    new16, new64 = group_of(m16).transformed(element), group_of(m64).transformed(element)
    p64 = dict(m64.named_parameters())
    n = 0
    for name, p in m16.named_parameters():
        if id(p) not in new16:
            continue
        n += 1
        a, b = new16[id(p)], new64[id(p64[name])].to(BF16)
        assert a.dtype == BF16 and a.shape == p.shape, name
        _assert_rounded_once(a, b, name)
    assert n > 0


def _assert_rounded_once(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    """a (bfloat16) against b = round_bf16(float64 reference): the bounds of the module docstring."""
    a, b = a.detach().double(), b.detach().double()
    off = (a - b).abs()
    ulp = 2.0**-7 * torch.maximum(a.abs(), b.abs())
    assert bool((off <= ulp + 2.0**-20 * float(b.abs().max())).all()), (name, float((off / ulp).max()))
    assert float((off > 0).double().mean()) <= 0.01, (name, float((off > 0).double().mean()))


def logit_ratio(m32, element, group_of, run) -> float:
    """rms(L1 - L32) / sqrt(rms(L_rr - L32)^2 + rms(L0 - L32)^2) (module docstring); teleports m32 in place."""
    m16 = copy.deepcopy(m32).to(BF16)
    l32, l0 = run(m32), run(m16)
    group_of(m16).apply(m16, element)
    l1 = run(m16)
    group_of(m32).apply(m32, element)
    l_rr = run(copy.deepcopy(m32).to(BF16))
    return _rms(l1 - l32) / math.hypot(_rms(l_rr - run(m32)), _rms(l0 - l32))


def _vit_run(seed):
    x, pos, _ = batch(seed, b=32)

    def run(m):
        w = next(m.parameters())
        with torch.no_grad():
            return m(x.to(device=w.device, dtype=w.dtype), pos.float().to(w.device)).double()

    return run


def _group(m):
    return symmetry_group(m, ffn=True)


@pytest.mark.parametrize("kind", _kinds())
def test_bf16_action_rounds_each_weight_once(kind, device):
    m16 = tiny_model(kind).to(torch.float32).to(device=device, dtype=BF16)
    check_one_rounding(m16, _group(m16).random(torch.Generator().manual_seed(0)), _group)


@pytest.mark.parametrize("kind", _kinds())
@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_teleport_keeps_logits_within_rounding(kind, seed, device):
    m32 = tiny_model(kind, seed=seed).to(device=device, dtype=torch.float32)
    element = _group(m32).random(torch.Generator().manual_seed(seed))
    assert logit_ratio(m32, element, _group, _vit_run(seed)) <= 2.0


def test_the_bound_fails_for_an_element_outside_the_group():
    """A general GL element on a RoPE model is not a symmetry: the same bound then fails by far."""
    m32 = tiny_model("rope-half").to(torch.float32)
    gl = symmetry_group(tiny_model("none"), ffn=True)  # GL(d_h) on Q/K: breaks the relative rotations
    element = gl.random(torch.Generator().manual_seed(0))
    assert logit_ratio(m32, element, _group, _vit_run(0)) > 10


def test_bf16_adam_state_transform_rounds_once():
    """The optimizer-state transform of a bfloat16 model: first moments rounded once from the float64 image; second
    moments (A sqrt(v))^2 likewise, and non-negative."""
    m16 = tiny_model("rope-half").to(torch.float32).to(BF16)
    x, pos, y = batch()
    opt = torch.optim.AdamW(m16.parameters(), lr=1e-3)
    torch.nn.functional.cross_entropy(m16(x.to(BF16), pos.float()).float(), y).backward()
    opt.step()
    G = _group(m16)
    g = G.pick(G.sample(1, 0.5, torch.Generator().manual_seed(3)), 0)
    ps = G.parameters()
    st64 = {key: {id(p): opt.state[p][key].double() for p in ps} for key in ("exp_avg", "exp_avg_sq")}
    want = {
        "exp_avg": G.grad_action(g, st64["exp_avg"]),
        "exp_avg_sq": {
            k: t.pow(2) for k, t in G.grad_action(g, {k: v.sqrt() for k, v in st64["exp_avg_sq"].items()}).items()
        },
    }
    update_optimizer_state(opt, G, g, "transform")
    for key in ("exp_avg", "exp_avg_sq"):
        for p in ps:
            a, b = opt.state[p][key], want[key][id(p)].to(BF16)
            assert a.dtype == BF16
            _assert_rounded_once(a, b, key)
    assert all(bool((opt.state[p]["exp_avg_sq"] >= 0).all()) for p in ps)


def test_bf16_teleport_step_applies_without_invariance_skips(device):
    """Alg. 1 on a bfloat16 model: the closed-form norms come from the bfloat16 gradient (in float64), the chosen
    element is applied and passes the runtime loss check."""
    from symformer.teleport import teleport_step

    m16 = tiny_model("rope-half", mlp="relu").to(torch.float32).to(device=device, dtype=BF16)
    x, pos, y = (t.to(device) for t in batch())
    G = _group(m16)

    def loss_fn():
        return torch.nn.functional.cross_entropy(m16(x.to(BF16), pos.float()).float(), y)

    loss_fn().backward()
    before = [p.detach().clone() for p in G.parameters()]
    out = teleport_step(m16, G, loss_fn, alpha=0.5, samples=16, gen=torch.Generator().manual_seed(0), ffn=True)
    assert out.skipped_invariance == 0
    if out.applied:
        assert any(not torch.equal(p, b) for p, b in zip(G.parameters(), before, strict=True))
        assert all(p.dtype == BF16 and p.grad.dtype == BF16 for p in G.parameters())


# ---------------------------------------------------------------- Hugging Face models (integrations.hf.teleport)
HF_FAMILIES = ["llama", "qwen3", "gpt_neox", "mixtral"]  # plain GQA, q/k norms, fused QKV + partial rotary, MoE


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_hf_bf16_teleport(family, device):
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    from tests.integrations._hf_models import ids, tiny

    from symformer.integrations.hf.teleport import register_hf_groups

    register_hf_groups()  # symmetry_group (here _group) then builds the HF families' groups

    m32 = tiny(family, torch.float32).to(device)
    x = ids(batch=4, n=16).to(device)

    def run(m):
        with torch.no_grad():
            return m(x).logits.double()

    m16 = copy.deepcopy(m32).to(BF16)
    element = _group(m32).random(torch.Generator().manual_seed(0))
    check_one_rounding(m16, element, _group)
    assert logit_ratio(m32, element, _group, run) <= 2.0


@pytest.mark.parametrize("route", ["cast", "autocast"])
def test_hf_plain_loop_teleports_in_bf16(route, device, recwarn):
    """HFTeleport on a bfloat16 Llama (cast) and on a float32 one trained under autocast (compute_dtype): the
    scheduled teleports are applied and none is refused by the runtime invariance check."""
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    from tests.integrations._hf_models import lm_loss, tiny

    from symformer.integrations import hf

    model = tiny("llama", BF16 if route == "cast" else torch.float32).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_fn(m, x):
        with torch.autocast(device, dtype=BF16, enabled=route == "autocast"):
            return lm_loss(m, x)

    tele = hf.HFTeleport(
        model,
        opt,
        loss_fn,
        total_steps=4,
        start_step=1,
        steps=2,
        samples=8,
        alpha=0.3,
        state_policy="transform",
        compute_dtype=BF16 if route == "autocast" else None,
    )
    data = torch.randint(0, 40, (4, 4, 13), generator=torch.Generator().manual_seed(0)).to(device)
    for i in range(4):
        loss = loss_fn(model, data[i])
        loss.backward()
        tele.after_backward(i, data[i], loss)
        opt.step()
        opt.zero_grad()
    assert len(tele.log) == 2 and all(r["applied"] and r["skipped"] == 0 for r in tele.log), tele.log
    assert {p.dtype for p in model.parameters()} == {BF16 if route == "cast" else torch.float32}
    assert not [w for w in recwarn if "teleport: skipped" in str(w.message)]
