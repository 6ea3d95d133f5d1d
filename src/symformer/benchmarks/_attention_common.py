"""Shared pieces of the `attention` benchmark suite.

The suite itself lives in benchmarks/attention.py. Other systems add their rows with
`@contribution`: fn(ctx: BenchContext) -> (rows: list[dict], ratios: dict). Every contribution
runs in the same process as the suite, so ratios between them are measured side by side."""

from __future__ import annotations

from typing import Callable

import torch

from symformer._rng import seeded_generator
from symformer.benchmarks.base import BenchContext, median_seconds, peak_memory_bytes

CONTRIBUTIONS: list[Callable[[BenchContext], tuple[list[dict], dict]]] = []


def contribution(fn):
    CONTRIBUTIONS.append(fn)
    return fn


def qkv(
    n: int,
    d_model: int = 512,
    heads: int = 4,
    batch: int = 1,
    device: str = "cpu",
    seed: int = 0,
    requires_grad: bool = False,
):
    g = seeded_generator(seed)
    dh = d_model // heads
    t = [torch.randn(batch, heads, n, dh, generator=g).to(device).requires_grad_(requires_grad) for _ in range(3)]
    return t[0], t[1], t[2]


def time_core(
    core: Callable,
    n: int,
    backward: bool,
    device: str = "cpu",
    min_run_time: float = 0.3,
    d_model: int = 512,
    heads: int = 4,
) -> tuple[float, int | None]:
    """(median seconds, peak bytes) of core(q, k, v) forward, or forward+backward."""
    q, k, v = qkv(n, d_model, heads, device=device, requires_grad=backward)

    def run():
        if backward:
            core(q, k, v).sum().backward()
        else:
            with torch.no_grad():
                core(q, k, v)

    return median_seconds(run, min_run_time, device), peak_memory_bytes(run, device)
