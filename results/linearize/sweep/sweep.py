import json, math, sys, time
from symformer.experiments.linearize.plan import LinearizePlan
from symformer.experiments.linearize.runs import linearize_arm
import torch
torch.set_num_threads(1)
base = LinearizePlan.for_run(False).as_dict()
variants = json.loads(sys.argv[1])
for name, change in variants.items():
    plan = {**base, **change}
    t = time.time()
    r = linearize_arm(plan, "/work/shared/data", "/work/runs_lin/linearize/runs/.models/teacher", change.get("_att", "favor") if False else plan.pop("_att", "favor"), "rope", 0)
    out = {"change": change, "ppl": {k: math.exp(v) for k, v in r["val_loss"].items()}, "seconds": time.time() - t,
           "curve": [(h["stage"], h["tokens"], math.exp(h["val_loss"])) for h in r["history"]]}
    print(name, json.dumps(out), flush=True)
