"""The book -> author LM of experiment `fact-recall` with its MLP swap check and editing (Sec. 5.4, App. A.3): a
recorded job (module-level, JSON in and out)."""

from __future__ import annotations

import time

from symformer._validation import check_device
from symformer.experiments.fact_recall.runs import _ckpt, _memo
from symformer.facts.lm.books import make_books
from symformer.facts.lm.books_lm import LMConfig, build_lm, mlp_for, swap_check, train_lm
from symformer.facts.lm.editing import make_split, run_editors
from symformer.runner.jobs import JobFunction


def lm_run(
    n_facts: int,
    d: int,
    mlp_hidden: int,
    steps: int,
    fractions: list[float],
    seed: int,
    quick: bool,
    lr: float = 2e-3,
    work_dir: str | None = None,
    router_top1: bool = False,
    device: str = "cpu",
) -> dict:
    """App. A.3: train the MoE LM, the swap check, then editing at each altered fraction (preserved = 4 x
    altered, App. A.3.4). With `work_dir` the training checkpoints there and the swap check and each fraction's
    editing are remembered, so a killed job resumes where it stopped (seconds are summed over the parts).
    `router_top1`: top-1 (Switch) routing instead of the soft mixture (A.3.2 names neither). `device`
    (RunContext.device): where the LM trains, is evaluated and edited; its fact MLPs are trained on the CPU and the
    editors' float64 closed forms run there (facts.lm.editing.apply_editor); not in the remembered parts' keys."""
    check_device(device)
    args = dict(n_facts=n_facts, d=d, mlp_hidden=mlp_hidden, steps=steps, seed=seed, quick=quick, lr=lr)
    if router_top1:  # only when set: the soft-router job keeps its remembered parts' keys
        args["router_top1"] = True
    task = make_books(n_facts, seed=seed)
    cfg = LMConfig(d_model=d, mlp_hidden=mlp_hidden, steps=steps, seed=seed, lr=lr, router_top1=router_top1)
    t0 = time.perf_counter()
    model, E = build_lm(task, cfg, device)  # seeded: the same model every call, into which a checkpoint loads
    built = time.perf_counter() - t0
    tr = train_lm(model, task, cfg, checkpoint=_ckpt(work_dir, args, "lm"))
    out = {
        "n_facts": n_facts,
        "d": d,
        "mlp_hidden": mlp_hidden,
        "lr": lr,
        "router": "top1" if router_top1 else "soft",
        "train": tr,
        "mlp_capacity": model.fact.mlp.accuracy,
        "swap": _memo(work_dir, {**args, "part": "swap"}, _timed(lambda: swap_check(model, task, E, cfg, seed + 1))),
        "edits": {},
    }
    out["timing"] = {"build": built, "train_and_swap": tr["seconds"] + out["swap"].pop("seconds")}
    for frac in fractions:

        def edit(frac=frac):
            split = make_split(task, frac, seed)
            new_mlp = mlp_for(task.with_facts(split.new_facts), E, cfg, seed + 2)
            res = run_editors(model, task, split, new_mlp, quick=quick)
            return {
                "n_altered": len(split.altered),
                "n_preserved": len(split.preserved),
                "new_mlp_capacity": new_mlp.accuracy,
                "methods": res,
            }

        out["edits"][f"{frac:g}"] = _memo(work_dir, {**args, "part": f"edit_{frac:g}"}, _timed(edit))
        out["timing"][f"edit_{frac:g}"] = out["edits"][f"{frac:g}"].pop("seconds")
    out["seconds"] = sum(out["timing"].values())
    return out


def _timed(fn):
    """fn with its wall time added to what it returns (as "seconds"), for a part remembered by _memo."""

    def run() -> dict:
        t0 = time.perf_counter()
        res = fn()
        return {**res, "seconds": time.perf_counter() - t0}

    return run


# the name the recorded runs carry (results/fact-recall/runs): the function lived in experiments/fact_recall_runs.py
LM_RUN = JobFunction(lm_run, "symformer.experiments.fact_recall_runs.lm_run")
