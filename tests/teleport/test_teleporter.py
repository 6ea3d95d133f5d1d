"""The Teleporter on its own (issue 43 item 3): a hand-written loop drives it with one call per optimizer step, no
Trainer; its schedule, guard, log and state are those the callback and the plain loop report. Group builders for
other libraries' models are registered explicitly (register_group_builder), never on import."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.teleport._models import batch, tiny_model
from torch import nn

from symformer.teleport import (
    SymmetryGroup,
    TeleportCallback,
    Teleporter,
    group_builders,
    register_group_builder,
    symmetry_group,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "symformer"


def _loop(tele: Teleporter, steps: int = 6):
    """SGD with momentum on a float64 ViT; after each teleport the loss is kept and .grad is the gradient at g theta."""
    model = tiny_model("rope-half")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, pos, y = batch(b=8)
    tele.start(total_steps=steps, steps_per_epoch=3)
    for i in range(steps):

        def loss_fn(shift=0.01 * i):  # a different batch each step
            return nn.functional.cross_entropy(model(x + shift, pos), y)

        loss = loss_fn()
        loss.backward()
        rec = tele.step(model, opt, i, loss_fn, loss=loss.item())
        if rec is not None and rec["applied"]:
            params = [p for p in model.parameters() if p.grad is not None]
            fresh = torch.autograd.grad(loss_fn(), params)
            assert abs(loss_fn().item() - loss.item()) <= 1e-12 * loss.item()
            scale = max(float(g.abs().max()) for g in fresh)
            assert max(float((p.grad - g).abs().max()) for p, g in zip(params, fresh, strict=True)) <= 1e-10 * scale
        opt.step()
        opt.zero_grad()
    return model


def test_teleporter_in_a_hand_written_loop():
    tele = Teleporter(alpha=0.3, samples=8, start_step=1, every=3, steps=2, state_policy="transform")
    _loop(tele)
    assert [r["step"] for r in tele.log] == [1, 2, 4, 5]
    assert [r["phase_start"] for r in tele.log] == [1, 1, 4, 4]
    assert any(r["applied"] for r in tele.log) and not any(r["skipped"] for r in tele.log)
    assert all(r["cum_ratio"] <= 1.05 + 1e-12 for r in tele.log) and tele.seconds > 0
    # the state a resumed run needs: generator, log, guard
    other = Teleporter(alpha=0.3, samples=8, start_step=1, every=3, steps=2)
    other.load_state_dict(tele.state_dict())
    assert other.log == tele.log and (other._phase, other._cum) == (tele._phase, tele._cum)
    assert torch.equal(other.gen.get_state(), tele.gen.get_state())


def test_teleporter_draws_what_the_callback_draws():
    """The same seed gives the same candidates: TeleportCallback is only an adapter (its generator is the
    Teleporter's)."""
    m = tiny_model("rope-half")
    cb, tele = TeleportCallback(model=m, seed=4), Teleporter(m, seed=4)
    a = cb.group.sample(3, 0.5, cb.teleporter.gen)
    b = tele.group.sample(3, 0.5, tele.gen)
    assert all(torch.equal(u, v) for u, v in zip(a.qk + a.vo, b.qk + b.vo, strict=True))


def test_teleporter_bad_use():
    m = tiny_model("none")
    tele = Teleporter(m)
    with pytest.raises(ValueError, match=r"^Teleporter: got 'not started', expected start\(total_steps"):
        tele.step(m, None, 0, lambda: torch.zeros(()))
    with pytest.raises(ValueError, match="^steps: got 4, expected at most the 3 steps of one epoch"):
        tele.start(total_steps=9, steps_per_epoch=3)
    with pytest.raises(TypeError, match="^group: got 'str', expected a teleport SymmetryGroup"):
        Teleporter(group="qk")
    with pytest.raises(ValueError, match="^teleport option: got \\['colour'\\]"):
        Teleporter(colour=1)
    tele = Teleporter(m, steps=1, start_step=2)
    tele.start(total_steps=4, steps_per_epoch=4)
    assert tele.step(m, None, 0, lambda: torch.zeros(())) is None and tele.log == []  # not a teleport step


class _Foreign(nn.Module):
    """A model of 'another library': a symformer ViT inside, which the registered builder knows how to find."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "inner", tiny_model("rope-half"))  # not a submodule: symformer cannot find it


def _build_foreign(model, positions, ffn):
    return symmetry_group(model.inner, positions, ffn=ffn) if isinstance(model, _Foreign) else None


def test_group_builders_are_registered_explicitly():
    saved = group_builders()
    try:
        with pytest.raises(ValueError, match="model: got '_Foreign'"):  # nothing registered for it
            symmetry_group(_Foreign())
        register_group_builder("foreign", _build_foreign)
        group = symmetry_group(_Foreign())
        assert isinstance(group, SymmetryGroup) and len(group.sites) == 2
        assert len(symmetry_group(tiny_model("none")).sites) == 2  # a builder answering None is passed over
        with pytest.raises(TypeError, match="^builder: got 'int'"):
            register_group_builder("bad", 3)
    finally:
        from symformer.teleport import groups

        groups._BUILDERS.clear()
        groups._BUILDERS.update(saved)


def test_nothing_fakes_a_trainer_and_nothing_registers_on_import():
    hits = [
        f"{p.relative_to(SRC)}: {word}"
        for p in SRC.rglob("*.py")
        for word in ("SimpleNamespace", "EXTERNAL_BUILDERS")
        if word in p.read_text()
    ]
    assert not hits
