"""Rebuild one point of the fact-recall size search (same seeds, MLPs and SSFR training as
`symformer reproduce fact-recall`) and say where its swap loses accuracy (swap_diagnostics), after the run's budget
and, optionally, after training on without early stopping (the same training resumed from its checkpoint).

    python examples/ssfr_swap_diagnostics.py bin+gd 5 256 8 --steps 12000     # ~40 min on one CPU core
    python examples/ssfr_swap_diagnostics.py gd-swiglu 6 256 none              # ~2 min
    python examples/ssfr_swap_diagnostics.py gd-relu 40 2048 none --train-seed 1  # another transformer init and
                                                                                   # batch order, same task and MLPs

Prints one JSON line per 3000 steps (docs/fact_recall_protocol.md, "Why the swap falls short at small F")."""
import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from symformer.experiments.fact_recall.runs import build_point_mlp, ssfr_train_config
from symformer.facts import random_fact_map
from symformer.facts.lm.recall import build_recall_model, swap_diagnostics, train_ssfr
from symformer.facts.lm.ssfr import make_ssfr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["bin+jl", "bin+gd", "gd-swiglu", "gd-relu", "ntk"])
    ap.add_argument("size", type=int, help="the point's knob: code width m (constructions) or hidden size h")
    ap.add_argument("n_facts", type=int)
    ap.add_argument("h_tilde", help="gadget width per code (constructions) or 'none'")
    ap.add_argument("--steps", type=int, default=3000, help="train on to this many steps, measuring every 3000")
    ap.add_argument("--seed", type=int, default=0, help="the task's and the MLPs' seed (the run's point seed)")
    ap.add_argument("--train-seed", type=int, default=None,
                    help="the transformer's init and batch seed (default: --seed, as the run; ssfr_point's train_seed)")
    a = ap.parse_args()
    ht = None if a.h_tilde == "none" else int(a.h_tilde)
    torch.set_num_threads(1)
    t0 = time.time()
    task = make_ssfr(a.n_facts, 128, seed=a.seed)
    f2 = random_fact_map(a.n_facts, seed=10_000 + a.seed)  # the run's f' and its MLP (built with seed + 1)
    mlp2 = build_point_mlp(a.kind, a.size, task, f2, a.seed + 1, False, 0.0, ht, None)
    ts = a.seed if a.train_seed is None else a.train_seed
    model = build_recall_model(task, build_point_mlp(a.kind, a.size, task, task.facts, a.seed, False, 0.0, ht, None),
                               seed=ts)
    base = ssfr_train_config(False, ts, False)
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ssfr.pt"
        for steps in range(3000, max(a.steps, 3000) + 1, 3000):
            # the first 3000 steps are the run's training (early stop at 99.5% own accuracy); then no early stop
            cfg = base if steps == 3000 else replace(base, steps=steps, stop_accuracy=1.01)
            tr = train_ssfr(model, task, cfg, checkpoint=ck)
            print(json.dumps({"kind": a.kind, "size": a.size, "n_facts": a.n_facts, "h_tilde": ht, "train_seed": ts,
                              "steps": tr["steps"], "train_accuracy": tr["train_accuracy"],
                              **swap_diagnostics(model, task, task.with_facts(f2), mlp2),
                              "seconds": round(time.time() - t0)}), flush=True)


if __name__ == "__main__":
    main()
