"""The metrics of experiment `teleport` from its runs (speed-ups, accuracies, overhead, the guard's records) and
part (e), the character LM. Each function returns its metrics."""

from __future__ import annotations

import math
import statistics

from symformer.data.paths import MissingDataError
from symformer.experiments.base import RunContext
from symformer.experiments.teleport import runs as teleport_runs
from symformer.experiments.teleport.pairing import paired
from symformer.experiments.teleport.plan import Arm
from symformer.experiments.teleport.runs import speedup_pct
from symformer.experiments.teleport.training import LM_ARM
from symformer.runner.jobs import Job, JobFunction, reuse_note, run_jobs
from symformer.stats import mean_std


def speedup_metrics(runs: dict, arms: dict[str, Arm]) -> dict:
    """Final accuracies per arm; per teleported arm the speed-up against its own baseline (same seeds), the
    paired test-accuracy difference and the overhead."""
    m: dict = {"speedup_pct_mean": {}, "speedup_pct_std": {}, "final_acc": {}, "final_val_acc": {}}
    m["speedup_na_seeds"] = {}  # seeds whose teleported run never reached the baseline's final accuracy
    m["speedup_pct_per_seed"] = {}
    m["acc_paired_diff_points"] = {}  # same-seed test-accuracy difference arm - its baseline: mean, se, n
    over, over_first = [], []
    for (ds, pe, label, opt), rs in runs.items():
        key, arm = f"{ds}/{pe}/{label}/{opt}", arms[label]
        m["final_acc"][key] = statistics.fmean(r["test_acc"] for r in rs)
        m["final_val_acc"][key] = statistics.fmean(r["val_acc"] for r in rs)
        if arm.is_baseline:
            continue
        base = runs[(ds, pe, arm.baseline, opt)][: len(rs)]  # the ablation's seeds are a prefix of the seeds
        sp = [speedup_pct(b["curve"], t["curve"]) for b, t in zip(base, rs, strict=True)]
        m["speedup_pct_mean"][key], m["speedup_pct_std"][key] = mean_std(sp)  # over seeds that reached it
        m["speedup_na_seeds"][key] = sum(math.isnan(x) for x in sp)
        m["speedup_pct_per_seed"][key] = [None if math.isnan(x) else x for x in sp]  # None: never reached it
        mean, se, n = paired(base, rs)
        m["acc_paired_diff_points"][key] = {"mean": mean, "se": se, "n": n}
        if label in ("tele", "guarded") and opt == "sgd":
            over += [r["overhead_pct"] for r in rs]
            over_first += [r["first_epoch_overhead_pct"] for r in rs]
    m["overhead_pct"] = max(over)
    m["overhead_pct_teleport_epoch"] = max(over_first)
    return m


def guard_metrics(runs: dict, arms: dict[str, Arm]) -> dict:
    """The guard's metrics (fixed names of issue 12) per arm 'ds/pe/arm/opt': cumulative ratio maxima for
    guarded and unguarded sampling arms, candidates beating the reference, steps refused by the guard."""
    names = (
        "norm_ratio_cumulative_max",
        "norm_ratio_cumulative_max_unguarded",
        "candidates_beating_reference_mean",
        "teleports_rejected_by_guard",
        "teleports_applied",
    )
    m: dict = {name: {} for name in names}
    for (ds, pe, label, opt), rs in runs.items():
        logs = [e for r in rs for e in r["log"]]
        if not logs:
            continue
        key, arm = f"{ds}/{pe}/{label}/{opt}", arms[label]
        m["teleports_applied"][key] = sum(e["applied"] for e in logs)
        if arm.method == "zhao":  # gradient ascent: no candidates, no bound
            continue
        cmax = max(e["cum_ratio"] for e in logs)
        m["norm_ratio_cumulative_max" if arm.guarded else "norm_ratio_cumulative_max_unguarded"][key] = cmax
        m["candidates_beating_reference_mean"][key] = statistics.fmean(e["n_better"] for e in logs)
        if arm.guarded:
            m["teleports_rejected_by_guard"][key] = sum(e["rejected_by_guard"] for e in logs)
    return m


def lm_part(ctx: RunContext) -> tuple[dict, dict, list[str]]:
    """(e): sinusoidal and RoPE char LMs with and without teleporting mid-warmup, trained on ctx.device.
    Returns (the runs by "pe/base|tele", the metrics, the notes); no runs without tiny Shakespeare."""
    try:
        f = ctx.data_file("tinyshakespeare.txt")
    except (MissingDataError, FileNotFoundError, ValueError) as e:
        return {}, {}, [f"LM arm skipped: {e}"]
    lm_arm = JobFunction(teleport_runs.lm_arm, LM_ARM, ctx.device)
    jobs = {
        f"{pe}/{'tele' if tele else 'base'}": Job(
            f"lm_{pe}_{'tele' if tele else 'base'}_s{ctx.seed}",
            lm_arm,
            dict(pe=pe, teleport=tele, quick=ctx.quick, seed=ctx.seed, data_file=str(f)),
        )
        for pe in ("sinusoidal", "rope")
        for tele in (False, True)
    }
    stats: dict = {}
    got = run_jobs(list(jobs.values()), ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    lm = {name: got[j.key] for name, j in jobs.items()}
    m = {"lm_final_val_loss": {k: v["final_val_loss"] for k, v in lm.items()}, "lm_speedup_pct": {}}
    for pe in ("sinusoidal", "rope"):
        b, t = lm[f"{pe}/base"]["points"], lm[f"{pe}/tele"]["points"]
        sp = speedup_pct([p[1] for p in b], [p[1] for p in t], higher=False)
        m["lm_speedup_pct"][pe] = None if math.isnan(sp) else sp  # None: never reached the baseline's loss
    return lm, m, [reuse_note("LM", stats)]
