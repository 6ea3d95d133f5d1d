import json

import pytest
import torch

from symformer.data import load_digits_patches
from symformer.models import TransformerConfig, ViTClassifier
from symformer.train import Callback, Classification, TrainConfig, Trainer, lr_factor
from symformer.train.checkpoint import load


def _setup(seed=0, n=256, **tkw):
    s = load_digits_patches()
    train = s.train.subset(torch.arange(n))
    torch.manual_seed(seed)
    model = ViTClassifier(TransformerConfig(d_model=16, n_heads=2, n_layers=1, dropout=0.1, coord_dim=2), 4, 10)
    cfg = TrainConfig(epochs=3, batch_size=32, lr=3e-3, warmup_steps=5, seed=seed, **tkw)
    return model, train, s.val.subset(torch.arange(64)), cfg


class Kill(Callback):
    """Simulates a crash (the process dying) after `at` steps."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, trainer, loss):
        if trainer.state.step == self.at:
            raise KeyboardInterrupt


def test_resume_is_bit_exact(tmp_path):
    model, train, val, cfg = _setup(checkpoint_every=5)
    ref = Trainer(model, Classification(), train, val, cfg, out_dir=tmp_path / "ref")
    ref.fit()
    # interrupted run: dies after 13 steps (last checkpoint at 10, mid-epoch 2), then resumes
    model2, *_ = _setup(checkpoint_every=5)
    t = Trainer(model2, Classification(), train, val, cfg, callbacks=[Kill(13)], out_dir=tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        t.fit()
    assert load(tmp_path / "run" / "checkpoint.pt")["state"]["step"] == 10
    torch.manual_seed(123)  # a fresh process would have other RNG state: resume must restore it
    model3 = ViTClassifier(TransformerConfig(d_model=16, n_heads=2, n_layers=1, dropout=0.1, coord_dim=2), 4, 10)
    t2 = Trainer(model3, Classification(), train, val, cfg, out_dir=tmp_path / "run")
    t2.fit(resume=True)
    for (n, a), (_, b) in zip(ref.raw_model.state_dict().items(), t2.raw_model.state_dict().items()):
        assert torch.equal(a, b), n
    assert ref.state.history == t2.state.history
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == ref.state.history


def test_resume_without_a_checkpoint_is_a_fresh_seeded_run(tmp_path):
    """fit(resume=True) with nothing to resume from trains exactly what fit() trains (a job that checkpoints
    calls it unconditionally on its first start)."""
    model, train, val, cfg = _setup()
    ref = Trainer(model, Classification(), train, val, cfg)
    ref.fit()
    model2, *_ = _setup()
    torch.manual_seed(123)  # other global RNG state before fit: the fresh start must seed it
    t = Trainer(model2, Classification(), train, val, cfg, out_dir=tmp_path)
    t.fit(resume=True)
    assert ref.state.history == t.state.history
    for (n, a), (_, b) in zip(ref.raw_model.state_dict().items(), t.raw_model.state_dict().items()):
        assert torch.equal(a, b), n


def test_schedules():
    cfg = TrainConfig(epochs=2, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(cfg, 0, 100, 50) == pytest.approx(0.1)
    assert lr_factor(cfg, 9, 100, 50) == pytest.approx(1.0)
    assert lr_factor(cfg, 100, 100, 50) == pytest.approx(0.1)
    exp = TrainConfig(schedule="exponential", decay_gamma=0.5)
    assert lr_factor(exp, 120, 1000, 50) == pytest.approx(0.25)


def test_bad_config():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=0.0)
    model, train, val, _ = _setup()
    with pytest.raises(ValueError, match="batch_size"):
        Trainer(model, Classification(), train, val, TrainConfig(batch_size=10_000))


def test_sgd_learns_and_clips():
    model, train, val, _ = _setup()
    cfg = TrainConfig(epochs=4, batch_size=32, optimizer="sgd", lr=0.05, momentum=0.9, grad_clip=0.5)
    t = Trainer(model, Classification(), train, val, cfg)
    t.fit()
    assert t.state.history[-1]["train_loss"] < t.state.history[0]["train_loss"]
