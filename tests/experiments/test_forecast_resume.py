"""A forecasting job killed part-way and resumed from its work_dir gives the uninterrupted run's result, bit for
bit (Trainer's exact resume under plash.forecast.forecast), for each attention the recorded run trains."""

import pytest

from symformer.experiments.plash import forecast as plash_forecast
from symformer.experiments.plash.plan import QUICK_SIZE, method_kwargs
from symformer.train.trainer import Trainer


class Killed(Exception):
    pass


def _run(data_dir, method, work_dir=None):
    return plash_forecast.forecast(
        str(data_dir),
        method,
        method_kwargs(method, True),
        pred_len=24,
        seed=3,
        size=QUICK_SIZE,
        epochs=2,
        patience=3,
        lr=1e-3,
        train_windows=160,
        val_windows=64,
        work_dir=None if work_dir is None else str(work_dir),
    )


# softmax in the fast suite (the Trainer's exact resume; tests/train/test_trainer.py has its own); the linear cores'
# cases (their random features and parameters in the checkpoint) take ~3x as long and run with --runslow
SLOW = pytest.mark.slow


@pytest.mark.parametrize("method", ["softmax", pytest.param("favor", marks=SLOW), pytest.param("plash", marks=SLOW)])
def test_killed_and_resumed_forecast_equals_uninterrupted(data_dir, tmp_path, monkeypatch, method):
    plain = _run(data_dir, method)
    monkeypatch.setattr(plash_forecast, "CHECKPOINT_STEPS", 3)  # 5 steps per epoch: checkpoints at steps 3, 5, 6, 9, 10
    step = Trainer.train_step
    calls = {"n": 0}

    def dies_at_step_8(self, idx):
        calls["n"] += 1
        if calls["n"] == 8:  # mid second epoch, two steps after the checkpoint at step 6
            raise Killed
        return step(self, idx)

    monkeypatch.setattr(Trainer, "train_step", dies_at_step_8)
    with pytest.raises(Killed):
        _run(data_dir, method, tmp_path)
    assert (tmp_path / "checkpoint.pt").exists()
    resumed = _run(data_dir, method, tmp_path)
    assert calls["n"] == 8 + 4  # the resumed part ran steps 7..10 only: it went on from the checkpoint at step 6
    for key in ("test_mse", "test_mae", "val_mse", "best_epoch", "epochs_run", "history"):
        assert resumed[key] == plain[key], key
    assert resumed["seconds"] > 0
