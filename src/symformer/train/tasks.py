"""What a model learns: loss on a batch of indices and evaluation metrics on a split.

Losses and metrics are computed from float32 outputs (`.float()`): a 16-bit model's logits are cast up before the
log-sum-exp over the classes / vocabulary and the squared errors, which 16 bits would round (as HF computes its
losses)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from symformer.data.base import TensorData


class Task:
    """loss(model, data, idx) -> scalar; evaluate(model, data) -> {metric: value}."""

    primary = "loss"
    higher_is_better = False

    def loss(self, model, data: TensorData, idx: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, model, data: TensorData, batch_size: int = 512) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError


class Classification(Task):
    primary = "accuracy"
    higher_is_better = True

    def loss(self, model, data, idx):
        return F.cross_entropy(model(data.x[idx], data.pos).float(), data.y[idx])

    @torch.no_grad()
    def evaluate(self, model, data, batch_size=512):
        correct, total, loss = 0, 0, 0.0
        for i in range(0, len(data), batch_size):
            logits = model(data.x[i : i + batch_size], data.pos).float()
            y = data.y[i : i + batch_size]
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            total += len(y)
        return {"accuracy": correct / total, "loss": loss / total}


class LanguageModeling(Task):
    primary = "bpc"

    def loss(self, model, data, idx):
        # packed rows carry their documents (data.text.packed_rows); targets -100 (padding, ends of documents) are
        # ignored, cross_entropy's default
        kw = {} if getattr(data, "segments", None) is None else {"segment_ids": data.segments[idx]}
        logits = model(data.x[idx], **kw).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data.y[idx].reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def evaluate(self, model, data, batch_size=128):
        tot, n = 0.0, 0
        for i in range(0, len(data), batch_size):
            logits = model(data.x[i : i + batch_size]).float()
            y = data.y[i : i + batch_size]
            tot += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
            n += y.numel()
        nats = tot / n
        return {"loss": nats, "bpc": nats / math.log(2)}


class Forecasting(Task):
    primary = "mse"

    def __init__(self, pred_len: int):
        self.pred_len = pred_len

    def _pred(self, model, data, idx):
        xt = getattr(data, "x_time", None)
        yt = getattr(data, "y_time", None)
        return model(data.x[idx], None if xt is None else xt[idx], None if yt is None else yt[idx]).float()

    def loss(self, model, data, idx):
        return F.mse_loss(self._pred(model, data, idx), data.y[idx][:, -self.pred_len :])

    @torch.no_grad()
    def evaluate(self, model, data, batch_size=256):
        se, ae, n = 0.0, 0.0, 0
        for i in range(0, len(data), batch_size):
            idx = torch.arange(i, min(i + batch_size, len(data)))
            p = self._pred(model, data, idx)
            t = data.y[idx][:, -self.pred_len :]
            se += float(((p - t) ** 2).sum())
            ae += float((p - t).abs().sum())
            n += t.numel()
        return {"mse": se / n, "mae": ae / n}
