"""CPU peak memory of one call, measured with torch's profiler memory accounting."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator

import torch


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side logs start/stop lines straight to fd 2; keep them out of the CLI output."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (captured): nothing to silence
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def traced_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak of live tensor bytes allocated during `fn()` (CPU allocator events from torch.profiler)."""
    with (
        _quiet_stderr(),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        fn()
    cur = peak = 0
    # allocations made inside an op are attributed to that op (its self memory), frees outside ops are
    # "[memory]" events: summing only the latter missed every allocation (peak 0)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    for e in events:
        cur += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        peak = max(peak, cur)
    return int(peak)
