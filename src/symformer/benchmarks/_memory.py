"""CPU peak memory of one call, measured with torch's profiler memory accounting."""
from __future__ import annotations

from typing import Any, Callable

import torch


def traced_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak of live tensor bytes allocated during `fn()` (CPU allocator events from torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    cur = peak = 0
    events = sorted((e for e in prof.events() if e.name == "[memory]"),
                    key=lambda e: e.time_range.start)
    for e in events:
        cur += e.cpu_memory_usage
        peak = max(peak, cur)
    return int(peak)
