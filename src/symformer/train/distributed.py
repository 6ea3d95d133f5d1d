"""Data-parallel helpers over torch.distributed (torchrun; gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world_size); (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env(device: str = "cpu") -> bool:
    """Join the process group torchrun describes in the environment; False when not launched by it."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or (dist.is_available() and dist.is_initialized()):
        return dist.is_available() and dist.is_initialized()
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return True


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    if world()[1] > 1:
        return torch.nn.parallel.DistributedDataParallel(model)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def is_main() -> bool:
    return world()[0] == 0
