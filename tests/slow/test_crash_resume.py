"""Crash safety of a whole `reproduce` run: SIGKILL `reproduce plash --quick --jobs 2` once its first per-run
records exist, resume it with --resume, and compare with an uninterrupted run.

plash is the cheapest experiment made of jobs (ETTh1 trainings); `--set plash.quick_epochs=1
plash.quick_train_windows=128` shrink each training so the three runs fit in a few minutes on 2 cores."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CMD = [
    sys.executable,
    "-m",
    "symformer.cli",
    "reproduce",
    "plash",
    "--quick",
    "--jobs",
    "2",
    "--set",
    "plash.quick_epochs=1",
    "--set",
    "plash.quick_train_windows=128",
]
TIMINGS = ("seconds",)  # results.json fields that are wall-clock times


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def _records(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(run_dir.glob("*.json"))}


def _without_timings(res):
    """`res` without wall-clock fields at any depth (a run's `seconds` sits inside its record and its
    metrics) and without the top-level `environment`; everything else must match exactly."""
    if isinstance(res, dict):
        return {k: _without_timings(v) for k, v in res.items() if k not in ("environment", *TIMINGS)}
    if isinstance(res, list):
        return [_without_timings(v) for v in res]
    return res


@pytest.mark.slow
def test_killed_and_resumed_run_equals_uninterrupted(tmp_path, data_dir):
    ref, run = tmp_path / "ref", tmp_path / "run"
    done = subprocess.run([*CMD, "--out", str(ref)], env=_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    ref_records = _records(ref / "plash" / "runs")
    assert len(ref_records) >= 3

    # the run to kill: its own process group, so SIGKILL reaches the worker processes too
    proc = subprocess.Popen(
        [*CMD, "--out", str(run)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = run / "plash" / "runs"
    deadline = time.monotonic() + 1200
    while not list(runs.glob("*.json")):
        assert proc.poll() is None, "the run ended before it wrote a record"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    kept = _records(runs)
    assert 1 <= len(kept) < len(ref_records), "kill after the first records, before the last"
    for name, (_, data) in kept.items():  # every record on disk is whole (atomic writes) and matches the reference
        assert _without_timings(json.loads(data)) == _without_timings(json.loads(ref_records[name][1]))

    # what a crash in the middle of a write could leave: a torn record and a stray temporary file
    torn = next(n for n in ref_records if n not in kept)
    (runs / torn).write_bytes(ref_records[torn][1][:40])
    (runs / (torn + ".tmp")).write_text('{"signature"')
    resumed = subprocess.run(
        [*CMD, "--out", str(run), "--resume"], env=_env(), capture_output=True, text=True, timeout=1200
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Traceback" not in resumed.stderr

    after = _records(runs)
    assert set(after) == set(ref_records)
    for name, (mtime, data) in kept.items():  # finished records reused: not rewritten, so not recomputed
        assert after[name] == (mtime, data), f"{name} was recomputed"
    # the torn record was run again, to the same numbers
    assert _without_timings(json.loads(after[torn][1])) == _without_timings(json.loads(ref_records[torn][1]))
    n_ran = len(ref_records) - len(kept)
    report = (run / "plash" / "report.md").read_text()
    assert f"ETTh1 runs: {n_ran} ran in this call, {len(kept)} reused" in report

    a = json.loads((ref / "plash" / "results.json").read_text())
    b = json.loads((run / "plash" / "results.json").read_text())
    assert _without_timings(a) == _without_timings(b)
