"""Alg. 1: majority rule, runtime invariance check, optimizer-state policies, schedule, callback, Zhao."""

from __future__ import annotations

import warnings

import pytest
import torch
from tests.teleport._models import batch, setup, tiny_model
from torch import nn

import symformer.teleport.step as T
from symformer.data.base import TensorData
from symformer.registry import CALLBACKS
from symformer.teleport import (
    TeleportCallback,
    TeleportSchedule,
    teleport_step,
    update_optimizer_state,
    zhao_teleport,
)
from symformer.train import TrainConfig, Trainer
from symformer.train.tasks import Classification


def params(m):
    return [p.detach().clone() for p in m.parameters()]


@pytest.mark.parametrize("n_better, applied", [(8, False), (9, True)])
def test_majority_rule(monkeypatch, n_better, applied):
    """eq. (16): teleport only if MORE than M/2 candidates raise the norm; then take the argmax."""
    m, G, loss_fn = setup()
    ref = T.grad_sq_norm(m, G) ** 0.5
    norms = torch.full((16,), 0.5 * ref, dtype=torch.float64)
    norms[:n_better] = ref * (1 + torch.arange(1, n_better + 1, dtype=torch.float64) / 100)
    monkeypatch.setattr(T, "closed_form_norms", lambda *a: norms)
    picked = []
    orig = G.pick
    monkeypatch.setattr(G, "pick", lambda c, i: picked.append(i) or orig(c, i))
    before = params(m)
    out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(0))
    assert out.applied is applied and out.n_better == n_better
    changed = any(float((a - b.detach()).abs().max()) > 0 for a, b in zip(before, m.parameters(), strict=True))
    assert changed is applied
    if applied:
        assert picked == [n_better - 1]


def test_teleport_step_keeps_loss_and_sets_new_gradient():
    m, G, loss_fn = setup("rope-half")
    l0 = float(loss_fn().detach())
    out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(1))
    assert out.applied and out.best_norm > out.ref_norm
    assert abs(float(loss_fn().detach()) - l0) <= 1e-12
    fresh = torch.autograd.grad(loss_fn(), list(m.parameters()))
    for p, g in zip(m.parameters(), fresh, strict=True):
        assert float((p.grad - g).abs().max()) <= 1e-10
    assert abs(T.grad_sq_norm(m, G) ** 0.5 - out.best_norm) <= 1e-10 * out.best_norm


def test_runtime_check_skips_an_element_that_changes_the_loss(monkeypatch):
    m, G, loss_fn = setup("rope-interleaved")
    orig = G.transformed

    def broken(g):  # a "symmetry" that is not one: also rescales the classifier head
        out = orig(g)
        out[id(m.head.weight)] = m.head.weight * 1.5
        return out

    monkeypatch.setattr(G, "transformed", broken)
    monkeypatch.setattr(G, "parameters", lambda: list(type(G).parameters(G)) + [m.head.weight])
    monkeypatch.setattr(T, "closed_form_norms", lambda *a: torch.full((16,), 1e3, dtype=torch.float64))
    before = params(m)
    with pytest.warns(RuntimeWarning, match="teleport: skipped"):
        out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(1))
    assert not out.applied and out.skipped_invariance >= 1
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, m.parameters(), strict=True))


def _sgd_after_one_step(kind="rope-interleaved"):
    m, G, loss_fn = setup(kind)
    opt = torch.optim.SGD(m.parameters(), lr=0.0, momentum=0.9)  # lr 0: buffer = grad, params unchanged
    opt.step()
    return m, G, loss_fn, opt


def test_state_policy_keep_reset_transform():
    gen = torch.Generator().manual_seed(2)
    # keep: untouched
    m, G, loss_fn, opt = _sgd_after_one_step()
    old = {id(p): opt.state[p]["momentum_buffer"].clone() for p in m.parameters()}
    g = G.pick(G.sample(1, 0.5, gen), 0)
    update_optimizer_state(opt, G, g, "keep")
    assert all(torch.equal(opt.state[p]["momentum_buffer"], old[id(p)]) for p in m.parameters())
    # reset: zero for acted-on params only
    update_optimizer_state(opt, G, g, "reset")
    acted = {id(p) for p in G.parameters()}
    for p in m.parameters():
        buf = opt.state[p]["momentum_buffer"]
        assert (float(buf.abs().max()) == 0) == (id(p) in acted) or float(old[id(p)].abs().max()) == 0
    # transform: buffer (= grad at theta) becomes exactly grad at g theta
    m, G, loss_fn, opt = _sgd_after_one_step("string")
    update_optimizer_state(opt, G, g := G.pick(G.sample(1, 0.5, gen), 0), "transform")
    G.apply(m, g)
    fresh = torch.autograd.grad(loss_fn(), G.parameters())
    for p, t in zip(G.parameters(), fresh, strict=True):
        assert float((opt.state[p]["momentum_buffer"] - t).abs().max()) <= 1e-10


def test_state_policy_transform_adam_moments():
    m, G, loss_fn = setup("none")
    opt = torch.optim.AdamW(m.parameters(), lr=0.0)
    opt.step()
    g = G.pick(G.sample(1, 0.5, torch.Generator().manual_seed(3)), 0)  # diagonal: the squared map is exact
    update_optimizer_state(opt, G, g, "transform")
    G.apply(m, g)
    fresh = torch.autograd.grad(loss_fn(), G.parameters())
    for p, t in zip(G.parameters(), fresh, strict=True):
        st = opt.state[p]
        assert float((st["exp_avg"] - 0.1 * t).abs().max()) <= 1e-12
        assert float((st["exp_avg_sq"] - 0.001 * t**2).abs().max()) <= 1e-12
    with pytest.raises(ValueError, match="state_policy"):
        update_optimizer_state(opt, G, g, "momentum")


def test_zhao_gradient_ascent_raises_the_norm_and_keeps_the_loss():
    m, G, loss_fn = setup("rope-half")
    l0 = float(loss_fn().detach())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = zhao_teleport(m, G, loss_fn, lr=1e-2, steps=3)
    assert out.applied and out.best_norm > out.ref_norm
    assert abs(float(loss_fn().detach()) - l0) <= 1e-12


def test_schedule():
    s = TeleportSchedule(epochs=(1, 3), consecutive=4)
    assert s.starts(10) == [0, 20]
    assert [t for t in range(40) if s.contains(t, 10)] == [0, 1, 2, 3, 20, 21, 22, 23]
    assert TeleportSchedule(epochs=(), step=7, consecutive=2).starts(10) == [7]
    s.validate(40, 10, 4)
    with pytest.raises(ValueError, match="epoch"):
        s.validate(20, 10, 2)
    with pytest.raises(ValueError, match="step"):
        TeleportSchedule(epochs=(), step=39, consecutive=4).validate(40, 10, 4)
    with pytest.raises(ValueError, match="steps"):
        TeleportSchedule(consecutive=0)


def test_callback_bad_inputs():
    m = tiny_model("none")
    for kw, name in (
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"samples": 0}, "samples"),
        ({"method": "foo"}, "method"),
        ({"colour": 1}, "teleport option"),
        ({"steps": 0}, "steps"),
        ({"epoch": 0}, "epoch"),
        ({"state_policy": "x"}, "state_policy"),
    ):
        with pytest.raises(ValueError, match=name):
            TeleportCallback(model=m, **kw)
    with pytest.raises(ValueError, match="model"):
        TeleportCallback(model=nn.Linear(2, 2))


def _toy_data(n=48, seed=0):
    x, pos, _ = batch(seed, b=n)
    y = (x[:, :, 0].sum(1) > 0).long()
    return TensorData(x, y, pos)


def test_callback_in_trainer_follows_the_schedule():
    torch.manual_seed(0)
    m = tiny_model("rope-interleaved")
    cb = CALLBACKS.build("teleport", model=m, alpha=0.5, samples=8, epoch=2, steps=3)
    cfg = TrainConfig(epochs=3, batch_size=8, optimizer="sgd", lr=0.05, schedule="constant")
    Trainer(m, Classification(), _toy_data(), None, cfg, callbacks=[cb]).fit()
    assert [r["step"] for r in cb.log] == [6, 7, 8]  # 6 steps per epoch; 1-based epoch 2 starts at step 6
    assert cb.seconds > 0
    state = cb.state_dict()
    cb2 = TeleportCallback(model=m)
    cb2.load_state_dict(state)
    assert cb2.log == cb.log


def test_callback_schedule_beyond_the_run_is_an_error():
    m = tiny_model("none")
    cb = TeleportCallback(model=m, epoch=5, steps=2)
    cfg = TrainConfig(epochs=2, batch_size=8, optimizer="sgd", lr=0.05)
    with pytest.raises(ValueError, match="epoch"):
        Trainer(m, Classification(), _toy_data(), None, cfg, callbacks=[cb]).fit()


def test_cli_option_builds_the_callback():
    """`symformer train --teleport alpha=0.65,samples=16,epoch=1,steps=4` goes through CALLBACKS.build."""
    from symformer.cli import parse_kv

    kv = parse_kv("alpha=0.65,samples=16,epoch=1,steps=4", "--teleport")
    cb = CALLBACKS.build("teleport", model=tiny_model("rope-half"), **kv)
    assert isinstance(cb, TeleportCallback)
    tp = cb.teleporter
    assert (tp.alpha, tp.samples, tp.schedule.epochs, tp.schedule.consecutive) == (0.65, 16, (1,), 4)
    with pytest.raises(ValueError, match="alpha"):
        CALLBACKS.build("teleport", model=tiny_model("none"), **parse_kv("alpha=1.2", "--teleport"))


def test_callback_with_learned_espr_and_penalty_teleports_without_skips():
    """Group refreshed from the current ESPR parameters; the positional penalty (in the trainer's loss) is
    invariant, so the run-time check must not reject the elements."""
    from symformer.models import attention_layers
    from symformer.positional import ESPR

    m = tiny_model("none").float()
    for a in attention_layers(m):
        a.rotary = ESPR(head_dim=8, coord_dim=2, commuting_init=False, init_scale=0.3, eps_comm_penalty=0.1)
    data = _toy_data()
    data = TensorData(data.x.float(), data.y, data.pos.float())
    cb = TeleportCallback(model=m, alpha=0.5, samples=8, epoch=1, steps=3)
    cfg = TrainConfig(epochs=1, batch_size=8, optimizer="sgd", lr=0.05, schedule="constant")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        Trainer(m, Classification(), data, None, cfg, callbacks=[cb]).fit()
    assert len(cb.log) == 3 and all(r["skipped"] == 0 for r in cb.log)
