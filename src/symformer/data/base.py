"""In-memory tensor datasets and deterministic batching (the order depends only on seed and epoch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from symformer._rng import resolve_seed, seeded_generator


@dataclass
class TensorData:
    """Inputs `x`, targets `y` and optional token positions `pos` ((N, C), shared by all samples)."""

    x: torch.Tensor
    y: torch.Tensor
    pos: torch.Tensor | None = None
    segments: torch.Tensor | None = None  # (n, N) document ids of packed rows (attention.boundaries), per sample

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def subset(self, idx: torch.Tensor) -> "TensorData":
        return TensorData(self.x[idx], self.y[idx], self.pos, None if self.segments is None else self.segments[idx])


@dataclass
class Split:
    train: TensorData
    val: TensorData
    test: TensorData
    meta: dict


def epoch_order(n: int, seed: int | None, epoch: int, shuffle: bool = True) -> torch.Tensor:
    if not shuffle:
        return torch.arange(n)
    g = seeded_generator(resolve_seed(seed) * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def batches(
    data: TensorData,
    batch_size: int,
    seed: int | None = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
    start: int = 0,
    rank: int = 0,
    world: int = 1,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (x, y) batches of epoch `epoch`, beginning at batch `start` (resume).

    With world > 1 every rank takes a contiguous slice of each global batch, so the union over
    ranks is exactly the single-process batch (what DDP equivalence needs)."""
    order = epoch_order(len(data), seed, epoch, shuffle)
    for b in range(start, n_batches(data, batch_size, drop_last)):
        idx = shard(order[b * batch_size : (b + 1) * batch_size], rank, world)
        yield data.x[idx], data.y[idx]


def shard(idx: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s contiguous slice of a global batch: the union over ranks is the batch itself."""
    if world == 1:
        return idx
    per = len(idx) // world
    return idx[rank * per : (rank + 1) * per]


def n_batches(data: TensorData, batch_size: int, drop_last: bool = False) -> int:
    return len(data) // batch_size if drop_last else -(-len(data) // batch_size)
