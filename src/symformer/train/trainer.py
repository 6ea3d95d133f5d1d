"""Trainer: loop, schedules, gradient clipping, per-epoch evaluation, JSONL metrics, atomic
checkpoints with exact resume, callbacks, and data parallelism.

Exact resume: the batch order depends only on (seed, epoch); a checkpoint stores model,
optimizer, scheduler, RNG and callback states plus the position (epoch, batch) and the metric
history, so a resumed run replays exactly the remaining steps of an uninterrupted one."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from symformer._rng import check_seed, global_seed, seed_torch
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.data.base import TensorData, epoch_order, n_batches, shard
from symformer.models import penalties
from symformer.train import distributed as D
from symformer.train.callbacks import Callback, EarlyStopping
from symformer.train.checkpoint import (
    FORMAT,
    VERSION,
    CheckpointError,
    check_compatible,
    load_checkpoint,
    rng_state,
    save_atomic,
    set_rng_state,
)
from symformer.train.tasks import Task

#: how a run computes (`--set train.precision=...`):
#:  fp32: float32 weights and arithmetic;
#:  bf16-autocast: float32 weights and optimizer state, forward (and evaluation) under
#:      torch.autocast(device, bfloat16): matmuls in bfloat16, reductions and the loss in float32 (mixed precision);
#:  bf16: the model cast with .to(torch.bfloat16) (weights, gradients and optimizer state in bfloat16; positional
#:      parts keep their float32 masters); inputs are cast by the models, losses computed in float32 (tasks.py).
#: float16 is not offered: without a gradient scaler its gradients underflow.
PRECISIONS = ("fp32", "bf16-autocast", "bf16")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    batch_size: int = 64
    optimizer: str = "adamw"  # sgd (with momentum) | adamw
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "cosine"  # cosine | constant | exponential | informer
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0  # cosine floor as a fraction of lr
    decay_gamma: float = 0.5  # per-epoch factor of the exponential schedule (Informer uses 0.5)
    grad_clip: float | None = 1.0
    seed: int | None = 0  # None: drawn once from torch's global generator by the Trainer (the one seeding rule)
    checkpoint_every: int = 0  # steps; 0 = only at epoch ends
    drop_last: bool = True
    eval_batch_size: int = 512
    max_steps: int | None = None  # stop early after this many steps (smoke runs)
    progress: bool = False
    patience: int | None = None  # early stopping on the validation primary metric; best weights restored
    precision: str = "fp32"  # fp32 | bf16-autocast | bf16 (see PRECISIONS)

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, 1)
        check_int("batch_size", self.batch_size, 1)
        check_choice("optimizer", self.optimizer, ("sgd", "adamw"))
        check_choice("schedule", self.schedule, ("cosine", "constant", "exponential", "informer"))
        check_choice("precision", self.precision, PRECISIONS)
        if self.patience is not None:
            check_int("patience", self.patience, 1)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_int("warmup_steps", self.warmup_steps, 0)
        check_int("checkpoint_every", self.checkpoint_every, 0)
        check_float("momentum", self.momentum, 0.0, 1.0)
        check_float("weight_decay", self.weight_decay, 0.0)
        check_float("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_float("decay_gamma", self.decay_gamma, 0.0, 1.0, low_open=True)
        if self.grad_clip is not None:
            check_float("grad_clip", self.grad_clip, 0.0)
        check_seed(self.seed)
        check_int("eval_batch_size", self.eval_batch_size, 1)
        if self.max_steps is not None:
            check_int("max_steps", self.max_steps, 1)
        for name in ("drop_last", "progress"):
            if not isinstance(getattr(self, name), bool):
                fail(name, getattr(self, name), "true or false", TypeError)


def seed_everything(seed: int | None) -> None:
    """Seed Python's, NumPy's and torch's global generators; None leaves them as they are."""
    if check_seed(seed) is None:
        return
    random.seed(seed)
    np.random.seed(seed % 2**32)
    seed_torch(seed)


def make_optimizer(cfg: TrainConfig, params) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def lr_factor(cfg: TrainConfig, step: int, total: int, steps_per_epoch: int) -> float:
    """Linear warmup then cosine to min_lr_ratio, constant, or exponential decay per epoch."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "exponential":
        return cfg.decay_gamma ** (step // max(steps_per_epoch, 1))
    if cfg.schedule == "informer":
        # Informer's lradj 'type1' (utils/tools.py): after epoch e (1-based) lr = lr0 * 0.5^(e-1), so epochs
        # 1 and 2 run at lr0 and each later epoch halves it
        return cfg.decay_gamma ** max(step // max(steps_per_epoch, 1) - 1, 0)
    t = (step - cfg.warmup_steps) / max(total - cfg.warmup_steps, 1)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))


@dataclass
class TrainState:
    epoch: int = 0
    batch: int = 0  # next batch index within `epoch`
    step: int = 0  # optimizer steps taken
    history: list[dict[str, Any]] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)  # losses of the unfinished epoch


# TrainConfig fields that do not change the trajectory, so a resumed run may change them
_RESUME_FREE = ("progress", "checkpoint_every", "eval_batch_size")


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        task: Task,
        train: TensorData,
        val: TensorData | None,
        cfg: TrainConfig,
        test: TensorData | None = None,
        callbacks: list[Callback] | None = None,
        out_dir: str | Path | None = None,
    ):
        if not isinstance(cfg, TrainConfig):
            fail("cfg", type(cfg).__name__, "a TrainConfig", TypeError)
        # seed None: the run's seed is drawn here, once, from torch's global generator (so torch.manual_seed governs
        # it); the batch order and the checkpoint then hold that integer, and resume() adopts the checkpoint's
        self._seed_given = cfg.seed is not None
        self._resumed = False
        self.cfg, self.task = (cfg if self._seed_given else replace(cfg, seed=global_seed())), task
        self.train_data, self.val_data, self.test_data = train, val, test
        self.callbacks = list(callbacks or [])
        if cfg.patience is not None and val is not None:
            self.callbacks.append(EarlyStopping(cfg.patience, f"val_{task.primary}", task.higher_is_better))
        self.stop_training = False  # a callback (early stopping) sets it at an epoch end
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.rank, self.world = D.world()
        if cfg.batch_size % self.world:
            fail("batch_size", cfg.batch_size, f"a multiple of the world size {self.world}")
        if cfg.precision == "bf16":  # before the optimizer, so that its state is made for the bfloat16 weights
            model = model.to(torch.bfloat16)
        self.raw_model = model
        self.model = D.wrap(model)
        self.optimizer = make_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
        self.steps_per_epoch = n_batches(train, cfg.batch_size, cfg.drop_last)
        if self.steps_per_epoch == 0:
            fail("batch_size", cfg.batch_size, f"at most the {len(train)} training samples (drop_last)")
        self.total_steps = cfg.epochs * self.steps_per_epoch
        if cfg.max_steps is not None:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(cfg, s, cfg.epochs * self.steps_per_epoch, self.steps_per_epoch)
        )
        self.state = TrainState()
        self.epoch_seconds: list[float] = []

    # ---------------------------------------------------------------- checkpoints
    @property
    def ckpt_path(self) -> Path | None:
        return None if self.out_dir is None else self.out_dir / "checkpoint.pt"

    def checkpoint(self) -> None:
        if self.ckpt_path is None or not D.is_main():
            return
        # only tensors, numbers, strings and plain containers: the file loads with weights_only=True
        save_atomic(
            {
                "format": FORMAT,
                "version": VERSION,
                "model": self.raw_model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "state": asdict(self.state),
                "rng": rng_state(),
                "callbacks": [cb.state_dict() for cb in self.callbacks],
                "config": asdict(self.cfg),
            },
            self.ckpt_path,
        )

    def resume(self) -> bool:
        """Load the checkpoint in out_dir if there is one; True when training state was restored.
        A file that is not a safe symformer checkpoint of this model and config raises CheckpointError."""
        if self.ckpt_path is None or not self.ckpt_path.exists():
            return False
        path = self.ckpt_path
        ck = load_checkpoint(path)
        saved_seed = ck.get("config", {}).get("seed") if isinstance(ck.get("config"), dict) else None
        if not self._seed_given and isinstance(saved_seed, int):  # the drawn seed of the run being resumed
            self.cfg = replace(self.cfg, seed=saved_seed)
        check_compatible(path, ck, self.raw_model, asdict(self.cfg), ignore=_RESUME_FREE)
        try:
            self.raw_model.load_state_dict(ck["model"])
            self.optimizer.load_state_dict(ck["optimizer"])
            self.scheduler.load_state_dict(ck["scheduler"])
            self.state = TrainState(**ck["state"])
            set_rng_state(ck["rng"])
            for cb, st in zip(self.callbacks, ck["callbacks"]):
                cb.load_state_dict(st)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckpointError(
                f"{path} is not a usable symformer checkpoint ({type(e).__name__}: {first})"
            ) from None
        self._rewrite_log()
        self._resumed = True  # fit(resume=True) after an explicit resume() does not load the checkpoint again
        return True

    # ---------------------------------------------------------------- logging
    def _log(self, row: dict[str, Any]) -> None:
        self.state.history.append(row)
        if self.out_dir is not None and D.is_main():
            self.out_dir.mkdir(parents=True, exist_ok=True)
            with open(self.out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")

    def _rewrite_log(self) -> None:
        if self.out_dir is not None and D.is_main():
            text = "".join(json.dumps(r) + "\n" for r in self.state.history)
            (self.out_dir / "metrics.jsonl").write_text(text)

    # ---------------------------------------------------------------- loop
    def _batch_indices(self, epoch: int, b: int) -> torch.Tensor:
        if getattr(self, "_order", (None,))[0] != epoch:  # one permutation per epoch, not per step
            self._order = (epoch, epoch_order(len(self.train_data), self.cfg.seed, epoch))
        bs = self.cfg.batch_size
        return shard(self._order[1][b * bs : (b + 1) * bs], self.rank, self.world)

    def train_step(self, idx: torch.Tensor) -> float:
        self.model.train()
        for cb in self.callbacks:
            cb.on_batch_start(self, idx)
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.task.loss(self.model, self.train_data, idx) + penalties(self.raw_model)
        loss.backward()
        self.last_loss = loss.detach()  # the batch loss, for callbacks (teleport checks invariance against it)
        for cb in self.callbacks:
            cb.on_after_backward(self, idx)
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        value = float(loss.detach())
        for cb in self.callbacks:
            cb.on_step_end(self, value)
        return value

    def evaluate(self, data: TensorData | None) -> dict[str, float]:
        if data is None:
            return {}
        self.model.eval()
        with self.autocast():
            return self.task.evaluate(self.raw_model, data, self.cfg.eval_batch_size)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the forward computes in (what a loss comparison must tolerate: teleport's invariance check)."""
        return torch.float32 if self.cfg.precision == "fp32" else torch.bfloat16

    def autocast(self):
        """The context the forward runs in: torch.autocast to bfloat16 for precision bf16-autocast, else a no-op."""
        device = next(self.raw_model.parameters()).device.type
        return torch.autocast(device, dtype=torch.bfloat16, enabled=self.cfg.precision == "bf16-autocast")

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train, then evaluate on val and test. `resume`: continue from out_dir's checkpoint when there is one;
        without one the run starts afresh, exactly as fit() would (seeded, old metrics.jsonl removed)."""
        if not (resume and (self._resumed or self.resume())):
            seed_everything(self.cfg.seed)
            if self.out_dir is not None and D.is_main() and (self.out_dir / "metrics.jsonl").exists():
                (self.out_dir / "metrics.jsonl").unlink()
        for cb in self.callbacks:
            cb.on_train_start(self)
        bar = None
        if self.cfg.progress and D.is_main():
            import sys

            from tqdm import tqdm

            bar = tqdm(
                total=self.total_steps,
                initial=self.state.step,
                desc="train",
                leave=False,
                disable=not sys.stderr.isatty(),
            )
        while self.state.epoch < self.cfg.epochs and self.state.step < self.total_steps and not self.stop_training:
            self._run_epoch(bar)
        if bar is not None:
            bar.close()
        for cb in self.callbacks:
            cb.on_train_end(self)
        final = {f"val_{k}": v for k, v in self.evaluate(self.val_data).items()}
        final.update({f"test_{k}": v for k, v in self.evaluate(self.test_data).items()})
        return final

    def _run_epoch(self, bar) -> None:
        epoch = self.state.epoch
        if self.state.batch == 0:
            for cb in self.callbacks:
                cb.on_epoch_start(self, epoch)
        t0, losses = time.perf_counter(), self.state.epoch_losses
        while self.state.batch < self.steps_per_epoch and self.state.step < self.total_steps:
            losses.append(self.train_step(self._batch_indices(epoch, self.state.batch)))
            self.state.batch += 1
            if bar is not None:
                bar.update(1)
            if self.cfg.checkpoint_every and self.state.step % self.cfg.checkpoint_every == 0:
                self.checkpoint()
        self.epoch_seconds.append(time.perf_counter() - t0)
        row = {
            "epoch": epoch,
            "step": self.state.step,
            "lr": self.optimizer.param_groups[0]["lr"],
            "train_loss": float(np.mean(losses)) if losses else None,
        }
        row.update({f"val_{k}": v for k, v in self.evaluate(self.val_data).items()})
        self.state.epoch, self.state.batch, self.state.epoch_losses = epoch + 1, 0, []
        self._log(row)
        for cb in self.callbacks:
            cb.on_epoch_end(self, epoch, row)
        self.checkpoint()
