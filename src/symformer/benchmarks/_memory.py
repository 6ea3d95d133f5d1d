"""CPU peak memory of one call, measured with torch's profiler memory accounting."""
from __future__ import annotations

from typing import Any, Callable

import torch


def traced_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak of live tensor bytes allocated during `fn()` (CPU allocator events from torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    cur = peak = 0
    # allocations made inside an op are attributed to that op (its self memory), frees outside ops are
    # "[memory]" events: summing only the latter missed every allocation (peak 0)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    for e in events:
        cur += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        peak = max(peak, cur)
    return int(peak)
