"""Atomic checkpoints: write to a temporary file in the same folder, fsync, then os.replace."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def save_atomic(obj: Any, path: str | os.PathLike) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> Any:
    return torch.load(Path(path), map_location="cpu", weights_only=False)
