"""Independent sub-runs of an experiment: run them in worker processes, record each one atomically, resume.

A long experiment (the full `teleport` run trains ~150 small models) is a list of `Job`s. Each finished
job is written to OUT/<experiment>/runs/<key>.json (temporary file, fsync, os.replace), so a killed run
loses at most the jobs in flight; `symformer reproduce --resume` reuses the records whose function and
arguments match and runs the rest. Without --resume every job runs afresh (records of older code are
never reused silently). `jobs > 1` runs them in that many spawned processes with one intra-op thread each:
on small models one process per core is faster than intra-op threading, and each process times its own
runs, so per-run wall-time ratios (teleport overhead) stay meaningful.

A job that runs for hours (a PLASH horizon-168 Informer) sets `checkpoints=True`: it is then called with a
`work_dir` of its own, OUT/<experiment>/runs/.partial/<key>/, where it checkpoints as it goes and from which a
--resume call continues it; so a killed run loses minutes, not the job. The folder is removed once the record is
written, and a call without --resume starts the job afresh. `work_dir` is not part of the signature. The folder
also keeps what the earlier calls spent (records.spent), so the record of a job resumed over several sessions
sums all of them.

A job that raises does not cost the others: every other job still runs and is recorded, then `JobError` names
the failed job (its exception is the `__cause__`), and a --resume call after the fix runs only what failed.

Where the jobs run is the engine's business (executors.py: the pool of local_pool.py, submitit's long-lived slots
(slots.py), Ray; `reproduce --executor`); what is recorded, reused and raised is decided here, in the driver, the same
for every engine. Each record's provenance names the worker's host, the engine and the device beside the commit.

The protocol of a runs folder (runs/PLAN.json, `recorded_plan`) is checked in plan_record.py; what the records say of
where they ran (provenance, `records_where`, PROVENANCE.md) is made in records.py."""

from __future__ import annotations

import inspect
import json
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from symformer._validation import check_int, fail
from symformer.results import atomic_write_text, git_sha
from symformer.runner.engine import current_engine
from symformer.runner.local_pool import _init_worker, one_thread, run_pool  # noqa: F401  (one_thread: from here)
from symformer.runner.plan_record import (  # noqa: F401  (PlanMismatch, plan_digest, ...: importable from here)
    PLAN_FILE,
    PlanMismatch,
    _check_plan,
    plan_digest,
    recorded_plan,
)
from symformer.runner.records import (  # noqa: F401  (reuse_note, records_where, ...: importable from here)
    GENERATED,
    SPENT_FILE,
    WHERE_KEYS,
    provenance,
    records_where,
    reuse_note,
    spent,
    where_note,
    write_provenance,
)


@dataclass(frozen=True)
class Job:
    key: str  # file name stem: letters, digits, '.', '_', '-', '='
    fn: Callable[..., Any]  # a module-level function (workers import it by name)
    kwargs: dict = field(default_factory=dict)
    checkpoints: bool = False  # fn takes work_dir=<folder> and resumes from what it left there

    def signature(self) -> dict:
        return {"fn": f"{self.fn.__module__}.{self.fn.__qualname__}", "kwargs": self.kwargs}


def _load(path: Path, job: Job, digest: str | None = None) -> Any:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):  # absent, torn or not JSON: run the job again
        return None
    if not isinstance(rec, dict) or "result" not in rec:
        return None
    if digest is not None and rec.get("plan", digest) != digest:  # another protocol's record (unstamped: legacy)
        return None
    same = rec.get("signature") == json.loads(json.dumps(job.signature()))
    return rec["result"] if same else None


def _call(job: Job, work: Path | None = None, engine: str = "local", device: str = "cpu") -> tuple[Any, float, dict]:
    """(result, seconds, where it ran and what it cost): the host is the worker's, which on a cluster is not the
    driver's; the cost is records.spent's."""
    where = {"host": platform.node(), "machine": platform.machine(), "engine": engine, "device": device}
    if device == "cuda" or device.startswith("cuda:"):  # the GPU it ran on; a worker without one refuses the job
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {device}: worker host {platform.node()!r} has no CUDA device")
        where["gpu"] = torch.cuda.get_device_name(device)
    with spent(work) as cost:
        result = job.fn(**job.kwargs, **({} if work is None else {"work_dir": str(work)}))
    seconds = cost.pop("seconds")
    return result, seconds, {**where, **cost}


def _remote_call(job: Job, work: Path | None, engine: str, device: str) -> tuple[str, Any]:
    """_call in an engine's worker (executors.py), on one thread; an exception comes back as a value, so its own
    type reaches JobError.__cause__ whatever the engine does with errors (submitit keeps only the text)."""
    _init_worker()
    try:
        return "ok", _call(job, work, engine, device)
    except Exception as e:  # noqa: BLE001  (handed to the driver, which records the other jobs and raises JobError)
        return "error", e


def _unwrap(got: tuple[str, Any]) -> tuple[Any, float, dict]:
    status, value = got
    if status == "error":
        raise value
    return value


def _work_dir(job: Job, record_dir: Path | None, resume: bool) -> Path | None:
    """The job's checkpoint folder (None when it keeps none); emptied unless this call resumes the same job. The
    folder keeps the signature it was made for (signature.json): a --resume call whose job under that key has
    other arguments (another config, quick against full) starts afresh instead of reading the other job's
    checkpoints. A folder without the file (written before it existed) is adopted as it is."""
    if record_dir is None or not job.checkpoints:
        return None
    work = record_dir / ".partial" / job.key
    marker, sig = work / "signature.json", json.dumps(job.signature(), sort_keys=True)
    if not resume or (marker.exists() and marker.read_text() != sig):
        shutil.rmtree(work, ignore_errors=True)
    atomic_write_text(marker, sig)
    return work


def _has_checkpoints(work: Path) -> bool:
    """Whether a job's folder holds anything besides its signature and cost ledger (what it left when stopped)."""
    return work.exists() and any(p.name not in ("signature.json", SPENT_FILE) for p in work.iterdir())


def run_jobs(
    jobs: list[Job],
    record_dir: Path | None = None,
    n_workers: int = 1,
    resume: bool = False,
    stats: dict | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """{key: fn(**kwargs)} for every job; results must be JSON-serialisable when record_dir is given.
    `stats`, when given, accumulates how many jobs were "reused" from records and how many "ran"; `log`, when
    given, hears what is reused and each job as it finishes (a recorded run takes hours)."""
    check_int("n_workers", n_workers, 1)
    keys = [j.key for j in jobs]
    if len(set(keys)) != len(keys):
        fail("jobs", "duplicate keys", "one job per key")
    bad = [k for k in keys if not k or any(not (c.isalnum() or c in "._-=") for c in k)]
    if bad:
        fail("jobs", f"key {bad[0]!r}", "keys made of letters, digits, '.', '_', '-', '='")
    out: dict[str, Any] = {}
    digest = None
    if record_dir is not None:
        git_sha()  # the commit of the code this process imported, before a job runs for hours (results.git_sha)
        record_dir.mkdir(parents=True, exist_ok=True)
        digest = _check_plan(record_dir)
        for j in jobs:
            got = _load(record_dir / f"{j.key}.json", j, digest) if resume else None
            if got is not None:
                out[j.key] = got
    todo = [j for j in jobs if j.key not in out]
    if stats is not None:
        stats["reused"] = stats.get("reused", 0) + len(out)
        stats["ran"] = stats.get("ran", 0) + len(todo)

    work = {j.key: _work_dir(j, record_dir, resume) for j in todo}
    engine = current_engine()
    remote = engine is not None and engine.name != "local"
    device = "cpu" if engine is None else engine.device
    if log is not None and todo:
        partial = sum(1 for w in work.values() if w is not None and _has_checkpoints(w))
        log(
            f"{len(out)} of {len(jobs)} jobs reused from records, running {len(todo)} "
            f"({partial} resume from checkpoints) on {min(n_workers, len(todo))} "
            f"{'worker(s)' if not remote else 'slot(s) of ' + engine.describe()}"
        )

    def done(job: Job, called: tuple[Any, float, dict]) -> None:
        result, seconds, where = called
        out[job.key] = result
        if record_dir is not None:
            # json.dumps, not results.write_json: NaN must read back as NaN, not as the string "nan"
            # (provenance.seconds: this call's wall time; a job resumed from its checkpoints also gets the sums over
            # every call that worked on it, seconds_all_parts and cpu_seconds_all_parts: records.spent)
            rec = {
                "signature": job.signature(),
                "result": result,
                "provenance": provenance(seconds, where),
                **({} if digest is None else {"plan": digest}),
            }
            atomic_write_text(record_dir / f"{job.key}.json", json.dumps(rec))
            if work[job.key] is not None:  # recorded: its checkpoints are no longer needed
                shutil.rmtree(work[job.key], ignore_errors=True)
        if log is not None:
            log(f"job {job.key} done in {seconds:.0f} s ({len(out)} of {len(jobs)})")

    failed: list[tuple[str, BaseException]] = []
    if todo:  # everything reused (a resumed batch that had finished): no pool of zero workers
        _dispatch(todo, work, n_workers, done, failed, engine, device, record_dir)
    if failed:
        # one failing job does not throw away the others: every job that finished is recorded (a --resume call
        # after the fix reruns only the failed ones), then the first failure is raised, naming its job
        key, err = failed[0]
        raise JobError(
            f"job {key!r} failed ({type(err).__name__}: {err}); {len(failed)} of {len(todo)} jobs "
            f"failed, the other {len(todo) - len(failed)} finished and are recorded"
        ) from err
    return {k: out[k] for k in keys}


def _dispatch(todo: list[Job], work: dict, n_workers: int, done: Callable, failed: list, engine, device, record_dir):
    """Run `todo` on `engine` (None or the local Engine: here, or in the local pool); `done` records each job,
    `failed` collects."""
    if engine is not None and engine.name != "local":
        # paths made absolute: an engine's worker need not start in the driver's folder
        absolute = {k: None if w is None else w.resolve() for k, w in work.items()}
        engine.run(todo, absolute, _remote_call, lambda j, got: done(j, _unwrap(got)), failed, n_workers, record_dir)
    elif n_workers == 1 or len(todo) == 1:
        # in this process but with the workers' single thread, so a job's numbers depend neither on --jobs nor on
        # how many jobs were left (a resumed run must reproduce an uninterrupted one bit for bit)
        with one_thread():
            for j in todo:
                try:
                    done(j, _call(j, work[j.key], "local", device))
                except Exception as e:  # noqa: BLE001  (re-raised by run_jobs, after the other jobs are recorded)
                    failed.append((j.key, e))
    else:
        run_pool(todo, work, n_workers, _call, done, failed, device, engine)


class JobFunction:
    """A job's function under the name its records carry. `Job.signature` names the function by module and
    qualname, and --resume reuses a record only when the signature matches: `name` keeps the signature of the
    recorded runs folders (results/<experiment>/runs) when the code moves to another module. `device` is where the
    job builds its model and batches (RunContext.device); it is passed to `fn` as `device=` when `fn` takes it, and
    is not part of the signature (each record's provenance names the device it ran on)."""

    def __init__(self, fn: Callable[..., Any], name: str, device: str = "cpu"):
        self.fn, self.device = fn, device
        self.__module__, _, self.__qualname__ = name.rpartition(".")
        self.takes_device = "device" in inspect.signature(fn).parameters

    @property
    def name(self) -> str:
        return f"{self.__module__}.{self.__qualname__}"

    def on(self, device: str) -> "JobFunction":
        """The same job function, run on `device`."""
        return JobFunction(self.fn, self.name, device)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.takes_device:
            kwargs.setdefault("device", self.device)
        return self.fn(*args, **kwargs)

    def __eq__(self, other: object) -> bool:  # Jobs compare by their fields: the same function on the same device
        if not isinstance(other, JobFunction):
            return NotImplemented
        return (self.fn, self.name, self.device) == (other.fn, other.name, other.device)

    def __hash__(self) -> int:
        return hash((self.name, self.device))

    def __repr__(self) -> str:
        return f"JobFunction({self.name}, device={self.device!r})"


class JobError(RuntimeError):
    """A job of run_jobs raised; the message names it, and the original exception is its __cause__."""
