"""Named training setups and config files: {"task", "data", "model", "train"} dictionaries.

A config file (JSON, or TOML on Python >= 3.11) has the same four keys as a preset; every key is
optional and falls back to the task's defaults."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

from symformer import data as D
from symformer._rng import check_seed, seed_torch
from symformer._validation import check_choice, fail
from symformer.data.files import read_text
from symformer.models import (
    CausalLM,
    Forecaster,
    Informer,
    InformerConfig,
    TransformerConfig,
    ViTClassifier,
)
from symformer.models.informer import SMALL_SIZE
from symformer.train.checkpoint import CheckpointError, check_compatible, load_checkpoint
from symformer.train.tasks import Classification, Forecasting, LanguageModeling
from symformer.train.trainer import TrainConfig

TASKS = ("digits", "mnist1d", "shakespeare", "etth1")

PRESETS: dict[str, dict[str, Any]] = {
    # a smoke-test size that reaches >= 0.90 test accuracy (tests/cli/test_cli.py checks it)
    "digits-vit": {
        "task": "digits",
        "data": {"patch": 2},
        "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 2},
        "train": {
            "epochs": 30,
            "batch_size": 64,
            "optimizer": "adamw",
            "lr": 3e-3,
            "weight_decay": 1e-2,
            "warmup_steps": 50,
            "schedule": "cosine",
        },
    },
    "mnist1d-vit": {
        "task": "mnist1d",
        "data": {"patch": 4},
        "model": {"d_model": 64, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 1},
        "train": {
            "epochs": 30,
            "batch_size": 128,
            "optimizer": "adamw",
            "lr": 3e-3,
            "weight_decay": 1e-2,
            "warmup_steps": 50,
        },
    },
    "shakespeare-char": {
        "task": "shakespeare",
        "data": {"block": 64, "max_chars": 300_000, "stride": 32},
        "model": {"d_model": 96, "n_heads": 4, "n_layers": 2, "positional": "rope", "coord_dim": 1},
        "train": {
            "epochs": 2,
            "batch_size": 32,
            "optimizer": "adamw",
            "lr": 3e-3,
            "warmup_steps": 50,
            "eval_batch_size": 128,
        },
    },
    # Informer (models/informer.py) at the smaller size SMALL_SIZE; seq_len/label_len follow the horizon
    # (INFORMER_LENGTHS). Adam (AdamW, weight decay 0) lr 1e-4, lradj type1, batch 32, <= 6 epochs, patience 3.
    "etth1-informer": {
        "task": "etth1",
        "data": {"pred_len": 24},
        "model": {"arch": "informer", **SMALL_SIZE, "attention": "full"},
        "train": {
            "epochs": 6,
            "batch_size": 32,
            "optimizer": "adamw",
            "lr": 1e-4,
            "schedule": "informer",
            "decay_gamma": 0.5,
            "grad_clip": None,
            "patience": 3,
        },
    },
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
    text = read_text(path, "a JSON or TOML config")
    if path.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # the same parser, released as tomli before it joined the standard library
            import tomli as tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            fail("--config", f"{path} ({e})", "valid TOML")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        fail("--config", f"{path} ({e.msg} at line {e.lineno})", "valid JSON")
        raise AssertionError from e


SECTIONS = ("data", "model", "train")


def _loader(task: str):

    return {
        "digits": D.load_digits_patches,
        "mnist1d": D.load_mnist1d,
        "shakespeare": D.load_char_text,
        "etth1": D.load_ett,
    }[task]


def valid_keys(task: str | None, arch: str | None = None) -> dict[str, list[str]]:
    """The keys each section accepts: the data loader's arguments, the model config's fields (InformerConfig
    for `model.arch: informer`, else TransformerConfig; forecasting tasks also take `arch`) and TrainConfig's."""
    import dataclasses
    import inspect

    data = [] if task not in TASKS else [p for p in inspect.signature(_loader(task)).parameters if p != "data_dir"]
    model_cfg = InformerConfig if (task == "etth1" and arch == "informer") else TransformerConfig
    model = (["arch"] if task == "etth1" else []) + [f.name for f in dataclasses.fields(model_cfg)]
    return {"data": data, "model": model, "train": [f.name for f in dataclasses.fields(TrainConfig)]}


def _unknown(source: str, key: str, known: list[str]) -> None:
    """An unknown (dotted) key: name it, the closest valid key (difflib) and the valid keys."""
    head, _, rest = key.partition(".")
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    if rest and head not in SECTIONS:  # a typo in the section: 'modl.d_model' -> 'model.d_model'
        sec = difflib.get_close_matches(head, SECTIONS, n=1, cutoff=0.5)
        close = [f"{sec[0]}.{rest}"] if sec else close
    hint = f"did you mean {close[0]}? " if close else ""
    raise ValueError(f"{source}: unknown key {key!r}; {hint}(valid: {', '.join(known)})")


def parse_set(item: str) -> tuple[list[str], Any]:
    """'train.lr=3e-3' -> (['train', 'lr'], 0.003): the value as JSON where it parses, else the string."""
    if not isinstance(item, str) or "=" not in item:
        fail("--set", item, "key.sub=value (e.g. train.lr=3e-3)")
    key, raw = item.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        fail("--set", item, "a dotted key without empty parts (e.g. model.d_model=32)")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path, value


def _merge(spec: dict[str, Any], config: dict[str, Any], source: str) -> None:
    if not isinstance(config, dict):
        fail(source, type(config).__name__, "a table/object with keys among task, data, model, train, seed", TypeError)
    for key, val in config.items():
        if key not in ("task", "seed", *SECTIONS):
            _unknown(source, str(key), ["task", "seed", *SECTIONS])
        if key in SECTIONS:
            if not isinstance(val, dict):
                fail(f"{source}: {key}", val, "a table/object of settings", TypeError)
            spec[key] = {**spec.get(key, {}), **val}
        else:
            spec[key] = val


def _apply_set(spec: dict[str, Any], path: list[str], value: Any) -> None:
    if len(path) == 1:
        _merge(spec, {path[0]: value}, "--set")
        return
    if path[0] not in SECTIONS:
        _unknown("--set", ".".join(path), ["task", "seed", *SECTIONS])
    node = spec.setdefault(path[0], {})
    for part in path[1:-1]:  # deeper keys go into dict-valued settings (e.g. model.attention_kwargs.M=64)
        if not isinstance(node.get(part, {}), dict):
            fail("--set", ".".join(path), f"a key below a table, but {part} is {node[part]!r}")
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _check_keys(spec: dict[str, Any], source: str) -> None:
    known = valid_keys(spec["task"], spec.get("model", {}).get("arch"))
    for sec in SECTIONS:
        for key in spec.get(sec, {}):
            if key not in known[sec]:
                _unknown(source, f"{sec}.{key}", [f"{sec}.{k}" for k in known[sec]])


def resolve(
    preset: str | None = None, config: dict[str, Any] | None = None, sets: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    """The run's {task, data, model, train}: preset, then the config file, then each `--set key.sub=value`,
    in that order. Unknown keys are errors naming the closest valid key (difflib)."""
    if preset is not None:
        check_choice("--preset", preset, PRESETS)
        spec = json.loads(json.dumps(PRESETS[preset]))
    else:
        spec = {}
    _merge(spec, config or {}, "config")
    if "task" not in spec:
        fail("config", "no task", f"a task among {', '.join(TASKS)}")
    check_choice("task", spec["task"], TASKS)
    _check_keys(spec, "config")
    for item in sets:
        _apply_set(spec, *parse_set(item))
    check_choice("task", spec["task"], TASKS)
    _check_keys(spec, "--set")
    if "seed" in spec:
        check_seed(spec["seed"])
    return spec


def build(spec: dict[str, Any], data_dir=None, seed: int | None = None):
    """(model, task, split, TrainConfig) for a resolved spec."""

    t, dkw, mkw = spec["task"], dict(spec.get("data", {})), dict(spec.get("model", {}))
    tkw = dict(spec.get("train", {}))
    if seed is not None:  # --seed, else the config's top-level seed (null: drawn from torch's global generator)
        tkw["seed"] = seed
    elif "seed" in spec:
        tkw["seed"] = spec["seed"]
    tcfg = TrainConfig(**tkw)
    seed_torch(tcfg.seed)
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
        model = Informer(
            InformerConfig(**mkw),
            split.meta["n_vars"],
            split.meta["seq_len"],
            split.meta["label_len"],
            split.meta["pred_len"],
        )
        return model, Forecasting(split.meta["pred_len"]), split, tcfg
    split = D.load_ett(data_dir=data_dir, **dkw)
    model = Forecaster(
        TransformerConfig(**mkw),
        split.meta["n_vars"],
        split.meta["seq_len"],
        split.meta["label_len"],
        split.meta["pred_len"],
    )
    return model, Forecasting(split.meta["pred_len"]), split, tcfg


def result_metrics(task: str, final: dict[str, float]) -> dict[str, float]:
    """The metric names `symformer train` reports for each kind of model."""
    if task in ("digits", "mnist1d"):
        return {"test_accuracy": final["test_accuracy"], "val_accuracy": final["val_accuracy"]}
    if task == "shakespeare":
        return {"val_bpc": final["val_bpc"], "test_bpc": final["test_bpc"]}
    return {"test_mse": final["test_mse"], "test_mae": final["test_mae"], "val_mse": final["val_mse"]}


def load_trained(folder: str | Path, data_dir=None, name: str = "--out", task: str | None = None):
    """(model, split) of a `symformer train` folder: config.json rebuilds the model and its data split, checkpoint.pt
    gives the weights (weights_only, format marker and parameter shapes checked, as --resume checks them).

    Args:
        folder: the training folder (config.json and checkpoint.pt).
        data_dir: the data directory of the model's task (its vocabulary, for a character LM).
        name (str): the argument that ValueErrors name.
        task (str | None): the task the model must have been trained on (None: any).
    """
    folder = Path(folder)
    config, ckpt = folder / "config.json", folder / "checkpoint.pt"
    if not config.is_file() or not ckpt.is_file():
        fail(name, str(folder), "a folder written by `symformer train` (config.json and checkpoint.pt)")
    spec = load_config(config)
    if task is not None and spec.get("task") != task:
        fail(name, f"a {spec.get('task')!r} model", f"a model of task {task}")
    model, _, split, _ = build(spec, data_dir=data_dir)
    try:
        ck = load_checkpoint(ckpt)
        check_compatible(ckpt, ck, model, {})
    except CheckpointError as e:
        fail(name, str(folder), f"a training folder whose checkpoint loads ({e})")
    model.load_state_dict(ck["model"])
    return model.eval(), split
