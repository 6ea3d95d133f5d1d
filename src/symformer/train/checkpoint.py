"""Safe, atomic checkpoints.

Saving: temporary file in the same folder, fsync, then os.replace (a killed run never leaves half a file).
Loading: `torch.load(weights_only=True)` only, so a checkpoint someone shares cannot run code on load; for
that, everything saved is a tensor, a number, a string, None or a plain container (RNG states as tensors,
configs as dicts; see `rng_state`). Any file that does not load that way, or lacks the symformer format
marker, gets one `CheckpointError` line naming the file and the problem."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from symformer._io import save_atomic  # noqa: F401  (re-exported: the trainer's atomic writer)
from symformer.data.files import DataFileError, torch_load

FORMAT = "symformer-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message is one line naming the file."""


def load(path: str | os.PathLike, what: str = "a torch file") -> Any:
    """Everything in `path`, loaded without unpickling code (weights_only=True); one-line CheckpointError else."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file")
    try:
        return torch_load(path, what)
    except DataFileError as e:
        raise CheckpointError(str(e)) from None


def load_loop_state(path: str | os.PathLike | None, what: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """A hand-written training loop's own checkpoint (model, opt, generator and `keys`): None when `path` is None
    or absent, else the dict, loaded safely; one CheckpointError line when it lacks an entry."""
    if path is None or not os.path.exists(path):
        return None
    st = load(path, what)
    need = ("model", "opt", "generator", *keys)
    if not isinstance(st, dict) or not set(need) <= set(st):
        raise CheckpointError(f"{path} is not {what} (needs entries {', '.join(need)})")
    return st


def restore_loop_state(
    st: dict[str, Any], model: torch.nn.Module, opt: torch.optim.Optimizer, generator: torch.Generator
) -> None:
    """Load what load_loop_state returned into the model, the optimiser and the batch sampler's generator."""
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    generator.set_state(st["generator"])


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint written by `Trainer.checkpoint`: loaded safely and its format marker checked."""
    ck = load(path, "a symformer checkpoint")
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        got = (
            f"a {type(ck).__name__} without the {FORMAT!r} marker"
            if not isinstance(ck, dict) or "format" not in ck
            else f"format {ck.get('format')!r}"
        )
        raise CheckpointError(f"{path} is not a symformer checkpoint ({got}; written by another program or version)")
    if ck.get("version") != VERSION:
        raise CheckpointError(
            f"{path} is not a symformer checkpoint this version reads "
            f"(version {ck.get('version')!r}, expected {VERSION})"
        )
    missing = [k for k in ("model", "optimizer", "scheduler", "state", "rng", "callbacks", "config") if k not in ck]
    if missing:
        raise CheckpointError(f"{path} is not a symformer checkpoint (missing entries: {', '.join(missing)})")
    return ck


# ---------------------------------------------------------------- RNG states as tensors and numbers
def rng_state() -> dict[str, Any]:
    """torch, numpy and Python RNG states made only of tensors, ints, floats and None (weights_only-safe)."""
    version, mt, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {
            "version": int(version),
            "state": torch.tensor(mt, dtype=torch.int64),
            "gauss_next": None if gauss is None else float(gauss),
        },
    }


def set_rng_state(st: dict[str, Any]) -> None:
    torch.set_rng_state(st["torch"])
    n = st["numpy"]
    np.random.set_state(
        ("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = st["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss_next"]))


def check_compatible(
    path: Path, ck: dict[str, Any], model: torch.nn.Module, config: dict[str, Any], ignore: tuple[str, ...] = ()
) -> None:
    """One line when the checkpoint was written for another model (parameter names/shapes) or config."""
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    saved = ck["model"]
    if not isinstance(saved, dict) or not all(isinstance(v, torch.Tensor) for v in saved.values()):
        raise CheckpointError(f"{path} is not a symformer checkpoint (its 'model' entry is not a state dict)")
    got = {k: tuple(v.shape) for k, v in saved.items()}
    if got != have:
        diff = sorted(set(got) ^ set(have)) or [k for k in have if got[k] != have[k]]
        k = diff[0]
        detail = f"{k}: shape {got.get(k, 'absent')} there, {have.get(k, 'absent')} here"
        raise CheckpointError(f"{path} is a checkpoint of another model ({len(diff)} parameters differ, e.g. {detail})")
    old = ck["config"] if isinstance(ck["config"], dict) else {}
    for key, val in config.items():
        if key not in ignore and key in old and old[key] != val:
            raise CheckpointError(
                f"{path} is a checkpoint of another training config "
                f"({key}={old[key]!r} there, {val!r} here; resume needs the same config)"
            )
