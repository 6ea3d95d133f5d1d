"""The ratio guard of App. G: bound, forced rejection, recorded values, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from tests.teleport._models import batch, setup, tiny_model

import symformer.teleport.step as T
from symformer.data.base import TensorData
from symformer.teleport import TeleportCallback, TeleportSchedule, teleport_step
from symformer.train import TrainConfig, Trainer
from symformer.train.callbacks import Callback
from symformer.train.tasks import Classification


def _fake_norms(monkeypatch, ref, ratios):
    norms = torch.tensor(ratios, dtype=torch.float64) * ref
    monkeypatch.setattr(T, "closed_form_norms", lambda *a: norms)
    return norms


def test_guard_refuses_every_candidate_above_the_bound(monkeypatch):
    """Forced rejection: all 16 candidates beat the reference by > 5%, so none may be applied."""
    m, G, loss_fn = setup()
    ref = T.grad_sq_norm(m, G) ** 0.5
    _fake_norms(monkeypatch, ref, [1.10 + 0.01 * i for i in range(16)])
    before = [p.detach().clone() for p in m.parameters()]
    out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(0), max_ratio=1.05)
    assert not out.applied and out.rejected_by_guard
    assert out.n_better == 16 and out.skipped_guard == 16
    assert out.chosen_norm == out.ref_norm and out.max_norm == pytest.approx(1.25 * ref)
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, m.parameters(), strict=True))
    # the same candidates without the guard: the paper's rule applies the largest
    out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(0))
    assert out.applied and not out.rejected_by_guard and out.chosen_norm == pytest.approx(1.25 * ref)


def test_guard_takes_the_largest_candidate_within_the_bound(monkeypatch):
    m, G, loss_fn = setup()
    ref = T.grad_sq_norm(m, G) ** 0.5
    _fake_norms(monkeypatch, ref, [1.2, 1.04, 1.3, 1.01, 1.03] + [1.5] * 6 + [0.9] * 5)  # 11 of 16 beat it
    out = teleport_step(m, G, loss_fn, 0.65, 16, torch.Generator().manual_seed(0), max_ratio=1.035)
    assert out.applied and out.n_better == 11 and out.skipped_guard == 9  # 1.5 x6, 1.3, 1.2, 1.04 refused
    assert out.chosen_norm == pytest.approx(1.03 * ref)


def _toy_data(n=48, seed=0):
    x, pos, _ = batch(seed, b=n)
    y = (x[:, :, 0].sum(1) > 0).long()
    return TensorData(x, y, pos)


class NormProbe(Callback):
    """||grad|| over all parameters at on_after_backward (placed before / after the teleport callback)."""

    def __init__(self):
        self.norms: dict[int, float] = {}

    def on_after_backward(self, trainer, idx) -> None:
        sq = sum(float(p.grad.pow(2).sum()) for p in trainer.raw_model.parameters() if p.grad is not None)
        self.norms[trainer.state.step] = math.sqrt(sq)


def _fit(bound, alpha=0.65, steps=4, epochs=2, epoch=(1, 2)):
    m = tiny_model("rope-interleaved", n_layers=2)
    cb = TeleportCallback(
        model=m, alpha=alpha, samples=16, epoch=list(epoch), steps=steps, seed=3, max_cumulative_ratio=bound
    )
    pre, post = NormProbe(), NormProbe()
    cfg = TrainConfig(epochs=epochs, batch_size=6, optimizer="sgd", lr=0.05, schedule="constant", grad_clip=None)
    tr = Trainer(m, Classification(), _toy_data(), None, cfg, callbacks=[pre, cb, post])
    tr.fit()
    return tr, cb, pre, post


def test_recorded_values_are_right_and_the_bound_holds():
    """Per step: ref norm = ||grad|| before, chosen norm = ||grad|| after, cumulative ratio = product of the
    applied steps' ratios within the run of consecutive steps (reset at each run), <= the bound."""
    tr, cb, pre, post = _fit(1.05, steps=6)
    assert [r["step"] for r in cb.log] == [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13]  # 8 steps per epoch
    for phase in (0, 8):
        cum = 1.0
        for r in (r for r in cb.log if r["phase_start"] == phase):
            assert r["ref_norm"] == pytest.approx(pre.norms[r["step"]], rel=1e-10)
            assert r["chosen_norm"] == pytest.approx(post.norms[r["step"]], rel=1e-10)
            assert 0 <= r["n_better"] <= 16
            if r["applied"]:
                cum *= r["chosen_norm"] / r["ref_norm"]
            else:
                assert r["chosen_norm"] == r["ref_norm"]
            assert r["cum_ratio"] == pytest.approx(cum, rel=1e-12)
            assert r["cum_ratio"] <= 1.05 * (1 + 1e-12)
    # the records are also in the run's metric history
    rows = [h for h in tr.state.history if "teleport" in h]
    assert [h["step"] for h in rows] == [r["step"] for r in cb.log]
    assert all(h["teleport"]["cum_ratio"] == r["cum_ratio"] for h, r in zip(rows, cb.log, strict=True))


def test_a_tight_bound_forces_rejections_that_the_unguarded_run_applies():
    _, guarded, _, _ = _fit(1.0 + 1e-9, steps=4, epochs=1, epoch=(1,))
    assert all(not r["applied"] and r["rejected_by_guard"] for r in guarded.log if r["n_better"] > 8)
    assert any(r["rejected_by_guard"] for r in guarded.log)
    _, free, _, _ = _fit(None, steps=4, epochs=1, epoch=(1,))
    assert not free.teleporter.guarded and not any(r["rejected_by_guard"] for r in free.log)
    applied = [r for r in free.log if r["applied"]]
    assert applied and all(r["chosen_norm"] == r["max_norm"] for r in applied)


def test_guard_state_survives_a_resume_mid_run():
    _, cb, _, _ = _fit(1.05, steps=4, epochs=1, epoch=(1,))
    cb2 = TeleportCallback(model=tiny_model("none"))
    cb2.load_state_dict(cb.state_dict())
    assert (cb2.teleporter._phase, cb2.teleporter._cum, cb2.log) == (cb.teleporter._phase, cb.teleporter._cum, cb.log)


@pytest.mark.parametrize("value", [1.0, 0.5, -2.0])
def test_bound_must_exceed_one(value):
    with pytest.raises(ValueError, match=rf"max_cumulative_ratio: got {value}"):
        TeleportCallback(model=tiny_model("none"), max_cumulative_ratio=value)


def test_bound_type_and_unguarded_spellings():
    with pytest.raises(TypeError, match="max_cumulative_ratio"):
        TeleportCallback(model=tiny_model("none"), max_cumulative_ratio="tight")
    for v in (None, math.inf, "inf", "none"):
        assert not TeleportCallback(model=tiny_model("none"), max_cumulative_ratio=v).teleporter.guarded
    assert TeleportCallback(model=tiny_model("none")).teleporter.max_cumulative_ratio == 1.05  # App. G default


def test_cli_spelling_of_the_unguarded_form():
    from symformer.cli import parse_kv
    from symformer.registry import CALLBACKS

    for text in ("max_cumulative_ratio=null", "max_cumulative_ratio=Infinity"):
        cb = CALLBACKS.build("teleport", model=tiny_model("none"), **parse_kv(text, "--teleport"))
        assert not cb.teleporter.guarded
    cb = CALLBACKS.build("teleport", model=tiny_model("none"), **parse_kv("max_cumulative_ratio=1.02", "--teleport"))
    assert cb.teleporter.max_cumulative_ratio == 1.02


def test_consecutive_steps_longer_than_an_epoch_name_both_numbers():
    with pytest.raises(ValueError, match=r"steps: got 12, expected at most the 10 steps of one epoch"):
        TeleportSchedule(consecutive=12).validate(100, 10, 10)
    m = tiny_model("none")
    cb = TeleportCallback(model=m, steps=9, epoch=1)  # 48 samples / batch 6 = 8 steps per epoch
    cfg = TrainConfig(epochs=3, batch_size=6, optimizer="sgd", lr=0.05)
    with pytest.raises(ValueError, match=r"9 consecutive teleport steps > 8 steps per epoch"):
        Trainer(m, Classification(), _toy_data(), None, cfg, callbacks=[cb]).fit()
