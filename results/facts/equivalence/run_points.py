"""Run selected points of the facts FULL plan at whatever commit is on PYTHONPATH; dump signatures + results.
Usage: python run_points.py OUT.json KEY [KEY ...]   (one thread, like run_jobs' workers)"""
import json, sys, time
import torch
torch.set_num_threads(1)

def full_jobs():
    try:  # typed plan (main after 744f24e)
        from symformer.experiments.facts.plan import FactsPlan, jobs
        p = jobs(FactsPlan.for_run(False), False, 0)
    except ImportError:  # 0ec6f96
        from symformer.experiments import facts
        p = facts.plan(facts.config(False), False, 0)
    return [j for part in p.values() for j, _ in part]

out_path, keys = sys.argv[1], sys.argv[2:]
allj = full_jobs()
sigs = {j.key: json.loads(json.dumps(j.signature())) | {"checkpoints": bool(j.checkpoints)} for j in allj}
res = {"signatures": sigs, "results": {}, "seconds": {}}
byk = {j.key: j for j in allj}
import tempfile
for k in keys:
    j = byk[k]
    kw = dict(j.kwargs)
    t = time.process_time()
    if j.checkpoints:
        with tempfile.TemporaryDirectory() as wd:
            r = j.fn(**kw, work_dir=wd)
    else:
        r = j.fn(**kw)
    res["results"][k] = json.loads(json.dumps(r))
    res["seconds"][k] = time.process_time() - t
    print(k, round(res["seconds"][k], 1), flush=True)
    open(out_path, "w").write(json.dumps(res, indent=1))
