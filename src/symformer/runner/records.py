"""What the records of an experiment say of where they ran: each record's provenance (written by run_jobs,
jobs.py), and the report lines and PROVENANCE.md that `symformer reproduce` makes from the records under runs/."""

from __future__ import annotations

import json
import platform
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from symformer import results
from symformer.results import atomic_write_text, git_sha
from symformer.runner.plan_record import PLAN_FILE


def provenance(seconds: float, where: dict) -> dict:
    """Where a record came from: a resumed run may span sessions, commits, engines and devices, so each record
    says its own (outside the signature: it never decides reuse). `host` is the worker that ran the job, and
    `driver_host` the machine that recorded it. `where` also carries what the job cost (`spent`): this call's CPU
    seconds and, for a checkpointed job, the sums over all its calls."""
    return {
        "git_sha": git_sha(),
        **where,
        "driver_host": platform.node(),
        "seconds": seconds,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


SPENT_FILE = "spent.json"  # in a checkpointed job's work_dir: what the calls before this one spent on it
SPENT_PERIOD = 30.0  # seconds between rewrites of SPENT_FILE while the job runs


@contextmanager
def spent(work: Path | None):
    """Yields a dict that holds, after the block, this call's wall and CPU seconds and, for a job with a work_dir,
    the sums over every call that worked on it ("parts"). A job resumed from its checkpoints is recorded by its last
    call, which alone would undercount it (facts_full_core_hours). The earlier calls' sums live in
    work_dir/SPENT_FILE: a thread rewrites it every SPENT_PERIOD seconds and once at the end, also when the job
    raises, so a killed call loses at most one period. CPU seconds are the process's: a worker runs one job at a
    time."""
    prior = _read_spent(work)
    t0, c0 = time.perf_counter(), time.process_time()
    cost: dict = {}

    def now() -> dict:
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {
            "seconds": wall,
            "cpu_seconds": cpu,
            **(
                {}
                if work is None
                else {
                    "parts": prior["parts"] + 1,
                    "seconds_all_parts": prior["seconds_all_parts"] + wall,
                    "cpu_seconds_all_parts": prior["cpu_seconds_all_parts"] + cpu,
                }
            ),
        }

    stop = threading.Event()
    beat = None
    if work is not None:
        beat = threading.Thread(target=_beat, args=(work, now, stop), daemon=True, name="spent-ledger")
        beat.start()
    try:
        yield cost
    finally:
        stop.set()
        if beat is not None:
            beat.join()
        cost.update(now())
        if work is not None:
            _write_spent(work, cost)


def _beat(work: Path, now, stop: threading.Event) -> None:
    while not stop.wait(SPENT_PERIOD):
        _write_spent(work, now())


def _read_spent(work: Path | None) -> dict:
    """The sums of the calls before this one (zeros for a fresh folder, an unreadable ledger, or no work_dir)."""
    zero = {"parts": 0, "seconds_all_parts": 0.0, "cpu_seconds_all_parts": 0.0}
    if work is None:
        return zero
    try:
        got = json.loads((Path(work) / SPENT_FILE).read_text())
        return {k: type(v)(got[k]) for k, v in zero.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return zero


def _write_spent(work: Path, cost: dict) -> None:
    if Path(work).is_dir():  # gone once the record is written
        keys = ("parts", "seconds_all_parts", "cpu_seconds_all_parts")
        atomic_write_text(Path(work) / SPENT_FILE, json.dumps({k: cost[k] for k in keys}))


def reuse_note(what: str, stats: dict) -> str:
    """A report line saying how many of `what` runs this call made and how many it took from records."""
    return (
        f"{what} runs: {stats.get('ran', 0)} ran in this call, {stats.get('reused', 0)} reused from the records "
        "under runs/ (--resume); the seconds reported count only this call"
    )


WHERE_KEYS = ("engine", "device", "host", "gpu", "driver_host", "git_sha")


def records_where(record_dir: Path) -> dict[str, dict[str, int]]:
    """{key: {value: number of records}} over the records under `record_dir`, for the provenance keys WHERE_KEYS;
    a record written before provenance named one counts as "unrecorded" (gpu: only records that ran on one)."""
    out: dict[str, dict[str, int]] = {k: {} for k in WHERE_KEYS}
    for path in sorted(Path(record_dir).glob("*.json")) if Path(record_dir).is_dir() else []:
        try:
            prov = json.loads(path.read_text()).get("provenance") or {}
        except (OSError, ValueError, AttributeError):
            continue  # PLAN.json is a dict without provenance; a torn record is rerun by --resume anyway
        if path.name == PLAN_FILE:
            continue
        for key, counts in out.items():
            if key == "gpu" and "gpu" not in prov:
                continue
            val = str(prov.get(key, "unrecorded"))
            counts[val] = counts.get(val, 0) + 1
    return out


def where_note(where: dict[str, dict[str, int]]) -> str | None:
    """A report line naming the engines, devices and hosts of an experiment's records; it says so first when the
    records mix devices (their timings, and float results beyond rounding, are then not of one device)."""
    if not where["device"]:
        return None
    fmt = {k: ", ".join(f"{v} ({n})" for v, n in sorted(c.items())) for k, c in where.items()}
    mixed = "records mix devices: " if len(where["device"]) > 1 else ""
    return f"{mixed}runs/ records by device: {fmt['device']}; engine: {fmt['engine']}; host: {fmt['host']}"


GENERATED = "<!-- written by symformer reproduce from runs/*.json; a hand-written PROVENANCE.md is never replaced -->"


def write_provenance(exp_dir: Path, where: dict[str, dict[str, int]]) -> Path | None:
    """OUT/<experiment>/PROVENANCE.md: the command, and the hosts, devices, engines and commits of its records (from
    records_where). A PROVENANCE.md without the GENERATED line (a recorded run's, written by hand) is left alone."""
    path = Path(exp_dir) / "PROVENANCE.md"
    if path.exists() and GENERATED not in path.read_text():
        return None
    n = sum(where["device"].values())
    lines = [
        GENERATED,
        f"# Provenance of {Path(exp_dir).name}",
        "",
        f"- last command: `{results._COMMAND or 'run_jobs from Python'}` (driver host {platform.node()!r}, "
        f"commit {git_sha()})",
        f"- records: runs/*.json, {n} job record(s); each names its own host, device, engine and commit",
    ]
    labels = {"host": "worker host", "gpu": "GPU", "driver_host": "driver host", "git_sha": "commit"}
    for key in WHERE_KEYS:
        if where.get(key):
            counts = ", ".join(f"{v} ({c})" for v, c in sorted(where[key].items()))
            lines.append(f"- {labels.get(key, key)}: {counts}")
    if len(where["device"]) > 1:
        lines.append(
            "- the records mix devices: their timings, and float results beyond rounding, are not of one device"
        )
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
