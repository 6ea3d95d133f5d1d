"""Where an experiment's training and inference run (RunContext.device). Data draws stay on the CPU generators
they were recorded with and the tensors are moved afterwards, so every device draws the same data and a CPU run
computes exactly what its records hold; the float64 exactness checks never call these (they stay on the CPU, where
they are exact)."""

from __future__ import annotations

import torch

from symformer.data.base import Split, TensorData


def tensor_data_on(data: TensorData | None, device: str) -> TensorData | None:
    """`data` with its inputs, targets, positions and any other tensor it carries (ETT's time marks x_time and
    y_time) on `device`; the same object where it is there already (the CPU path is unchanged)."""
    if data is None or torch.device(device) == data.x.device:
        return data
    pos = None if data.pos is None else data.pos.to(device)
    moved = TensorData(data.x.to(device), data.y.to(device), pos)
    for name, value in vars(data).items():
        if name not in ("x", "y", "pos") and isinstance(value, torch.Tensor):
            setattr(moved, name, value.to(device))
    return moved


def split_on(split: Split, device: str) -> Split:
    """A data split with train, validation and test on `device`; meta unchanged."""
    return Split(
        tensor_data_on(split.train, device),
        tensor_data_on(split.val, device),
        tensor_data_on(split.test, device),
        split.meta,
    )
