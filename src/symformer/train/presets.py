"""Named training setups and config files: {"task", "data", "model", "train"} dictionaries.

A config file (JSON, or TOML on Python >= 3.11) has the same four keys as a preset; every key is
optional and falls back to the task's defaults."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from symformer._validation import check_choice, fail
from symformer.models import (
    CausalLM,
    Forecaster,
    Informer,
    InformerConfig,
    TransformerConfig,
    ViTClassifier,
)
from symformer.models.informer import SMALL_SIZE
from symformer.train.tasks import Classification, Forecasting, LanguageModeling
from symformer.train.trainer import TrainConfig

TASKS = ("digits", "mnist1d", "shakespeare", "etth1")

PRESETS: dict[str, dict[str, Any]] = {
    # ~15 s on 2 cores; reaches >= 0.90 test accuracy (tests/cli/test_cli.py checks it).
    "digits-vit": {"task": "digits", "data": {"patch": 2},
                   "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 2},
                   "train": {"epochs": 30, "batch_size": 64, "optimizer": "adamw", "lr": 3e-3, "weight_decay": 1e-2,
                             "warmup_steps": 50, "schedule": "cosine"}},
    "mnist1d-vit": {"task": "mnist1d", "data": {"patch": 4},
                    "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 1},
                    "train": {"epochs": 30, "batch_size": 128, "optimizer": "adamw", "lr": 3e-3, "weight_decay": 1e-2,
                              "warmup_steps": 50}},
    "shakespeare-char": {"task": "shakespeare", "data": {"block": 64, "max_chars": 300_000, "stride": 32},
                         "model": {"d_model": 96, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 1},
                         "train": {"epochs": 2, "batch_size": 32, "optimizer": "adamw", "lr": 3e-3,
                                   "warmup_steps": 50, "eval_batch_size": 128}},
    # Informer (models/informer.py) at the smaller size SMALL_SIZE; seq_len/label_len follow the horizon
    # (INFORMER_LENGTHS). Adam (AdamW, weight decay 0) lr 1e-4, lradj type1, batch 32, <= 6 epochs, patience 3.
    "etth1-informer": {"task": "etth1", "data": {"pred_len": 24},
                       "model": {"arch": "informer", **SMALL_SIZE, "attention": "full"},
                       "train": {"epochs": 6, "batch_size": 32, "optimizer": "adamw", "lr": 1e-4,
                                 "schedule": "informer", "decay_gamma": 0.5, "grad_clip": None, "patience": 3}},
}

#: Informer's scripts/ETTh1.sh: pred_len -> (seq_len, label_len)
INFORMER_LENGTHS = {24: (48, 48), 48: (96, 48), 168: (168, 168), 336: (168, 168), 720: (336, 336)}


def informer_lengths(pred_len: int) -> tuple[int, int]:
    """(seq_len, label_len) of Informer's ETTh1 script for a horizon it runs; ValueError otherwise."""
    if pred_len not in INFORMER_LENGTHS:
        fail("pred_len", pred_len, f"a horizon of Informer's ETTh1 script: {', '.join(map(str, INFORMER_LENGTHS))}")
    return INFORMER_LENGTHS[pred_len]


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        fail("--config", str(path), "an existing JSON or TOML file")
    if path.suffix == ".toml":
        import tomllib
        return tomllib.loads(path.read_text())
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        fail("--config", f"{path} ({e.msg} at line {e.lineno})", "valid JSON")
        raise AssertionError from e


def resolve(preset: str | None = None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    if preset is not None:
        check_choice("--preset", preset, PRESETS)
        spec = json.loads(json.dumps(PRESETS[preset]))
    else:
        spec = {}
    for key, val in (config or {}).items():
        if key not in ("task", "data", "model", "train", "seed"):
            fail("config", key, "keys among task, data, model, train, seed")
        spec[key] = {**spec.get(key, {}), **val} if isinstance(val, dict) else val
    if "task" not in spec:
        fail("config", "no task", f"a task among {', '.join(TASKS)}")
    check_choice("task", spec["task"], TASKS)
    return spec


def build(spec: dict[str, Any], data_dir=None, seed: int | None = None):
    """(model, task, split, TrainConfig) for a resolved spec."""
    from symformer import data as D
    t, dkw, mkw = spec["task"], dict(spec.get("data", {})), dict(spec.get("model", {}))
    tkw = dict(spec.get("train", {}))
    if seed is not None:
        tkw["seed"] = seed
    tcfg = TrainConfig(**tkw)
    torch.manual_seed(tcfg.seed)
    if t in ("digits", "mnist1d"):
        split = D.load_digits_patches(**dkw) if t == "digits" else D.load_mnist1d(**dkw)
        mkw.setdefault("coord_dim", split.meta["coord_dim"])
        model = ViTClassifier(TransformerConfig(**mkw), split.meta["token_dim"], split.meta["n_classes"])
        return model, Classification(), split, tcfg
    if t == "shakespeare":
        split = D.load_char_text(data_dir=data_dir, **dkw)
        mkw.setdefault("max_len", dkw.get("block", 64))
        model = CausalLM(TransformerConfig(**mkw), split.meta["vocab_size"])
        return model, LanguageModeling(), split, tcfg
    arch = mkw.pop("arch", "transformer")
    check_choice("model.arch", arch, ("transformer", "informer"))
    if arch == "informer":
        seq, lab = informer_lengths(dkw.get("pred_len", 24))
        dkw.setdefault("seq_len", seq)
        dkw.setdefault("label_len", lab)
        split = D.load_ett(data_dir=data_dir, **dkw)
        model = Informer(InformerConfig(**mkw), split.meta["n_vars"], split.meta["seq_len"],
                         split.meta["label_len"], split.meta["pred_len"])
        return model, Forecasting(split.meta["pred_len"]), split, tcfg
    split = D.load_ett(data_dir=data_dir, **dkw)
    model = Forecaster(TransformerConfig(**mkw), split.meta["n_vars"], split.meta["seq_len"],
                       split.meta["label_len"], split.meta["pred_len"])
    return model, Forecasting(split.meta["pred_len"]), split, tcfg


def result_metrics(task: str, final: dict[str, float]) -> dict[str, float]:
    """The metric names `symformer train` reports for each kind of model."""
    if task in ("digits", "mnist1d"):
        return {"test_accuracy": final["test_accuracy"], "val_accuracy": final["val_accuracy"]}
    if task == "shakespeare":
        return {"val_bpc": final["val_bpc"], "test_bpc": final["test_bpc"]}
    return {"test_mse": final["test_mse"], "test_mae": final["test_mae"], "val_mse": final["val_mse"]}
