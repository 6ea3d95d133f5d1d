"""Forecaster rows of the `attention` suite: built from the etth1-informer preset; fixed ratio names
(no timing asserts: the timers are replaced by constants here)."""

from __future__ import annotations

import pytest

from symformer.attention.favor import FavorAttention
from symformer.attention.plash import PlashAttention
from symformer.benchmarks import attention_forecast as af
from symformer.benchmarks._attention_common import CONTRIBUTIONS
from symformer.benchmarks.base import BenchContext


def test_models_come_from_the_preset():
    model, _, split, tcfg = af.build_forecaster("plash", af.METHODS["plash"])
    cores = [m for m in model.modules() if isinstance(m, PlashAttention)]
    assert cores and all(c.M == 64 and c.D_k == (128, 128) for c in cores)
    assert split.meta["pred_len"] == 24 and tcfg.batch_size > 0
    model, *_ = af.build_forecaster("favor", af.METHODS["favor"])
    assert all(m.n_features == 256 for m in model.modules() if isinstance(m, FavorAttention))


def test_ratio_names(monkeypatch, tmp_path):
    assert af.forecast_rows in CONTRIBUTIONS
    monkeypatch.setattr(af, "_step_times", lambda ctx, reps: {"softmax": 1.0, "plash": 2.5, "favor": 1.2})
    monkeypatch.setattr(af, "_run_time", lambda m, ctx: {"softmax": 10.0, "plash": 28.0}[m])
    monkeypatch.setattr(af, "_plash_stage_shares", lambda ctx, reps: [{"stage": "mixer", "share_of_core": 1.0}])
    monkeypatch.setattr(af, "_step_flops", lambda ctx: {"softmax": 2.0, "plash": 20.0, "favor": 5.0})
    rows, ratios = af.forecast_rows(BenchContext(out_dir=tmp_path))
    assert ratios["plash_forecast_step_flops_vs_softmax_h24"] == pytest.approx(10.0)
    assert ratios["favor_forecast_step_flops_vs_softmax_h24"] == pytest.approx(2.5)
    assert ratios["plash_forecast_step_vs_softmax_h24"] == pytest.approx(2.5)
    assert ratios["favor_forecast_step_vs_softmax_h24"] == pytest.approx(1.2)
    assert ratios["plash_forecast_run_vs_softmax_h24"] == pytest.approx(2.8)
    assert {r.get("part") for r in rows} >= {"forecast train step", "forecast run"}


def test_quick_run_evaluation_windows_keep_calendar_features():
    """The quick run evaluates on a subset of windows; Informer needs their x_time / y_time (it crashed
    with 'x_time: got None' when the subset dropped them)."""
    tr = af._trainer("softmax", 0, eval_windows=3)
    for data in (tr.val_data, tr.test_data):
        assert len(data) == 3 and data.x_time.shape[0] == 3 and data.y_time.shape[0] == 3
    assert set(tr.evaluate(tr.val_data)) and all(v == v for v in tr.evaluate(tr.test_data).values())


def test_step_flops_are_counted_for_every_method(tmp_path):
    """FlopCounterMode sees the whole training step (forward and backward) of each forecaster: PLASH's mixer
    and sketches and FAVOR+'s m = 256 features against N ~ 100 tokens cost more arithmetic than softmax."""
    flops = af._step_flops(BenchContext(out_dir=tmp_path))
    assert set(flops) == set(af.METHODS)
    assert 0 < flops["softmax"] < flops["favor"] < flops["plash"]
