"""Jobs through submitit (executors.py): long-lived slots (slots.py) that take the jobs from a shared work folder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from symformer.runner import slots
from symformer.runner.engine import Engine
from symformer.runner.slots import slot_worker

SLOT_TIME_MIN = 24 * 60  # a submitit slot's time limit when --slurm-time is not given


class SubmititEngine(Engine):
    """Jobs through submitit: `--jobs` long-lived slots (one submitit job each, slots.py) that take the jobs from a
    shared work folder, so the Python start-up and the imports are paid once per slot, not once per job. The slots
    live as long as the engine (every run_jobs call of a `reproduce` run); `--slurm-time` is each slot's limit.

    A slot that ends under a job (its time limit, a node lost, the process killed) puts that job back in the queue,
    where another slot resumes it from its .partial/ checkpoints; a job that ends MAX_LOSSES slots fails alone
    (JobError names it). A slot that ends before it ran any job is not replaced: when none is left, the jobs still
    queued fail with its error (a worker that cannot start, e.g. symformer missing on the nodes)."""

    name = "submitit"
    MAX_LOSSES = 3

    def __init__(
        self,
        folder: Path,
        device: str = "cpu",
        partition: str | None = None,
        time_min: int | None = None,
        gpus_per_job: int = 0,
        cpus_per_job: int = 1,
        cluster: str | None = None,
    ):
        super().__init__(device)
        import submitit  # optional (the slurm extra): imported when this engine starts, never by `import symformer`

        t0 = time.perf_counter()
        self.folder = Path(folder).resolve()
        # cluster None: Slurm where `sbatch` is found, else submitit's LocalExecutor (subprocesses on this machine)
        try:
            self.ex = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster=cluster)
        except RuntimeError as e:  # e.g. SYMFORMER_SUBMITIT_CLUSTER=slurm where there is no Slurm
            raise ValueError(
                f"--executor submitit: got cluster {cluster!r}, which submitit cannot use here: {e}"
            ) from e
        # a slot runs job after job: without --slurm-time it gets a day, not submitit's default of 5 minutes
        params: dict[str, Any] = {"cpus_per_task": cpus_per_job, "gpus_per_node": gpus_per_job}
        params["timeout_min"] = SLOT_TIME_MIN if time_min is None else time_min
        if partition is not None:
            params["slurm_partition"] = partition
        self.ex.update_parameters(**params)
        self.queue: Any = None  # slots.Queue, made at the first run (a call that reuses every record needs none)
        self.slots: dict[str, Any] = {}  # slot id -> submitit job, while it runs
        self.ran_any: set[str] = set()  # slots that handed back at least one outcome
        self._count = {"batch": 0, "slot": 0}
        self._served: set[str] = set()  # records folders this engine's queue has run jobs for
        self.startup_seconds = time.perf_counter() - t0

    def describe(self) -> str:
        return f"submitit ({self.ex.cluster})"

    def _open(self) -> None:
        if self.queue is not None:
            return
        import uuid

        self.queue = slots.Queue(self.folder / f"queue-{uuid.uuid4().hex[:12]}")

    def _take_over(self, record_dir: Path | None) -> None:
        """The first batch for a records folder stops an earlier (killed) driver's queue for that folder."""
        key = str(Path(record_dir).resolve()) if record_dir is not None else None
        if key is None or key in self._served:
            return
        self._served.add(key)
        self.queue.serve(key)
        for old in slots.stop_old_queues(self.folder, self.queue.root, key):
            self._cancel_listed(old)

    def _cancel_listed(self, old: Path) -> None:
        """A killed driver's Slurm slots are cancelled (their running job is rerun here, from its checkpoints);
        its local slots only stop taking jobs (submitit's local jobs are this driver's children only)."""
        import submitit  # optional (the slurm extra), as in __init__

        for line in (old / "slots.txt").read_text().split() if (old / "slots.txt").exists() else []:
            if self.ex.cluster == "slurm":
                try:
                    submitit.SlurmJob(folder=str(self.folder / "%j"), job_id=line).cancel(check=False)
                except Exception:  # noqa: BLE001  (best effort: an ended job has nothing to cancel)
                    pass

    def _spawn(self, call: Callable, n: int) -> None:
        for _ in range(n):
            self._count["slot"] += 1
            sid = f"slot{self._count['slot']:03d}"
            job = self.ex.submit(slot_worker, str(self.queue.root), sid, call, self.name, self.device)
            self.slots[sid] = job
            with open(self.queue.root / "slots.txt", "a") as f:
                f.write(f"{job.job_id}\n")

    def run(self, todo, work, call, done, failed, n_workers, record_dir=None):
        self._open()
        self._take_over(record_dir)
        self._count["batch"] += 1
        pending: dict[str, Any] = {}
        for i, job in enumerate(todo):
            name = f"{self._count['batch']:04d}-{i:06d}-{job.key}"
            try:
                self.queue.put(name, job, work[job.key])
            except Exception as e:  # noqa: BLE001  (a job that does not pickle fails alone)
                failed.append((job.key, e))
                continue
            pending[name] = job
        try:
            self._collect(pending, call, done, failed, n_workers)
        except BaseException:  # Ctrl-C or an error here: what is recorded stays; the slots stop now
            self.queue.withdraw(pending)
            self._cancel()
            raise

    def _collect(self, pending: dict, call: Callable, done: Callable, failed: list, n_workers: int) -> None:
        lost: dict[str, int] = {}  # job name -> slots that ended under it; slot id -> jobs it lost
        self._spawn(call, max(0, min(n_workers, len(pending)) - len(self.slots)))
        nap = 0.005
        while pending:
            got = self._harvest(pending, done, failed)
            ended = [sid for sid, job in self.slots.items() if job.done()]
            for sid in ended:
                self._slot_ended(sid, pending, done, failed, lost)
            want = min(n_workers, len(pending)) - len(self.slots)
            replace = sum(1 for sid in ended if sid in self.ran_any or lost.get(sid))
            self._spawn(call, max(0, min(want, replace)))
            if pending and not self.slots:  # every slot ended before it ran a job: they would not start
                self.queue.withdraw(list(pending))
                why = self._last_error or "it ended before it ran a job"
                for name in sorted(pending):
                    failed.append((pending.pop(name).key, RuntimeError(f"no submitit worker left: {why}")))
            nap = 0.005 if got or ended else min(2 * nap, 0.25)
            time.sleep(0 if got else nap)

    def _harvest(self, pending: dict, done: Callable, failed: list) -> int:
        got = self.queue.outcomes(pending)
        for name, payload in got:
            job = pending.pop(name)
            self.ran_any.add(payload["slot"])
            try:
                done(job, payload["got"])
            except Exception as e:  # noqa: BLE001  (run_jobs raises JobError after the others are recorded)
                failed.append((job.key, e))
        return len(got)

    def _slot_ended(self, sid: str, pending: dict, done: Callable, failed: list, lost: dict) -> None:
        """A slot's submitit job ended: its outcomes are read, and the job it still held is put back or failed."""
        job = self.slots.pop(sid)
        self._harvest(pending, done, failed)  # what it finished just before it ended
        self._last_error = _ended_why(job)
        for name in self.queue.claims(sid):
            if name not in pending:
                continue
            lost[sid] = lost.get(sid, 0) + 1
            lost[name] = lost.get(name, 0) + 1
            if lost[name] >= self.MAX_LOSSES:
                err = RuntimeError(f"{lost[name]} submitit workers ended while running it; the last: {_ended_why(job)}")
                failed.append((pending.pop(name).key, err))
            else:
                self.queue.requeue(sid, name)

    _last_error: str | None = None

    def _cancel(self) -> None:
        for job in self.slots.values():
            try:
                job.cancel(check=False)
            except Exception:  # noqa: BLE001  (best effort: the driver is already stopping)
                pass
        self.slots.clear()
        if self.queue is not None:
            self.queue.stop(remove=False)
            self.queue = None

    def close(self) -> None:
        """STOP the queue and remove it: idle slots exit at their next look (they are not waited for)."""
        if self.queue is not None:
            self.queue.stop(remove=True)
            self.queue, self.slots = None, {}


def _ended_why(job: Any) -> str:
    """One line on why a slot's submitit job ended: its state and the tail of its error log (not job.exception(),
    which waits up to 30 s for the result file that a killed worker never writes)."""
    try:
        text = Path(job.paths.stderr).read_text(errors="replace")
    except OSError:
        text = ""
    tail = " ".join(text.split())[-300:] or "no error output"
    return f"submitit job {job.job_id} ({job.state}): {tail}"
