"""The engine interface that run_jobs (jobs.py) hands its jobs to, and the engine of the running `reproduce` call
(executors.py makes the engines: the local pool, submitit_engine.py, ray_engine.py)."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable


class Engine:
    """The local process pool (run_jobs' own code path): `run` is never called on it. It keeps run_jobs' pool
    (`kept`, made in local_pool.py) from one run_jobs call to the next, so an experiment that calls run_jobs several
    times, or a `reproduce` of several experiments, spawns its workers and imports torch in them once; `close`
    shuts it down."""

    name = "local"
    startup_seconds = 0.0

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.kept = None  # local_pool._KeptPool, or None before the first pool (and after a broken or interrupted one)

    def describe(self) -> str:
        return self.name

    def run(
        self, todo: list, work: dict, call: Callable, done: Callable, failed: list, n_workers: int, record_dir=None
    ) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.kept is not None:
            self.kept.shutdown()
            self.kept = None


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
