"""Every benchmark timer waits for the device before each clock read (benchmarks/base.py), checked with a mocked
device: `torch.cuda.synchronize` and the clock record their calls in order, so a read that no sync precedes shows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from symformer.benchmarks import base

BENCH_DIR = Path(base.__file__).parent


@pytest.fixture
def calls(monkeypatch):
    """The ordered log of device syncs and clock reads; the clock advances 1 s per read."""
    log: list[str] = []

    def synchronize(device=None):
        log.append("sync")

    def clock():
        log.append("clock")
        return float(sum(1 for c in log if c == "clock"))

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(base, "_clock", clock)
    return log


def _every_read_after_sync(log: list[str]) -> bool:
    return all(i > 0 and log[i - 1] == "sync" for i, c in enumerate(log) if c == "clock")


def test_one_call_seconds_syncs_before_each_clock_read(calls):
    def work():
        calls.append("work")

    seconds = base.one_call_seconds(work, "cuda")
    assert calls == ["sync", "clock", "work", "sync", "clock"]
    assert seconds == 1.0


def test_timed_call_returns_the_result_and_syncs(calls):
    seconds, out = base.timed_call(lambda: calls.append("work") or 7, "cuda:0")
    assert out == 7 and seconds == 1.0
    assert calls == ["sync", "clock", "work", "sync", "clock"]


def test_median_seconds_syncs_before_every_clock_read(calls):
    base.median_seconds(lambda: calls.append("work"), min_run_time=0.0, device="cuda")
    assert calls.count("clock") >= 2 and calls.count("work") >= 2
    assert _every_read_after_sync(calls)
    last_work = max(i for i, c in enumerate(calls) if c == "work")
    assert "clock" in calls[last_work:]  # the work is timed to its end, after a sync


def test_cpu_timing_does_not_sync(calls):
    base.one_call_seconds(lambda: None, "cpu")
    assert calls == ["clock", "clock"]


def test_other_accelerators_sync_through_their_module(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "mps", type("M", (), {"synchronize": staticmethod(lambda: seen.append("mps"))}))
    base.sync_device("mps")
    assert seen == ["mps"]


def test_no_suite_reads_a_clock_itself():
    """One timing helper everywhere: no module of benchmarks/ but base.py calls time.perf_counter / time.time /
    time.monotonic or builds its own torch.utils.benchmark.Timer."""
    offenders = []
    for path in sorted(BENCH_DIR.glob("*.py")):
        if path.name == "base.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("perf_counter", "time", "monotonic", "Timer"):
                if isinstance(node.value, ast.Name) and node.value.id in ("time", "tbench", "benchmark"):
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"time with benchmarks.base (timed_call / one_call_seconds / median_seconds): {offenders}"
