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
from pathlib import Path

from symformer._validation import check_device
from symformer.runner.engine import Engine, _Throttled, current_engine, using_engine  # noqa: F401
from symformer.runner.ray_engine import RayEngine, _check_reachable
from symformer.runner.submitit_engine import SLOT_TIME_MIN, SubmititEngine, _ended_why  # noqa: F401

EXECUTORS = ("local", "submitit", "ray")
EXTRAS = {"submitit": ("submitit", "slurm"), "ray": ("ray", "ray")}  # engine: (module, symformer extra)


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
    `gpus_per_job` None: one GPU per job (slot) on submitit and Ray with --device cuda (or cuda:N), else none."""
    import importlib.util

    if name not in EXECUTORS:
        raise ValueError(f"--executor: got {name!r}, expected one of {', '.join(EXECUTORS)}")
    cuda = device == "cuda" or device.startswith("cuda:")  # the form is checked below, with the option's name
    if gpus_per_job is None:
        gpus_per_job = 1 if cuda and name != "local" else 0
    if gpus_per_job and not cuda:
        raise ValueError(
            f"--gpus-per-job: got {gpus_per_job} with --device {device}, expected --device cuda "
            "(GPUs are reserved only for jobs that run on them)"
        )
    if gpus_per_job < 0 or cpus_per_job < 1:
        raise ValueError(f"--gpus-per-job/--cpus-per-job: got {gpus_per_job}/{cpus_per_job}, expected >= 0 / >= 1")
    import shutil

    cluster = os.environ.get("SYMFORMER_SUBMITIT_CLUSTER") or ("slurm" if shutil.which("sbatch") else "local")
    elsewhere = (name == "submitit" and cluster != "local") or (name == "ray" and ray_address is not None)
    check_device(device, "--device", here=not (cuda and elsewhere))  # a cluster's driver need not have its jobs' GPUs
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
