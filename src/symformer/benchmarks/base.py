"""Benchmark suite registry and timing helpers built on torch.utils.benchmark."""

from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from symformer.benchmarks._memory import traced_peak_bytes
from symformer.registry import Registry, description_of


@dataclass
class BenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    ratios: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class BenchContext:
    out_dir: Path
    quick: bool = True
    device: str = "cpu"
    seed: int = 0
    progress: bool = True


@dataclass
class SuiteSpec:
    name: str
    fn: Callable[[BenchContext], BenchResult]
    description: str
    # run only when named: a suite that reruns whole experiments (executors) would make `bench` with no names,
    # and so `make bench`, take tens of minutes
    by_name_only: bool = False


SUITES: Registry[SuiteSpec] = Registry("benchmark suite", "symformer.benchmarks")


def suite(name: str, description: str = "", by_name_only: bool = False):
    def deco(fn):
        SUITES.register(name)(SuiteSpec(name, fn, description_of(fn, description), by_name_only))
        return fn

    return deco


def load_all() -> Registry[SuiteSpec]:
    return SUITES.load_all()


# --------------------------------------------------------------------------- timing
# Every timer in the suites goes through `timed_call` / `one_call_seconds` / `median_seconds`: on an accelerator
# the host only queues kernels, so a clock read before the device has finished measures the launch, not the work
# (attention_plash once timed SDPA at 8192 tokens as 20 us that way). Each clock read is preceded by
# `sync_device`. `_clock` is the one clock (tests replace it to check the order of syncs and reads).
_clock = time.perf_counter


def sync_device(device: str | torch.device) -> None:
    """Wait for every kernel queued on `device` ("cuda", "cuda:1", "mps", "xpu", ...); nothing on the CPU."""
    kind = torch.device(device).type
    if kind == "cpu" or kind == "meta":
        return
    if kind == "cuda":
        torch.cuda.synchronize(device)
        return
    backend = getattr(torch, kind, None)  # torch.mps / torch.xpu: synchronize() without a device argument
    if backend is not None and callable(getattr(backend, "synchronize", None)):
        backend.synchronize()


def synced_clock(device: str | torch.device) -> float:
    """The clock, read after the device has finished its queued work."""
    sync_device(device)
    return _clock()


def timed_call(fn: Callable[[], Any], device: str | torch.device = "cpu") -> tuple[float, Any]:
    """(wall seconds of one call of fn, its result), the device synchronised before and after."""
    t0 = synced_clock(device)
    out = fn()
    return synced_clock(device) - t0, out


def one_call_seconds(fn: Callable[[], Any], device: str | torch.device = "cpu") -> float:
    """Wall time of one call of fn, the device synchronised before and after (for back-to-back comparisons
    that torch.utils.benchmark's blocked timing cannot interleave)."""
    return timed_call(fn, device)[0]


def median_seconds(fn: Callable[[], Any], min_run_time: float = 0.3, device: str | torch.device = "cpu") -> float:
    """Median wall time of `fn()` (torch.utils.benchmark's blocked_autorange, its timer `synced_clock(device)`:
    every clock read waits for the device, on any accelerator and any torch release)."""
    fn()  # warm-up (allocations, lazy init)
    sync_device(device)
    # imported here, not at module level: it imports torch.utils.cpp_extension, which prints a line on stderr
    # ("No CUDA runtime is found") where a CUDA build of torch finds nvcc but no driver; `symformer bench` with bad
    # input must print only its own one-line error
    import torch.utils.benchmark as tbench

    t = tbench.Timer(
        stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(), timer=lambda: synced_clock(device)
    )
    return float(t.blocked_autorange(min_run_time=min_run_time).median)


def peak_memory_bytes(fn: Callable[[], Any], device: str = "cpu") -> int | None:
    """Peak memory of one call: CUDA allocator stats on GPU; on CPU the growth of the process's
    max RSS (a lower bound when an earlier call already reached a higher peak)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base)

    return traced_peak_bytes(fn)


def fix_malloc_thresholds() -> bool:
    """Pin glibc's mmap/trim thresholds (process-wide, irreversible) so large tensors are reused from the
    heap instead of being mmapped and page-faulted afresh on every call. With glibc's dynamic default the
    cost of those page faults depends on the allocation history of the process, which makes CPU timings
    of allocation-heavy code vary by up to 2x between runs. Returns False where glibc is absent."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
