"""Training harness: Trainer, tasks, callbacks, checkpoints, data parallelism, presets."""

from __future__ import annotations

from symformer.train.callbacks import Callback
from symformer.train.checkpoint import CheckpointError, load, load_checkpoint, save_atomic
from symformer.train.tasks import Classification, Forecasting, LanguageModeling, Task
from symformer.train.trainer import TrainConfig, Trainer, TrainState, lr_factor, seed_everything

__all__ = [
    "Callback",
    "Trainer",
    "TrainConfig",
    "TrainState",
    "Task",
    "Classification",
    "LanguageModeling",
    "Forecasting",
    "save_atomic",
    "load",
    "load_checkpoint",
    "CheckpointError",
    "lr_factor",
    "seed_everything",
]
