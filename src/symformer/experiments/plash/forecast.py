"""ETTh1 forecasting for the `plash` experiment: Informer with only its attention swapped (plash-attention.txt,
"Task and benchmark protocol"), trained with Informer's recipe (Sec. 4 defers to it; the details are
Informer's reference implementation's): per-horizon lengths, Adam lr 1e-4 halved every epoch after the first two
(lradj type1), batch 32, up to 6 epochs, early stopping with patience 3 on validation MSE and the best weights
restored for the test."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer.data import load_ett
from symformer.experiments.base import RunContext
from symformer.experiments.plash.plan import ForecastPlan, method_kwargs
from symformer.models.informer import Informer, InformerConfig
from symformer.runner.devices import tensor_data_on
from symformer.runner.jobs import Job, JobFunction
from symformer.train import Trainer
from symformer.train.callbacks import Elapsed
from symformer.train.presets import informer_lengths
from symformer.train.tasks import Forecasting
from symformer.train.trainer import TrainConfig

#: steps between checkpoints of a job with a work_dir: often enough that a killed PLASH horizon-168 job loses little
#: of its work, rarely enough that saving costs little beside training
CHECKPOINT_STEPS = 20
_SPLITS: dict = {}


def forecast_job(
    ctx: RunContext, method: str, pred_len: int, seed: int, plan: ForecastPlan, attention_kwargs: dict | None = None
) -> Job:
    """One (method, horizon, seed) forecasting run of `plan`, trained on ctx.device."""
    akw = method_kwargs(method, ctx.quick) if attention_kwargs is None else attention_kwargs
    return Job(
        plan.run_key(method, pred_len, seed, akw),
        FORECAST.on(ctx.device),
        dict(
            data_dir=None if ctx.data_dir is None else str(ctx.data_dir),
            attention=method,
            attention_kwargs=akw,
            pred_len=pred_len,
            seed=seed,
            size=plan.size,
            epochs=plan.epochs,
            patience=plan.patience,
            lr=plan.lr,
            train_windows=plan.train_windows,
            val_windows=plan.val_windows,
        ),
        checkpoints=True,
    )


def _split(data_dir: str | None, pred_len: int):
    key = (pred_len, str(data_dir))
    if key not in _SPLITS:  # one load per horizon and worker
        _SPLITS.clear()
        seq, lab = informer_lengths(pred_len)
        _SPLITS[key] = load_ett(
            seq_len=seq, label_len=lab, pred_len=pred_len, data_dir=None if data_dir is None else Path(data_dir)
        )
    return _SPLITS[key]


def _subset(data, n: int | None, seed: int | None):
    """n windows of `data`: random (seeded) when seed is given, else evenly spaced; time marks kept."""
    if n is None or n >= len(data):
        return data
    if seed is None:
        idx = torch.linspace(0, len(data) - 1, n).long()
    else:
        idx = torch.randperm(len(data), generator=seeded_generator(seed))[:n].sort().values
    sub = data.subset(idx)
    sub.x_time, sub.y_time = data.x_time[idx], data.y_time[idx]
    return sub


def forecast(
    data_dir: str | None,
    attention: str,
    attention_kwargs: dict,
    pred_len: int,
    seed: int,
    size: dict,
    epochs: int,
    patience: int,
    lr: float,
    train_windows: int | None = None,
    val_windows: int | None = None,
    work_dir: str | None = None,
    device: str = "cpu",
) -> dict:
    """One Informer training run on ETTh1 on `device` -> test MSE/MAE at the best validation epoch, and its history.
    With `work_dir` it checkpoints there every CHECKPOINT_STEPS steps and continues from the checkpoint it finds
    (Trainer's exact resume: the result is the uninterrupted run's, bit for bit); `seconds` then sums the parts."""
    t0 = time.perf_counter()
    split = _split(data_dir, pred_len)
    seed_torch(seed)
    cfg = InformerConfig(**size, attention=attention, attention_kwargs=attention_kwargs)
    model = Informer(cfg, split.meta["n_vars"], split.meta["seq_len"], split.meta["label_len"], pred_len).to(device)
    tcfg = TrainConfig(
        epochs=epochs,
        batch_size=32,
        optimizer="adamw",
        weight_decay=0.0,
        lr=lr,
        schedule="informer",
        decay_gamma=0.5,
        grad_clip=None,
        seed=seed,
        patience=patience,
        eval_batch_size=128,
        checkpoint_every=CHECKPOINT_STEPS if work_dir else 0,
    )
    train = tensor_data_on(_subset(split.train, train_windows, seed), device)
    val = tensor_data_on(_subset(split.val, val_windows, None), device)
    clock = Elapsed()
    trainer = Trainer(
        model,
        Forecasting(pred_len),
        train,
        val,
        tcfg,
        test=tensor_data_on(split.test, device),
        callbacks=[clock],
        out_dir=work_dir,
    )
    final = trainer.fit(resume=work_dir is not None)
    es = trainer.callbacks[-1]
    return {
        "test_mse": final["test_mse"],
        "test_mae": final["test_mae"],
        "val_mse": final["val_mse"],
        "best_epoch": es.best_epoch,
        "epochs_run": trainer.state.epoch,
        "history": [[r["epoch"], r["train_loss"], r.get("val_mse")] for r in trainer.state.history],
        "seconds": clock.before + time.perf_counter() - t0,
    }


# the name the recorded runs carry (results/plash/runs); --resume matches records by it, whatever module holds
# forecast
FORECAST = JobFunction(forecast, "symformer.experiments.plash_forecast.forecast")
