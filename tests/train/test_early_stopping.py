"""Early stopping (Informer's protocol: patience on validation MSE, best weights restored for the test)
and Informer's lradj 'type1' schedule."""

from __future__ import annotations

import pytest
import torch

from symformer.data.base import TensorData
from symformer.train import Callback, TrainConfig, Trainer, lr_factor
from symformer.train.callbacks import EarlyStopping
from symformer.train.tasks import Task


class ScriptedVal(Task):
    """MSE loss on a linear regression; evaluate() returns a scripted validation value per call on `val`."""

    primary = "mse"

    def __init__(self, val_data, script):
        self.val_data, self.script, self.calls = val_data, list(script), 0

    def loss(self, model, data, idx):
        return ((model(data.x[idx]) - data.y[idx]) ** 2).mean()

    @torch.no_grad()
    def evaluate(self, model, data, batch_size=512):
        if data is self.val_data:
            v = self.script[min(self.calls, len(self.script) - 1)]
            self.calls += 1
            return {"mse": v}
        return {"mse": float(((model(data.x) - data.y) ** 2).mean())}


class Snapshots(Callback):
    def __init__(self):
        self.states = []

    def on_epoch_end(self, trainer, epoch, metrics):
        self.states.append({k: v.clone() for k, v in trainer.raw_model.state_dict().items()})


def _fit(script, patience, epochs=8):
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    train, val = TensorData(x, x @ torch.tensor([[1.0], [2.0], [-1.0]])), TensorData(x[:8], x[:8, :1])
    model = torch.nn.Linear(3, 1)
    snaps = Snapshots()
    cfg = TrainConfig(epochs=epochs, batch_size=16, lr=0.05, schedule="constant", patience=patience)
    tr = Trainer(model, ScriptedVal(val, script), train, val, cfg, callbacks=[snaps])
    tr.fit()
    return tr, model, snaps


def test_stops_after_patience_and_restores_the_best_epoch():
    tr, model, snaps = _fit([3.0, 1.0, 2.0, 2.5, 2.0, 0.5], patience=3)
    assert tr.state.epoch == 5  # best at epoch 1, then 3 epochs without improvement
    es = tr.callbacks[-1]
    assert isinstance(es, EarlyStopping) and es.best_epoch == 1 and es.best == 1.0
    for k, v in model.state_dict().items():
        assert torch.equal(v, snaps.states[1][k])  # the weights of epoch 1, not of the last epoch
    assert not torch.equal(snaps.states[1]["weight"], snaps.states[-1]["weight"])


def test_without_patience_trains_all_epochs_and_keeps_last_weights():
    tr, model, snaps = _fit([3.0, 1.0, 2.0, 2.5, 2.0], patience=None, epochs=5)
    assert tr.state.epoch == 5 and torch.equal(model.weight, snaps.states[-1]["weight"])


def test_informer_schedule_halves_after_the_second_epoch():
    cfg = TrainConfig(schedule="informer", decay_gamma=0.5)
    assert [lr_factor(cfg, e * 10, 100, 10) for e in range(5)] == [1.0, 1.0, 0.5, 0.25, 0.125]


def test_bad_patience():
    with pytest.raises(ValueError, match="patience"):
        TrainConfig(patience=0)
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(0)
