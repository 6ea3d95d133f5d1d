"""ETTh1 forecasting for the `plash` experiment: Informer with only its attention swapped (plash-attention.txt,
"Task and benchmark protocol"), trained with Informer's recipe (NOTES.md section 5): per-horizon lengths,
Adam lr 1e-4 halved every epoch after the first two (lradj type1), batch 32, up to 6 epochs, early stopping
with patience 3 on validation MSE and the best weights restored for the test."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from symformer.experiments.base import RunContext
from symformer.experiments.jobs import Job

# Table 1, ETTh1 (MSE, MAE) averaged over the horizons.
PAPER_ETTH1 = {
    "softmax (Vanilla)": (0.5553, 0.5480),
    "favor (Performer)": (0.5065, 0.5192),
    "plash M=64 D=128": (0.5747, 0.5585),
    "plash best M=256 D=512": (0.4553, 0.4960),
}
HORIZONS = (24, 48, 168, 336, 720)
RECORDED_HORIZONS = (24, 48, 168)
#: quick size: small enough that three 24-step Informers train and test in ~2 minutes on one busy core
QUICK_SIZE = {"d_model": 32, "n_heads": 2, "e_layers": 2, "d_layers": 1, "d_ff": 64}
#: per-method attention options; FAVOR+ has no attention matrix, so its attention dropout is 0 (explicit)
METHOD_KWARGS = {"softmax": {}, "favor": {"dropout": 0.0}, "plash": {"M": 64, "D_k": 128}}
QUICK_PLASH = {"M": 16, "D_k": 32}
#: steps between checkpoints of a job with a work_dir (about 2 minutes of a PLASH horizon-168 run on one core)
CHECKPOINT_STEPS = 20
_SPLITS: dict = {}


def protocol(ctx: RunContext) -> dict:
    """The forecasting setting of this run: sizes, horizons, seeds, budget (JSON, goes into every Job)."""
    from symformer.models.informer import PAPER_SIZE, SMALL_SIZE

    full_size = bool(ctx.extra.get("full", False))  # `reproduce --full`: the paper's Informer size
    size = PAPER_SIZE if full_size else (QUICK_SIZE if ctx.quick else SMALL_SIZE)
    return {
        "size": dict(size),
        "horizons": (24,) if ctx.quick else RECORDED_HORIZONS,
        "seeds": (ctx.seed,) if ctx.quick else tuple(ctx.seed + i for i in range(3)),
        "epochs": ctx.options.get("quick_epochs", 3) if ctx.quick else 6,
        "patience": 3,
        "lr": 1e-4,
        # quick: a fixed random 1/8 of the training windows per run and 512 evenly spaced validation
        # windows for early stopping; the test set is always complete
        "train_windows": ctx.options.get("quick_train_windows", 1024) if ctx.quick else None,
        "val_windows": 512 if ctx.quick else None,
    }


def method_kwargs(method: str, quick: bool) -> dict:
    return dict(QUICK_PLASH) if (method == "plash" and quick) else dict(METHOD_KWARGS[method])


def forecast_job(
    ctx: RunContext, method: str, pred_len: int, seed: int, proto: dict, attention_kwargs: dict | None = None
) -> Job:
    akw = method_kwargs(method, ctx.quick) if attention_kwargs is None else attention_kwargs
    tag = "_".join(f"{k}{v}" for k, v in sorted(akw.items()) if k != "dropout")
    size = proto["size"]
    key = (
        f"etth1_informer_{method}{'_' + tag if tag else ''}_h{pred_len}_s{seed}_d{size['d_model']}"
        f"_e{proto['epochs']}" + ("_quick" if proto["train_windows"] else "")
    )
    return Job(
        key,
        forecast,
        dict(
            data_dir=None if ctx.data_dir is None else str(ctx.data_dir),
            attention=method,
            attention_kwargs=akw,
            pred_len=pred_len,
            seed=seed,
            size=size,
            epochs=proto["epochs"],
            patience=proto["patience"],
            lr=proto["lr"],
            train_windows=proto["train_windows"],
            val_windows=proto["val_windows"],
        ),
        checkpoints=True,
    )


def _split(data_dir: str | None, pred_len: int):
    from symformer.data import load_ett
    from symformer.train.presets import informer_lengths

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
        idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:n].sort().values
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
) -> dict:
    """One Informer training run on ETTh1 -> test MSE/MAE at the best validation epoch, and its history.
    With `work_dir` it checkpoints there every CHECKPOINT_STEPS steps and continues from the checkpoint it finds
    (Trainer's exact resume: the result is the uninterrupted run's, bit for bit); `seconds` then sums the parts."""
    from symformer.models.informer import Informer, InformerConfig
    from symformer.train import Trainer
    from symformer.train.callbacks import Elapsed
    from symformer.train.tasks import Forecasting
    from symformer.train.trainer import TrainConfig

    t0 = time.perf_counter()
    split = _split(data_dir, pred_len)
    torch.manual_seed(seed)
    cfg = InformerConfig(**size, attention=attention, attention_kwargs=attention_kwargs)
    model = Informer(cfg, split.meta["n_vars"], split.meta["seq_len"], split.meta["label_len"], pred_len)
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
    train = _subset(split.train, train_windows, seed)
    val = _subset(split.val, val_windows, None)
    clock = Elapsed()
    trainer = Trainer(
        model, Forecasting(pred_len), train, val, tcfg, test=split.test, callbacks=[clock], out_dir=work_dir
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
