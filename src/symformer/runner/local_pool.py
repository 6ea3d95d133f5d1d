"""run_jobs' local process pool (jobs.py): spawned workers with one intra-op thread each, which exit with their
driver, kept by the local engine (engine.Engine.kept) from one run_jobs call to the next, so that an experiment that
calls run_jobs several times, or a `reproduce` of several experiments, spawns its workers and imports torch in them
once."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import active_children, get_context
from typing import Callable


def _init_worker(driver: int | None = None) -> None:
    """One thread per worker; a local pool's worker (`driver`: the driver's pid) also exits with its driver."""
    import torch

    torch.set_num_threads(1)
    if driver is not None:
        threading.Thread(target=_exit_with_driver, args=(driver,), daemon=True, name="exit-with-driver").start()


def _exit_with_driver(driver: int) -> None:
    """Exit within a second of the driver's death. A SIGKILLed driver (kill -9, the OOM killer) cannot stop its
    workers: each would finish its job unrecorded, writing the checkpoints a resumed driver's worker writes too,
    then wait on the task queue forever. The job's checkpoints stay; --resume continues from them."""
    while os.getppid() == driver:
        time.sleep(1.0)
    os._exit(1)


@contextmanager
def one_thread():
    """One intra-op thread inside, the caller's setting restored after: small models run as fast on one thread
    and do not oversubscribe the cores (run_jobs' workers use one each, so a job's numbers never depend on it)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class _KeptPool:
    """A local pool of `size` spawned workers; `workers` are the driver's children it started (for Ctrl-C)."""

    pool: ProcessPoolExecutor
    size: int
    before: set

    def workers(self) -> set:
        return set(active_children()) - self.before

    def shutdown(self) -> None:
        self.pool.shutdown()

    def terminate(self) -> None:
        """Stop now: queued jobs are cancelled and the workers terminated, mid-job (their checkpoints stay)."""
        # a second Ctrl-C (or another worker's interrupt) must not cut the clean-up short and leave workers running
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self._stop_workers()
            self.pool.shutdown(wait=True)  # its manager thread sees the workers gone and exits
            self._stop_workers()  # and any worker that was still starting when the first round looked
        finally:
            if main:
                signal.signal(signal.SIGINT, old)

    def _stop_workers(self) -> None:
        """Terminate every worker and wait until none is alive: a spawn-context pool starts workers on demand, so one
        may start after a snapshot, and a join can return before its process is gone (an interrupted wait)."""
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            own = dict(getattr(self.pool, "_processes", None) or {}).values()  # a worker not yet an active child
            stop = {p for p in self.workers() | set(own) if p.is_alive()}
            if not stop:
                return
            for proc in stop:
                proc.terminate()
            for proc in stop:
                proc.join(1.0)


def _pool(n: int, engine) -> _KeptPool:
    """A pool of at least n workers: the local engine's kept one where it is large enough, else a new one (which
    the engine then keeps in place of the smaller)."""
    kept = None if engine is None else engine.kept
    if kept is not None and kept.size >= n:
        return kept
    if kept is not None:
        kept.shutdown()
    before = set(active_children())
    ctx = get_context("spawn")
    pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),))
    kept = _KeptPool(pool, n, before)
    if engine is not None:
        engine.kept = kept
    return kept


def run_pool(
    todo: list, work: dict, n_workers: int, call: Callable, done: Callable, failed: list, device: str, engine
) -> None:
    """`call(job, work_dir, "local", device)` for each job in spawned worker processes (one thread each); `done`
    records each, `failed` collects errors. With the local `engine` the pool outlives this call (Engine.kept), and
    is dropped once broken or interrupted."""
    kept = _pool(min(n_workers, len(todo)), engine)
    try:
        futures = {kept.pool.submit(call, j, work[j.key], "local", device): j for j in todo}
        for f in as_completed(futures):
            try:
                done(futures[f], f.result())
            except Exception as e:  # noqa: BLE001  (re-raised by run_jobs after the other jobs are recorded)
                failed.append((futures[f].key, e))
    except BaseException:
        # Ctrl-C (or a kill) stops the run now: a worker hands a KeyboardInterrupt back as its job's result and
        # takes the next job, and the pool's exit would wait for every queued job. What is recorded stays, and
        # the jobs in flight resume from their checkpoints (--resume).
        kept.terminate()
        _drop(kept, engine)
        raise
    if engine is None:
        kept.shutdown()
    elif any(isinstance(e, BrokenProcessPool) for _, e in failed):  # a worker died (segfault, OOM): start anew
        kept.shutdown()
        _drop(kept, engine)


def _drop(kept: _KeptPool, engine) -> None:
    if engine is not None and engine.kept is kept:
        engine.kept = None
