"""The recorded runs of experiment `resolution`: one ViT per (method, seed), trained on digits upsampled to one
grid, then tested on the test split at every grid, with the new grid's own positions and rescaled to the training
range."""

from __future__ import annotations

import copy
import functools
import time

import torch

from symformer._rng import seed_torch
from symformer.data.base import TensorData
from symformer.data.digits import load_digits_images, patchify, upsample
from symformer.experiments.resolution.plan import ResolutionConfig, method_config
from symformer.models.vit import ViTClassifier
from symformer.positional import LearnedPE, grid_positions
from symformer.runner.devices import tensor_data_on
from symformer.runner.jobs import JobFunction
from symformer.train import TrainConfig, Trainer
from symformer.train.tasks import Classification

RESCALES = ("own", "rescaled")


@functools.lru_cache(maxsize=8)
def digits_at(split: str, size: int, patch: int) -> TensorData:
    """The fixed 60/20/20 digits split (seed 0) upsampled to size x size, as patch tokens and (row, col) positions."""
    x, y, idx = load_digits_images(0)
    tokens, pos = patchify(upsample(x[idx[split]], size), patch)
    return TensorData(tokens, y[idx[split]], pos)


def rescaled_learned(model: ViTClassifier, grid: int, train_grid: int) -> ViTClassifier:
    """A copy whose learned tables hold, at row i, the trained table linearly interpolated at i * train / grid:
    the learned-PE counterpart of rescaled positions (rope-vit interpolates its APE table likewise)."""
    out = copy.deepcopy(model)
    pe = next(m for m in out.modules() if isinstance(m, LearnedPE))
    with torch.no_grad():
        t = pe.tables[:, :train_grid]  # (C, train, D): the rows training reached
        p = (torch.arange(grid, dtype=torch.float64) * (train_grid / grid)).clamp(max=train_grid - 1)
        lo = p.floor().long()
        hi = (lo + 1).clamp(max=train_grid - 1)
        w = (p - lo).to(t.dtype)[None, :, None]
        pe.tables = torch.nn.Parameter(t[:, lo] * (1 - w) + t[:, hi] * w)
        pe.max_len = grid
    return out


@torch.no_grad()
def accuracy(model: ViTClassifier, data: TensorData, positions: torch.Tensor, batch: int = 512) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(data), batch):
        logits = model(data.x[i : i + batch], positions)
        correct += int((logits.argmax(-1) == data.y[i : i + batch]).sum())
    return correct / len(data)


def evaluate(model: ViTClassifier, method: str, c: ResolutionConfig, device: str) -> dict:
    """Test accuracy per rescale ("own": the grid's integer positions; "rescaled": scaled to the training range)
    and test image size."""
    out: dict = {r: {} for r in RESCALES}
    for size in c.eval_sizes:
        data = tensor_data_on(digits_at("test", size, c.patch), device)
        g = c.grid(size)
        own = grid_positions(g, device=device)
        out["own"][str(size)] = accuracy(model, data, own)
        if method == "learned":  # integer rows of an interpolated table
            out["rescaled"][str(size)] = accuracy(rescaled_learned(model, g, c.train_grid), data, own)
        else:
            out["rescaled"][str(size)] = accuracy(model, data, grid_positions(g, ref_size=c.train_grid, device=device))
    return out


def vit_job(method: str, seed: int, cfg: dict, device: str = "cpu") -> dict:
    """One recorded run: train at the training grid on `device` (AdamW, 10% warmup then cosine), then test
    accuracy at every grid, both ways; JSON in and out."""
    c = ResolutionConfig.from_dict(cfg)
    train = tensor_data_on(digits_at("train", c.image_size, c.patch), device)
    val = tensor_data_on(digits_at("val", c.image_size, c.patch), device)
    spe = len(train) // c.batch
    tc = TrainConfig(
        epochs=-(-c.steps // spe),
        batch_size=c.batch,
        optimizer="adamw",
        lr=c.lr,
        weight_decay=0.0,
        schedule="cosine",
        warmup_steps=max(1, c.steps // 10),
        grad_clip=1.0,
        seed=seed,
        max_steps=c.steps,
        eval_batch_size=1024,
    )
    seed_torch(seed)
    model = ViTClassifier(method_config(method, c), c.patch * c.patch, 10, n_prefix=c.n_prefix).to(device)
    t0 = time.perf_counter()
    final = Trainer(model, Classification(), train, val, tc).fit()
    train_s = time.perf_counter() - t0
    return {
        "method": method,
        "seed": seed,
        "val_accuracy": final["val_accuracy"],
        "accuracy": evaluate(model, method, c, device),
        "train_seconds": train_s,
        "seconds": time.perf_counter() - t0,
    }


# the name the recorded runs carry (results/resolution/runs); --resume matches records by it
VIT_JOB = JobFunction(vit_job, "symformer.experiments.resolution.vit_job")
