"""Per-layer FAVOR+ feature draws and their redraw every N steps through a Trainer callback."""

from __future__ import annotations

import pytest
import torch

from symformer._rng import derived_seed
from symformer.data.base import TensorData
from symformer.models import CausalLM, TransformerConfig
from symformer.registry import CALLBACKS
from symformer.train import LanguageModeling, TrainConfig, Trainer
from symformer.train.callbacks import FeatureRedraw, LearningCurve, feature_modules


def _setup(steps=6):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=2, positional="rope", attention="favor", attention_kwargs={"n_features": 8}
    )
    model = CausalLM(cfg, 11)
    x = torch.randint(0, 11, (64, 9))
    data = TensorData(x[:, :-1], x[:, 1:])
    tcfg = TrainConfig(epochs=1, batch_size=8, lr=1e-3, max_steps=steps, seed=0)
    return model, data, tcfg


def test_layers_get_distinct_features_and_redraw_every_n_steps():
    model, data, tcfg = _setup()
    mods = feature_modules(model)
    # each layer draws its own seed from the global generator (models.layers.MultiHeadAttention); a callback given
    # a seed restarts layer i from derived_seed("layer<i>", seed) (_rng.layer_kwargs)
    assert len(mods) == 2 and not torch.equal(mods[0].features, mods[1].features)
    seen = []

    class Spy(FeatureRedraw):
        def on_step_end(self, trainer, loss):
            super().on_step_end(trainer, loss)
            seen.append(mods[0].features.clone())

    cb = Spy(model, every=2, seed=3)
    Trainer(model, LanguageModeling(), data, None, tcfg, callbacks=[cb]).fit()
    assert not torch.equal(mods[0].features, mods[1].features)
    assert [int(m.seed) for m in mods] == [derived_seed("layer0", 3), derived_seed("layer1", 3)]
    assert cb.redraws == 3 and int(mods[0].draws) == 3
    # features change exactly after steps 2, 4, 6
    changed = [not torch.equal(a, b) for a, b in zip(seen, seen[1:])]
    assert changed == [True, False, True, False, True]


def test_redraw_is_deterministic_and_fixed_without_every():
    runs = []
    for _ in range(2):
        model, data, tcfg = _setup()
        Trainer(model, LanguageModeling(), data, None, tcfg, callbacks=[FeatureRedraw(model, 2, 1)]).fit()
        runs.append(feature_modules(model)[1].features.clone())
    assert torch.equal(runs[0], runs[1])
    model, data, tcfg = _setup()
    cb = FeatureRedraw(model, None, 1)
    Trainer(model, LanguageModeling(), data, None, tcfg, callbacks=[cb]).fit()
    assert cb.redraws == 0 and int(feature_modules(model)[0].draws) == 0


def test_resumed_run_keeps_its_features():
    model, _, _ = _setup()
    cb = FeatureRedraw(model, 2)
    cb.load_state_dict({"seeded": True, "redraws": 1})
    before = feature_modules(model)[0].features.clone()
    cb.on_train_start(None)
    assert torch.equal(before, feature_modules(model)[0].features)


def test_registered_and_validated():
    model, _, _ = _setup()
    assert isinstance(CALLBACKS.build("redraw", model=model, every=5), FeatureRedraw)
    with pytest.raises(ValueError, match="every"):
        FeatureRedraw(model, 0)
    with pytest.raises(TypeError, match="seed"):
        FeatureRedraw(model, 2, seed=1.5)


def test_without_a_seed_the_layers_keep_the_builders_draws():
    """seed=None: the callback does not reseed; each layer keeps the seed the model builder gave it."""
    model, data, tcfg = _setup()
    mods = feature_modules(model)
    before = [int(m.seed) for m in mods]
    Trainer(model, LanguageModeling(), data, None, tcfg, callbacks=[FeatureRedraw(model, None)]).fit()
    assert [int(m.seed) for m in mods] == before and len(set(before)) == 2


def test_learning_curve_points():
    model, data, tcfg = _setup(steps=5)
    lc = LearningCurve(data.subset(torch.arange(8)), 2)
    Trainer(model, LanguageModeling(), data, None, tcfg, callbacks=[lc]).fit()
    assert [s for s, _ in lc.points] == [2, 4, 5] and all("bpc" in m for _, m in lc.points)
