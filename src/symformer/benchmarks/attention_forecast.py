"""Forecaster rows of the `attention` suite: the `etth1-informer` preset at horizon 24 with softmax,
PLASH (M = 64, D_k = 128) and FAVOR+ (m = 256 features), built through the public preset API
(train.presets.resolve / build), so the rows follow whatever that preset becomes.

Rows: one training step (Trainer.train_step: forward, loss, backward, clipping, optimizer step) on a
fixed batch of the preset's batch size, median over repeated steps, methods interleaved so that load
drift hits all of them alike; a whole training run (Trainer.fit: training plus the validation pass of
every epoch and the final validation and test passes); the FLOPs of one training step per method (their
ratio is the floor of the time ratio at equal arithmetic rates); and PLASH's stage shares at the
forecaster's shapes (each stage's forward+backward timed alone on the tensors it sees inside the model).
Quick mode keeps the run short: one epoch capped at RUN_STEPS_QUICK steps, validation and test on
EVAL_WINDOWS_QUICK evenly spaced windows each. Full mode runs the preset as is.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer.attention.plash import PlashAttention
from symformer.benchmarks._attention_common import contribution
from symformer.benchmarks.base import BenchContext, one_call_seconds
from symformer.data.paths import data_dir
from symformer.train import Trainer
from symformer.train.presets import build, resolve

PRESET = "etth1-informer"
# FAVOR+ has no attention matrix to drop
METHODS = {"softmax": {}, "plash": {"M": 64, "D_k": 128}, "favor": {"n_features": 256, "dropout": 0.0}}
RUN_STEPS_QUICK, EVAL_WINDOWS_QUICK = 40, 256


def build_forecaster(method: str, kwargs: dict, seed: int = 0):
    """(model, task, split, TrainConfig) of the preset with `method` as attention (its other
    attention_kwargs kept, ours added on top)."""

    spec = resolve(PRESET)
    model_spec = spec.setdefault("model", {})
    model_spec["attention"] = method
    model_spec["attention_kwargs"] = {**model_spec.get("attention_kwargs", {}), **kwargs}
    return build(spec, seed=seed)


def _subset(data, idx: torch.Tensor):
    """TensorData.subset that keeps the ETT windows' calendar features (x_time / y_time, attributes the ETT
    loader attaches, which subset drops): Informer requires them, so the quick run crashed in evaluation."""
    sub = data.subset(idx)
    for name in ("x_time", "y_time"):
        if getattr(data, name, None) is not None:
            setattr(sub, name, getattr(data, name)[idx])
    return sub


def _trainer(method: str, seed: int, cfg_changes: dict | None = None, eval_windows: int | None = None):

    model, task, split, tcfg = build_forecaster(method, METHODS[method], seed)
    if cfg_changes:
        tcfg = dataclasses.replace(tcfg, **cfg_changes)
    val, test = split.val, split.test
    if eval_windows is not None:
        val, test = (_subset(d, torch.linspace(0, len(d) - 1, eval_windows).long()) for d in (val, test))
    return Trainer(model, task, split.train, val, tcfg, test=test)


def _device(trainer) -> torch.device:
    return next(trainer.model.parameters()).device


def _step_times(ctx: BenchContext, reps: int) -> dict[str, float]:
    trainers = {m: _trainer(m, ctx.seed) for m in METHODS}
    idx = torch.arange(trainers["softmax"].cfg.batch_size)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for tr in trainers.values():
        tr.train_step(idx)  # warm-up
    for _ in range(reps):
        for m, tr in trainers.items():
            times[m].append(one_call_seconds(lambda tr=tr: tr.train_step(idx), _device(tr)))
    return {m: statistics.median(ts) for m, ts in times.items()}


def _step_flops(ctx: BenchContext) -> dict[str, float]:
    """FLOPs of one training step per method, counted by torch.utils.flop_counter (matmuls, convolutions
    and attention kernels; FFTs and elementwise ops are not counted, so PLASH's is a lower bound). Their
    ratio is what the time ratio would be if every method ran its arithmetic at the same rate."""
    from torch.utils.flop_counter import FlopCounterMode

    out = {}
    for m in METHODS:
        tr = _trainer(m, ctx.seed)
        with FlopCounterMode(display=False) as counter:
            tr.train_step(torch.arange(tr.cfg.batch_size))
        out[m] = float(counter.get_total_flops())
    return out


def _run_time(method: str, ctx: BenchContext) -> float:
    changes = {"epochs": 1, "max_steps": RUN_STEPS_QUICK} if ctx.quick else None
    tr = _trainer(method, ctx.seed, changes, EVAL_WINDOWS_QUICK if ctx.quick else None)
    return one_call_seconds(tr.fit, _device(tr))


def _plash_stage_shares(ctx: BenchContext, reps: int) -> list[dict]:
    """Each PLASH stage's forward+backward at the shapes of the forecaster's encoder self-attention."""

    model, task, split, tcfg = build_forecaster("plash", METHODS["plash"], ctx.seed)
    core = next(m for m in model.modules() if isinstance(m, PlashAttention)).train()
    h = model.cfg.n_heads
    n_items, n = tcfg.batch_size * h, split.meta["seq_len"]
    g = seeded_generator(ctx.seed)
    q, k, v = (torch.randn(n_items, n, core.head_dim, generator=g, requires_grad=True) for _ in range(3))
    kt, vt = (t.detach().requires_grad_() for t in core.compress(k, v))
    gt = core.normalized_features(kt, vt).detach().requires_grad_()
    feats = [f.detach().requires_grad_() for f in core.sketch_features(gt)]
    y = core.embed(feats).detach().requires_grad_()
    z = core.mixer(y).detach().requires_grad_()
    stages = {
        "Stage I compress (K P^T, softmax, A^T K, A^T V)": lambda: sum(t.sum() for t in core.compress(k, v)),
        "Stage II psi + normalise": lambda: core.normalized_features(kt, vt).sum(),
        "Stage II TensorSketch (count sketches, FFTs)": lambda: sum(t.sum() for t in core.sketch_features(gt)),
        "Stage II W_out embed": lambda: core.embed(feats).sum(),
        "Stage II mixer (encoder layer over M items)": lambda: core.mixer(y).sum(),
        "Stage III W_K, W_V, softmax readout": lambda: core.attend(q, core.w_k(z), core.w_v(z), None).sum(),
    }
    rows, total = [], 0.0
    for name, fn in stages.items():
        fn().backward()
        ts = []
        for _ in range(reps):
            ts.append(one_call_seconds(lambda fn=fn: fn().backward(), q.device))
        sec = statistics.median(ts)
        total += sec
        rows.append(
            {
                "method": "plash",
                "part": "forecast stage",
                "stage": name,
                "pass": "fwd+bwd",
                "items": n_items,
                "N": n,
                "M": core.M,
                "width": core.width,
                "seconds": sec,
            }
        )
    for r in rows:
        r["share_of_core"] = r["seconds"] / total
    return rows


@contribution
def forecast_rows(ctx: BenchContext) -> tuple[list[dict], dict]:

    base = data_dir()
    if base is None or not (base / "ETTh1.csv").is_file():
        return [], {}  # no data: the rows need ETTh1.csv (SYMFORMER_DATA / --data-dir)
    seed_torch(ctx.seed)
    reps = 7 if ctx.quick else 21
    steps = _step_times(ctx, reps)
    rows: list[dict] = [
        {
            "method": m,
            "part": "forecast train step",
            "preset": PRESET,
            "pred_len": 24,
            "attention_kwargs": METHODS[m],
            "pass": "fwd+bwd+step",
            "seconds": s,
        }
        for m, s in steps.items()
    ]
    ratios = {
        "plash_forecast_step_vs_softmax_h24": steps["plash"] / steps["softmax"],
        "favor_forecast_step_vs_softmax_h24": steps["favor"] / steps["softmax"],
    }
    flops = _step_flops(ctx)
    rows += [
        {"method": m, "part": "forecast train step", "preset": PRESET, "pred_len": 24, "flops": f}
        for m, f in flops.items()
    ]
    for m in ("plash", "favor"):  # the arithmetic floor of the time ratios above
        ratios[f"{m}_forecast_step_flops_vs_softmax_h24"] = flops[m] / flops["softmax"]
    stage_rows = _plash_stage_shares(ctx, 3 if ctx.quick else 7)
    rows += stage_rows
    run_s = {m: _run_time(m, ctx) for m in ("softmax", "plash")}
    run_form = (
        f"quick: 1 epoch capped at {RUN_STEPS_QUICK} steps, val/test on {EVAL_WINDOWS_QUICK} windows each"
        if ctx.quick
        else "the preset's full run (every epoch's validation, final val and test)"
    )
    rows += [
        {"method": m, "part": "forecast run", "preset": PRESET, "pred_len": 24, "form": run_form, "seconds": s}
        for m, s in run_s.items()
    ]
    ratios["plash_forecast_run_vs_softmax_h24"] = run_s["plash"] / run_s["softmax"]
    return rows, ratios
