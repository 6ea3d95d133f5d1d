"""By-hand record of the authors' code (HazyResearch/hebbian-mlps at the commit in PROVENANCE.md) on symformer's
fact sets: the smallest width m storing every fact, per method, at three points. Not part of the package or CI.

Run from a symformer checkout, with their `src/` (git archive of the pinned commit) on PYTHONPATH:
    PYTHONPATH=src:/tmp/hebofficial/src OMP_NUM_THREADS=1 python results/facts-hebbian/official/run_official.py OUT.json \
        [d,F,kappa ...]

Each evaluation calls their capacity sweep's own per-width function (hebbian.expts.mlp_capacity.helpers:
_run_hebbian, _run_ntk, _run_gd) with their method specs (mlp_capacity/run.py: _METHOD_SPECS) and reads the
accuracy and param_count as their run_mlp_experiment does. The width search is an integer doubling + bisection
(their gpu_sweep bisects a continuous range (1, 65536) to 0.05 and rounds; for a monotone success both give the
smallest storing width). The JSON is rewritten after every search, and a rerun skips the searches it holds."""

import json
import os
import sys
import time
import contextlib
import io

import torch

from hebbian.data.synthetics.factsets import BijectiveMapping, Factset
from hebbian.expts.mlp_capacity.helpers import _run_gd, _run_hebbian, _run_ntk
from hebbian.expts.mlp_capacity.run import _METHOD_SPECS
from symformer.facts import make_fact_set

POINTS = [(32, 256, 1.0), (32, 256, 100.0), (64, 1024, 1.0)]
SEEDS = (0, 1)  # two fact sets per point: make_fact_set(F, d, kappa, seed=s), as facts-hebbian draws them
CAP = 65536  # their binary_search_range upper end
# the Hebbian variants up to 4096 units: past h = F their ridge readout interpolates the values exactly, so a width
# that does not store at 4096 >= 4F does not store at any larger one (and the data-dependent fit at h = 65,536 takes
# hours); plain "hebbian" (raw readout) is searched to their 65,536
HEBBIAN_CAP = 4096


def their_factset(fs, dtype):
    mapping = BijectiveMapping(list(range(len(fs.facts))), fs.facts.tolist())
    return Factset(fs.keys.to(dtype), fs.values.to(dtype), mapping, fs.keys.shape[1], fs.keys.shape[0])


def evaluate(label, fs, m):
    spec = _METHOD_SPECS[label]
    dtype = spec["mlp_dtype"] or torch.float32
    torch.manual_seed(0)  # run_mlp_experiment seeds the global stream (seed 42 there) before its factset; GD draws from it
    factset = their_factset(fs, dtype)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if spec["mlp_method"] == "gd":
            mlp, metrics = _run_gd(factset, m, dtype, "cpu")
        elif spec["mlp_method"] == "hebbian":
            mlp, metrics = _run_hebbian(factset, m, spec["mlp_method_kwargs"], dtype, "cpu")
        else:
            mlp, metrics = _run_ntk(factset, m, spec["mlp_method_kwargs"], dtype, "cpu")
        with torch.no_grad():
            pred = (mlp(factset.input_embeddings) @ factset.output_embeddings.T).argmax(-1)
    acc = float((pred == fs.facts).double().mean())
    return acc, int(metrics.get("param_count", sum(p.numel() for p in mlp.parameters())))


def search(label, sets, start):
    cap = HEBBIAN_CAP if label in ("hebbian_whitened", "cf_coord_whitened") else CAP
    seen = {}

    def ok(m):
        if m not in seen:
            accs = []
            for fs in sets:
                acc, params = evaluate(label, fs, m)
                accs.append(acc)
                if acc < 1.0:
                    break
            seen[m] = (min(accs), params)
        return seen[m][0] >= 1.0

    lo, hi = 1, start
    while not ok(hi):
        if hi >= cap:
            return None, None, seen
        lo, hi = hi + 1, min(cap, 2 * hi)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return hi, seen[hi][1], seen


def main(out, points=None):
    rec = json.load(open(out)) if os.path.exists(out) else {}
    plan = [(p, lab) for p in points or POINTS for lab in ("hebbian_whitened", "cf_coord_whitened", "hebbian", "ntk")]
    if points is None:
        plan += [(POINTS[0], "gd"), (POINTS[1], "gd"), (POINTS[2], "gd")]  # the expensive ones last
    for (d, F, kappa), label in plan:
        key = f"d={d}_F={F}_kappa={kappa:g}"
        if label in rec.get(key, {}):
            continue
        sets = [make_fact_set(F, d, kappa=kappa, seed=s) for s in SEEDS]
        t = time.time()
        size, params, seen = search(label, sets, 8 if label == "gd" else 32)
        rec.setdefault(key, {})[label] = {
            "m": size, "param_count": params, "seconds": round(time.time() - t, 1),
            "evaluations": {str(k): v for k, v in sorted(seen.items())},
        }
        print(key, label, size, params, round(time.time() - t, 1), flush=True)
        tmp = out + ".tmp"
        json.dump(rec, open(tmp, "w"), indent=1)
        os.replace(tmp, out)


if __name__ == "__main__":
    # optional further arguments "d,F,kappa": those points instead, without the GD searches
    main(sys.argv[1], [tuple(float(x) if i == 2 else int(x) for i, x in enumerate(a.split(","))) for a in sys.argv[2:]]
         or None)
