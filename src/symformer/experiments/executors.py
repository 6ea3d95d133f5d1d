"""The engines that run an experiment's jobs: the local process pool (default), submitit (Slurm, or submitit's
own local executor) and Ray. None of them is a scheduler of ours; each only hands `run_jobs`' jobs to an engine
the user already runs and gives back what each job returned.

The job model does not change with the engine (jobs.py): the driver, never the engine's worker, writes each
record from the result the engine hands back, so a record is written atomically once, in one place, and a killed
driver loses nothing that finished. A job's exception travels back as a value (jobs._remote_call), so its type
survives the engine's transport and `JobError.__cause__` is the job's own error, as with the local pool.

`--jobs N` is how many jobs are in flight at a time on every engine (the driver submits the next one when one
finishes), so a local comparison of the engines runs the same number of jobs side by side; on a cluster give it
as many as the cluster should run at once.

Interrupting the driver (Ctrl-C, or an exception) cancels the jobs it submitted that are still running (submitit's
`job.cancel()`, `ray.cancel`). A driver killed outright (SIGKILL, a lost login node) cannot: its Slurm jobs keep
running until they end, and their results are not recorded (only a driver records). A restarted driver with
--resume reuses every record and reruns each unrecorded job (from its .partial/ checkpoints where it keeps them);
it does not wait for the old submissions. Cancel those first (`scancel`), or two jobs will write the same
.partial/ folder."""

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

    def run(self, todo: list, work: dict, call: Callable, done: Callable, failed: list, n_workers: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Throttled(Engine):
    """Submit at most `n_workers` jobs at a time; `_submit(job, work)` returns a handle, `_wait(handles)` one
    finished handle, `_result(handle)` what the job returned, `_cancel(handles)` stops the rest."""

    def run(self, todo, work, call, done, failed, n_workers):
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


class SubmititEngine(_Throttled):
    name = "submitit"

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
        # cluster None: Slurm where `sbatch` is found, else submitit's LocalExecutor (subprocesses on this machine)
        self.ex = submitit.AutoExecutor(folder=str(Path(folder).resolve() / "%j"), cluster=cluster)
        params: dict[str, Any] = {"cpus_per_task": cpus_per_job, "gpus_per_node": gpus_per_job}
        if time_min is not None:
            params["timeout_min"] = time_min
        if partition is not None:
            params["slurm_partition"] = partition
        self.ex.update_parameters(**params)
        self.startup_seconds = time.perf_counter() - t0

    def describe(self) -> str:
        return f"submitit ({self.ex.cluster})"

    def _submit(self, call, job, work):
        return self.ex.submit(call, job, work, self.name, self.device)

    def _wait(self, handles):
        while True:
            for h in handles:
                if h.done():
                    return h
            time.sleep(0.05)

    def _result(self, handle):
        return handle.result()

    def _cancel(self, handles):
        for h in handles:
            try:
                h.cancel(check=False)
            except Exception:  # noqa: BLE001  (best effort: the driver is already stopping)
                pass


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
    """`--device`: cpu, or cuda where a CUDA device is present; a ValueError of one line otherwise."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device: got {device!r}, expected cpu or cuda")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                "--device: got 'cuda', expected a CUDA device, and torch finds none on this machine (give --device cpu)"
            )
        # the experiments build their models on the CPU today: a record must never claim a device it did not use
        raise ValueError(
            "--device: got 'cuda', expected cpu: the experiments do not yet place their jobs on a GPU "
            "(issue 46, item 3)"
        )


def make_engine(
    name: str,
    folder: Path,
    n_workers: int = 1,
    device: str = "cpu",
    partition: str | None = None,
    time_min: int | None = None,
    gpus_per_job: int = 0,
    cpus_per_job: int = 1,
    ray_address: str | None = None,
) -> Engine:
    """The engine `reproduce --executor NAME` runs on; bad input is a ValueError of one line naming the option."""
    import importlib.util

    check_device(device)
    if name not in EXECUTORS:
        raise ValueError(f"--executor: got {name!r}, expected one of {', '.join(EXECUTORS)}")
    if gpus_per_job and device != "cuda":
        raise ValueError(
            f"--gpus-per-job: got {gpus_per_job} with --device {device}, expected --device cuda "
            "(GPUs are reserved only for jobs that run on them)"
        )
    if gpus_per_job < 0 or cpus_per_job < 1:
        raise ValueError(f"--gpus-per-job/--cpus-per-job: got {gpus_per_job}/{cpus_per_job}, expected >= 0 / >= 1")
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
            os.environ.get("SYMFORMER_SUBMITIT_CLUSTER") or None,
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
