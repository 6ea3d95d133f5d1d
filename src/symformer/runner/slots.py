"""A work folder that long-lived workers ("slots") take jobs from: how `--executor submitit` pays Python's start-up
and the imports once per slot instead of once per job.

submitit starts a fresh Python process for every job it runs (a Slurm job, or a subprocess of its LocalExecutor),
which for short jobs (those of `reproduce teleport --quick`) costs more than the jobs themselves. So the submitit
engine submits one submitit job per slot (`--jobs` of them), each running `slot_worker`, and hands the jobs over
through a folder on the file system the driver and the workers share (the one Slurm clusters already share for
submitit's own pickles):

    queue/todo/<name>         a queued job (cloudpickle of (Job, work_dir)); written atomically by the driver
    queue/claimed/<slot>/     the job a slot is running: it claims one with os.rename out of todo/, which is atomic,
                              so of two slots that try the same file exactly one gets it
    queue/done/<name>         the job's outcome, ("ok", ...) or ("error", exception), written atomically by the slot
    queue/driver.alive        touched every few seconds by the driver while its engine is open
    queue/STOP                the driver is done with this queue: idle slots exit
    queue/records.txt         the records folders (OUT/<experiment>/runs) its jobs are for

Nothing here records anything: the driver reads done/, and run_jobs writes the record (jobs.py). A slot stops when
STOP appears or when driver.alive has not moved for SYMFORMER_SLOT_STALE_S seconds (default 300, longer than NFS
attribute caching) of the slot's own clock, so a killed driver's slots do not keep claiming jobs nobody records. The
order of names in todo/ is the order of submission (slots claim the smallest name first)."""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

STALE_ENV = "SYMFORMER_SLOT_STALE_S"
DEFAULT_STALE_S = 300.0
BEAT_S = 5.0  # the driver's heartbeat period
MAX_NAP_S = 0.25  # the longest a slot or the driver sleeps between looks at the folder


def atomic_pickle(path: Path, obj: Any) -> None:
    """cloudpickle (functions of a module the worker cannot import travel by value) to a temporary file, fsync,
    os.replace: a reader sees the whole file or none."""
    import cloudpickle  # comes with submitit (the slurm extra): only its slots pickle jobs

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        cloudpickle.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _load(path: Path) -> Any:
    with open(path, "rb") as f:
        return pickle.load(f)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _claim(queue: Path, mine: Path) -> Path | None:
    """The first queued job this slot wins (None when todo/ is empty)."""
    try:
        names = sorted(n for n in os.listdir(queue / "todo") if not n.startswith("."))
    except FileNotFoundError:
        return None
    for name in names:
        try:
            os.rename(queue / "todo" / name, mine / name)
        except FileNotFoundError:  # another slot won it, or the driver withdrew it
            continue
        return mine / name
    return None


def _run_claimed(claimed: Path, queue: Path, slot: str, call: Callable, engine: str, device: str) -> None:
    """Run one claimed job and write its outcome to done/; the claim goes only after the outcome is written."""
    try:
        job, work = _load(claimed)
        got = call(job, work, engine, device)
    except Exception as e:  # noqa: BLE001  (a job that cannot be loaded here fails alone, named by the driver)
        got = ("error", e)
    if got[0] == "error" and _slot_interrupted(got[1]):
        raise got[1]  # the slot's time is up: it ends holding the claim, and the driver puts the job back
    try:
        atomic_pickle(queue / "done" / claimed.name, {"slot": slot, "got": got})
    except Exception as e:  # noqa: BLE001  (an outcome that does not pickle: its text still reaches JobError)
        text = RuntimeError(f"the job's outcome could not be handed back ({type(e).__name__}: {e}): {got[1]!r}"[:2000])
        atomic_pickle(queue / "done" / claimed.name, {"slot": slot, "got": ("error", text)})
    claimed.unlink()


def _slot_interrupted(err: BaseException) -> bool:
    """Whether a job's error is submitit stopping the slot (its time limit: the signal handler raises in whatever
    frame runs), not the job's own failure."""
    try:
        from submitit.core.utils import UncompletedJobError  # optional (the slurm extra)
    except ImportError:
        return False
    return isinstance(err, UncompletedJobError)


def slot_worker(queue: str, slot: str, call: Callable, engine: str, device: str) -> int:
    """One long-lived worker (what a submitit job of the engine runs): claim queued jobs, run each through `call`
    (jobs._remote_call) and hand its outcome back in done/, until STOP or a stale driver; the number of jobs run."""
    root = Path(queue)
    mine = root / "claimed" / slot
    mine.mkdir(parents=True, exist_ok=True)
    stale = float(os.environ.get(STALE_ENV, DEFAULT_STALE_S))
    beat, seen, ran, nap = _mtime(root / "driver.alive"), time.monotonic(), 0, 0.005
    for name in sorted(n for n in os.listdir(mine) if not n.startswith(".")):  # requeued by Slurm after preemption
        _run_claimed(mine / name, root, slot, call, engine, device)
        ran += 1
    while not (root / "STOP").exists() and (root / "todo").is_dir():  # STOP, or the driver removed the queue
        claimed = _claim(root, mine)
        if claimed is not None:
            _run_claimed(claimed, root, slot, call, engine, device)
            ran, nap = ran + 1, 0.005
            continue
        now = _mtime(root / "driver.alive")
        if now != beat:
            beat, seen = now, time.monotonic()
        elif time.monotonic() - seen > stale:
            break  # the driver stopped beating (killed): nobody would record what this slot runs
        time.sleep(nap)
        nap = min(2 * nap, MAX_NAP_S)
    return ran


class Queue:
    """The driver's side of one work folder: enqueue, read outcomes, put back or withdraw jobs, beat, stop."""

    def __init__(self, root: Path):
        self.root = root
        for sub in ("todo", "claimed", "done"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "driver.alive").touch()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._beating, daemon=True)
        self._beat.start()

    def _beating(self) -> None:
        while not self._stop.wait(BEAT_S):
            try:
                os.utime(self.root / "driver.alive")
            except OSError:
                return

    def serve(self, record_dir: str) -> None:
        """Note that this queue's jobs write into `record_dir` (what a restarted driver looks for)."""
        with open(self.root / "records.txt", "a") as f:
            f.write(record_dir + "\n")

    def put(self, name: str, job: Any, work: Path | None) -> None:
        atomic_pickle(self.root / "todo" / name, (job, work))

    def outcomes(self, names) -> list[tuple[str, dict]]:
        """(name, {"slot", "got"}) for each finished job among `names`, each read once (its file is removed)."""
        out = []
        for name in sorted(set(os.listdir(self.root / "done")) & set(names)):
            path = self.root / "done" / name
            out.append((name, _load(path)))
            path.unlink()
        return out

    def claims(self, slot: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root / "claimed" / slot) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def requeue(self, slot: str, name: str) -> None:
        """A job whose slot ended under it goes back to the front of the queue (it resumes from its checkpoints)."""
        os.rename(self.root / "claimed" / slot / name, self.root / "todo" / name)

    def withdraw(self, names) -> None:
        """Take this batch's unclaimed jobs out of the queue (the driver is stopping)."""
        for name in names:
            try:
                os.unlink(self.root / "todo" / name)
            except FileNotFoundError:
                pass

    def stop(self, remove: bool) -> None:
        self._stop.set()
        (self.root / "STOP").touch()
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def stop_old_queues(folder: Path, keep: Path, record_dir: str) -> list[Path]:
    """STOP every other queue under `folder` that served `record_dir` (an earlier driver's of the same experiment,
    killed): its slots take no further job and exit after the one they run; that job's outcome is not recorded, and
    this driver runs it again. A queue of another experiment's driver (one running beside this one into the same
    --out) is left alone. Returns the queues stopped."""
    old = []
    for q in sorted(folder.glob("queue-*")):
        if q == keep or not q.is_dir() or (q / "STOP").exists() or not (q / "records.txt").exists():
            continue
        if record_dir in (q / "records.txt").read_text().splitlines():
            (q / "STOP").touch()
            old.append(q)
    return old
