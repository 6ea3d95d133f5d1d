"""The FAVOR+ sweep with Hedgehog's feature map (learned_favor feature_map="hedgehog") beside the plain one: the
experiment's own job function `linearize_arm` on the recorded teacher (runs/.models/teacher), the full plan changed
as each variant says, RoPE, seed 0, one JSON line per variant. Selection reads the VALIDATION perplexities that
linearize_arm reports (the experiment has no test split in its metrics; nothing here reads one).

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 10 python results/linearize/sweep/sweep_hedgehog.py '{"<name>": {...}}'
"""

import json
import math
import sys
import time
from pathlib import Path

import torch

from symformer.experiments.linearize.plan import LinearizePlan
from symformer.experiments.linearize.runs import linearize_arm

torch.set_num_threads(1)
TEACHER = str(Path(__file__).resolve().parents[1] / "runs" / ".models" / "teacher")
# the recorded run's FAVOR+ settings (5ca119a's full plan) as the base every variant changes
base = {**LinearizePlan.for_run(False).as_dict(), "favor": {"n_features": 32}, "lr1": 1e-2, "lr2": 1e-3, "lora_rank": 8}
base.pop("train", None)
for name, change in json.loads(sys.argv[1]).items():
    plan = {**base, **change}
    t = time.time()
    r = linearize_arm(plan, "/work/shared/data", TEACHER, "favor", "rope", 0)
    out = {
        "change": change,
        "ppl": {k: math.exp(v) for k, v in r["val_loss"].items()},
        "seconds": time.time() - t,
        "curve": [(h["stage"], h["tokens"], math.exp(h["val_loss"])) for h in r["history"]],
    }
    print(name, json.dumps(out), flush=True)
