"""The engines that run an experiment's jobs: the local process pool (default), submitit (Slurm, or submitit's
own local executor) and Ray. None of them is a scheduler of ours; each only hands `run_jobs`' jobs to an engine
the user already runs and gives back what each job returned.

The job model does not change with the engine (jobs.py): the driver, never the engine's worker, writes each
record from the result the engine hands back, so a record is written atomically once, in one place, and a killed
driver loses nothing that finished. A job's exception travels back as a value (jobs._remote_call), so its type
survives the engine's transport and `JobError.__cause__` is the job's own error, as with the local pool.

`--jobs N` is how many jobs are in flight at a time on every engine: N worker processes (local), N submitit jobs
that each run one job at a time from a shared work folder (slots.py), N Ray tasks at a time (the driver submits the
next when one finishes); so a local comparison of the engines runs the same number of jobs side by side, and on a
cluster N is as many as the cluster should run at once.

Interrupting the driver (Ctrl-C, or an exception) cancels the jobs and slots it submitted that are still running
(submitit's `job.cancel()`, `ray.cancel`). A driver killed outright (SIGKILL, a lost login node) cannot: what it had
recorded stays, and what its workers finish afterwards is not recorded (only a driver records). A restarted driver
with --resume reuses every record and reruns each unrecorded job, from its .partial/ checkpoints where it keeps
them: it does not wait for the old driver's jobs. On submitit its first batch for a records folder stops the queue
an earlier driver kept for that folder, so the old slots take no further job, and cancels the old Slurm slots
(scancel), so no job runs twice on Slurm (a driver of another experiment into the same --out is left alone); submitit's
local slots (children of the killed driver) finish the one job they run and exit. On Ray a task that was running
when the driver died may run to its end unrecorded; for jobs that checkpoint, let it end or stop it (on a cluster:
restart it, or `ray stop` on a local one) before resuming, or two runs of one job write the same .partial/ folder."""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable

EXECUTORS = ("local", "submitit", "ray")
EXTRAS = {"submitit": ("submitit", "slurm"), "ray": ("ray", "ray")}  # engine: (module, symformer extra)


class Engine:
    """The local process pool (run_jobs' own code path): `run` is never called on it."""

    name = "local"
    startup_seconds = 0.0

    def __init__(self, device: str = "cpu"):
        self.device = device

    def describe(self) -> str:
        return self.name

    def run(
        self, todo: list, work: dict, call: Callable, done: Callable, failed: list, n_workers: int, record_dir=None
    ) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Throttled(Engine):
    """Submit at most `n_workers` jobs at a time; `_submit(job, work)` returns a handle, `_wait(handles)` one
    finished handle, `_result(handle)` what the job returned, `_cancel(handles)` stops the rest."""

    def run(self, todo, work, call, done, failed, n_workers, record_dir=None):
        queue, running = list(todo), {}
        try:
            while queue or running:
                while queue and len(running) < n_workers:
                    job = queue.pop(0)
                    running[self._submit(call, job, work[job.key])] = job
                handle = self._wait(list(running))
                job = running.pop(handle)
                try:
                    done(job, self._result(handle))
                except Exception as e:  # noqa: BLE001  (run_jobs raises JobError after the others are recorded)
                    failed.append((job.key, e))
        except BaseException:
            self._cancel(list(running))
            raise


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
        import submitit

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

        from symformer.experiments import slots

        self.queue = slots.Queue(self.folder / f"queue-{uuid.uuid4().hex[:12]}")

    def _take_over(self, record_dir: Path | None) -> None:
        """The first batch for a records folder stops an earlier (killed) driver's queue for that folder."""
        from symformer.experiments import slots

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
        import submitit

        for line in (old / "slots.txt").read_text().split() if (old / "slots.txt").exists() else []:
            if self.ex.cluster == "slurm":
                try:
                    submitit.SlurmJob(folder=str(self.folder / "%j"), job_id=line).cancel(check=False)
                except Exception:  # noqa: BLE001  (best effort: an ended job has nothing to cancel)
                    pass

    def _spawn(self, call: Callable, n: int) -> None:
        from symformer.experiments.slots import slot_worker

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


class RayEngine(_Throttled):
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        device: str = "cpu",
        n_workers: int = 1,
        gpus_per_job: int = 0,
        cpus_per_job: int = 1,
    ):
        super().__init__(device)
        import ray

        self.ray, self.started = ray, False
        t0 = time.perf_counter()
        if address is None:  # a local instance for this driver, with a small object store (results are small)
            ray.init(
                num_cpus=n_workers * cpus_per_job,
                object_store_memory=80 * 2**20,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self.started = True
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        self.startup_seconds = time.perf_counter() - t0
        self.options = {"num_cpus": cpus_per_job, "num_gpus": gpus_per_job, "max_retries": 0}
        self.address = address

    def describe(self) -> str:
        return f"ray ({self.address or 'local instance'})"

    def _submit(self, call, job, work):
        if getattr(self, "_remote", (None, None))[0] is not call:  # one remote function: Ray exports it once
            self._remote = (call, self.ray.remote(**self.options)(call))
        return self._remote[1].remote(job, work, self.name, self.device)

    def _wait(self, handles):
        ready, _ = self.ray.wait(handles, num_returns=1)
        return ready[0]

    def _result(self, handle):
        return self.ray.get(handle)

    def _cancel(self, handles):
        for h in handles:
            try:
                self.ray.cancel(h, force=True)
            except Exception:  # noqa: BLE001  (best effort: the driver is already stopping)
                pass

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()


def _check_reachable(address: str) -> None:
    """A refusal in seconds instead of ray.init's long retries: the head's host:port must accept a connection."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    ok = bool(host) and port.isdigit()
    if ok:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError:
            ok = False
    if not ok:
        raise ValueError(
            f"--ray-address: got {address!r}, expected the host:port (or ray://host:port) of a "
            "running Ray head that this machine can reach; leave it out to start a local instance"
        )


def check_device(device: str) -> None:
    """`--device`: cpu, or cuda where torch finds a CUDA device; a ValueError of one line otherwise."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device: got {device!r}, expected cpu or cuda")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                "--device: got 'cuda', expected a CUDA device, and torch finds none on this machine (give --device cpu)"
            )


def make_engine(
    name: str,
    folder: Path,
    n_workers: int = 1,
    device: str = "cpu",
    partition: str | None = None,
    time_min: int | None = None,
    gpus_per_job: int | None = None,
    cpus_per_job: int = 1,
    ray_address: str | None = None,
) -> Engine:
    """The engine `reproduce --executor NAME` runs on; bad input is a ValueError of one line naming the option.
    `gpus_per_job` None: one GPU per job (slot) on submitit and Ray with --device cuda, else none."""
    import importlib.util

    if name not in EXECUTORS:
        raise ValueError(f"--executor: got {name!r}, expected one of {', '.join(EXECUTORS)}")
    if gpus_per_job is None:
        gpus_per_job = 1 if device == "cuda" and name != "local" else 0
    if gpus_per_job and device != "cuda":
        raise ValueError(
            f"--gpus-per-job: got {gpus_per_job} with --device {device}, expected --device cuda "
            "(GPUs are reserved only for jobs that run on them)"
        )
    if gpus_per_job < 0 or cpus_per_job < 1:
        raise ValueError(f"--gpus-per-job/--cpus-per-job: got {gpus_per_job}/{cpus_per_job}, expected >= 0 / >= 1")
    import shutil

    cluster = os.environ.get("SYMFORMER_SUBMITIT_CLUSTER") or ("slurm" if shutil.which("sbatch") else "local")
    elsewhere = (name == "submitit" and cluster != "local") or (name == "ray" and ray_address is not None)
    if not (device == "cuda" and elsewhere):  # a cluster's driver (a login node) need not have its jobs' GPUs
        check_device(device)
    if name == "local":
        for opt, val in (("--slurm-partition", partition), ("--slurm-time", time_min), ("--ray-address", ray_address)):
            if val is not None:
                raise ValueError(
                    f"{opt}: got {val!r} with --executor local, expected --executor "
                    f"{'ray' if opt == '--ray-address' else 'submitit'}"
                )
        return Engine(device)
    module, extra = EXTRAS[name]
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"--executor {name}: needs {module}, not installed here (pip install 'symformer[{extra}]')")
    if name == "submitit":
        if ray_address is not None:
            raise ValueError(f"--ray-address: got {ray_address!r} with --executor submitit, expected --executor ray")
        return SubmititEngine(
            folder,
            device,
            partition,
            time_min,
            gpus_per_job,
            cpus_per_job,
            cluster,
        )
    for opt, val in (("--slurm-partition", partition), ("--slurm-time", time_min)):
        if val is not None:
            raise ValueError(f"{opt}: got {val!r} with --executor ray, expected --executor submitit")
    if ray_address is not None:
        _check_reachable(ray_address)
    return RayEngine(ray_address, device, n_workers, gpus_per_job, cpus_per_job)


_ENGINE: ContextVar[Engine | None] = ContextVar("symformer_engine", default=None)


def current_engine() -> Engine | None:
    """The engine of the `reproduce` call running in this context (None: run_jobs' local pool)."""
    return _ENGINE.get()


@contextmanager
def using_engine(engine: Engine, close: bool = True):
    """Inside: run_jobs hands its jobs to `engine` (the local Engine keeps the process pool); closed after unless
    `close` is False (an engine shared by several calls, e.g. one Ray instance)."""
    token = _ENGINE.set(engine)
    try:
        yield engine
    finally:
        _ENGINE.reset(token)
        if close:
            engine.close()
