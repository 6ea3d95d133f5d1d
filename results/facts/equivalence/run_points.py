"""Run named points of the facts FULL plan with the code on PYTHONPATH, one thread, each with a fresh work_dir;
write the plan's 114 job signatures and the points' results to OUT.json (compare two commits' files).

    PYTHONPATH=<checkout>/src python run_points.py OUT.json KEY [KEY ...]
"""

import json
import sys
import tempfile
import time

import torch


def full_jobs() -> list:
    try:  # the typed plan (main from 744f24e on)
        from symformer.experiments.facts.plan import FactsPlan, jobs

        parts = jobs(FactsPlan.for_run(False), False, 0)
    except ImportError:  # the pinned 0ec6f96
        from symformer.experiments import facts

        parts = facts.plan(facts.config(False), False, 0)
    return [j for part in parts.values() for j, _ in part]


def main(out_path: str, keys: list[str]) -> None:
    torch.set_num_threads(1)  # as run_jobs' workers
    all_jobs = {j.key: j for j in full_jobs()}
    sigs = {k: {**json.loads(json.dumps(j.signature())), "checkpoints": j.checkpoints} for k, j in all_jobs.items()}
    res = {"signatures": sigs, "results": {}, "seconds": {}}
    for k in keys:
        job, t = all_jobs[k], time.process_time()
        if job.checkpoints:
            with tempfile.TemporaryDirectory() as wd:
                got = job.fn(**job.kwargs, work_dir=wd)
        else:
            got = job.fn(**job.kwargs)
        res["results"][k], res["seconds"][k] = json.loads(json.dumps(got)), time.process_time() - t
        print(k, round(res["seconds"][k], 1), flush=True)
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
