"""The protocol of a runs folder (runs/PLAN.json), which run_jobs (jobs.py) checks and stamps on its records.

A runs folder belongs to one protocol. `recorded_plan` (entered by every registered experiment, base.py) names
it: the experiment, its declared protocol version, --quick, --seed, --full and the options. The first run_jobs
call into that folder writes it as runs/PLAN.json and stamps each record with its digest. Rule:
- --resume into a folder whose PLAN.json differs refuses (ValueError, one line naming the folder and the
  difference: the CLI prints it and exits 2), so a quick run is never resumed into a full one, nor one
  protocol version into another;
- --resume into a folder without PLAN.json (records written before it existed, e.g. results/fact-recall) is
  compatible: the records are reused by their signatures as before, and PLAN.json is written;
- without --resume the plan is (re)written, and a record stamped with another plan's digest is never reused,
  so a fresh run that was killed in an old protocol's folder does not later mix the two."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from symformer.results import atomic_write_text

PLAN_FILE = "PLAN.json"
# (runs folder, plan, resume) of the experiment running in this context (recorded_plan), checked by run_jobs
_PLAN: ContextVar[tuple[Path, dict, bool] | None] = ContextVar("symformer_plan", default=None)


class PlanMismatch(ValueError):
    """--resume into a runs folder that another protocol wrote."""


def plan_digest(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]


@contextmanager
def recorded_plan(record_dir: Path, plan: dict, resume: bool):
    """Inside: run_jobs calls into `record_dir` check and write its PLAN.json and stamp their records (the rule
    is in the module docstring). The folder is touched only when a run_jobs call uses it."""
    token = _PLAN.set((Path(record_dir), json.loads(json.dumps(plan, sort_keys=True)), resume))
    try:
        yield
    finally:
        _PLAN.reset(token)


def _plan_difference(old: Any, new: dict) -> str:
    if not isinstance(old, dict):
        return f"{PLAN_FILE} is not a plan"
    keys = sorted(set(old) | set(new))
    return "; ".join(
        f"{k}: {json.dumps(old.get(k))} there, {json.dumps(new.get(k))} here" for k in keys if old.get(k) != new.get(k)
    )


def _check_plan(record_dir: Path) -> str | None:
    """The digest that this run's records carry (None outside recorded_plan or for another folder)."""
    got = _PLAN.get()
    if got is None or got[0].resolve() != record_dir.resolve():
        return None
    _, plan, resume = got
    path = record_dir / PLAN_FILE
    if resume and path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None
        if old != plan:
            raise PlanMismatch(
                f"--resume: {record_dir} holds the runs of another protocol "
                f"({_plan_difference(old, plan)}); give another --out, or drop --resume to rerun "
                "every point there"
            )
    if not path.exists() or path.read_text() != json.dumps(plan, sort_keys=True, indent=1):
        atomic_write_text(path, json.dumps(plan, sort_keys=True, indent=1))
    return plan_digest(plan)
