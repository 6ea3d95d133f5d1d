"""Parts (c) and (d) of experiment `teleport`: the App. G operating point per (data set, PE), the lr selection on
validation, and every ViT arm, all as recorded jobs (runner/jobs.py: --jobs workers, --resume) that train on
RunContext.device. Each helper returns its metrics; nothing fills a shared dict."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from symformer.experiments.base import RunContext
from symformer.experiments.teleport import runs as teleport_runs
from symformer.experiments.teleport.plan import (
    BASE,
    BASE_PAPER_LR,
    GUARD_DEMO,
    GUARDED,
    GUARDED_EPOCH2,
    GUARDED_PAPER_LR,
    TELE,
    TELE_PAPER_LR,
    UNGUARDED_DEMO,
    ZHAO,
    Arm,
    TeleportPlan,
    ablation_arm,
)
from symformer.experiments.teleport.runs import ALPHA_GRID, PAPER_LR, RATIO_BOUND, choose_alpha
from symformer.runner.jobs import Job, JobFunction, reuse_note, run_jobs

# the names the recorded runs carry (results/teleport/runs); --resume matches records by them, whatever module
# holds the functions
TRAIN_ARM = "symformer.experiments.teleport_runs.train_arm"
OPERATING_POINT_PROBE = "symformer.experiments.teleport_runs.operating_point_probe"
LM_ARM = "symformer.experiments.teleport_runs.lm_arm"


@dataclass(frozen=True)
class ArmRun:
    """One training run of train_arm; `key` is its record name. A baseline ignores the teleport options, so every
    arm with the same lr and seed shares its baseline run."""

    dataset: str
    pe: str
    method: str  # train_arm's arm: base | tele | zhao
    seed: int
    quick: bool
    lr: float
    epochs: int
    alpha: float = 0.65
    steps: int = 4
    optimizer: str = "sgd"
    max_ratio: float | None = None
    epoch_at: int = 1

    @property
    def key(self) -> str:
        key = f"{self.dataset}_{self.pe}_{self.method}_{self.optimizer}_lr{self.lr}_e{self.epochs}_s{self.seed}"
        if self.method != "base":
            key += f"_a{self.alpha}_k{self.steps}"
            if self.max_ratio is not None:
                key += f"_g{self.max_ratio}"
            if self.epoch_at != 1:
                key += f"_at{self.epoch_at}"
        return key

    def job(self, device: str) -> Job:
        kw = dict(
            dataset=self.dataset,
            pe=self.pe,
            arm=self.method,
            seed=self.seed,
            quick=self.quick,
            lr=self.lr,
            epochs=self.epochs,
            optimizer=self.optimizer,
        )
        if self.method != "base":
            kw.update(alpha=self.alpha, steps=self.steps)
            if self.max_ratio is not None:
                kw["max_ratio"] = self.max_ratio
            if self.epoch_at != 1:
                kw["epoch_at"] = self.epoch_at
        return Job(self.key, JobFunction(teleport_runs.train_arm, TRAIN_ARM, device), kw)


class Runner:
    """Runs job lists through run_jobs (--jobs workers, --resume records); identical runs share a key."""

    def __init__(self, ctx: RunContext):
        self.ctx, self.done, self.stats = ctx, {}, {}

    def __call__(self, jobs: list[Job]) -> dict:
        fresh = list({j.key: j for j in jobs if j.key not in self.done}.values())
        self.done.update(
            run_jobs(fresh, self.ctx.out_dir / "runs", self.ctx.jobs, self.ctx.resume, self.stats, self.ctx.job_log)
        )
        return self.done


def operating_points(ctx: RunContext, plan: TeleportPlan, run: Runner) -> tuple[dict, dict, set[str]]:
    """(c): |K| from the epoch length, then the largest alpha meeting the ratio bound, per (data set, PE).
    Returns (the schedule per data set, the metrics, the probes' record keys)."""
    ops = {ds: teleport_runs.schedule_for(ds, ctx.quick) for ds in plan.datasets}
    probe = JobFunction(teleport_runs.operating_point_probe, OPERATING_POINT_PROBE, ctx.device)
    jobs = {
        (ds, pe, a): Job(
            f"op_{ds}_{pe}_a{a}_k{ops[ds]['consecutive']}_e{plan.epochs[ds]}",
            probe,
            dict(dataset=ds, pe=pe, quick=ctx.quick, alpha=a, steps=ops[ds]["consecutive"], epochs=plan.epochs[ds]),
        )
        for ds in plan.datasets
        for pe in plan.pes
        for a in ALPHA_GRID
    }
    done = run(list(jobs.values()))
    ratios, chosen, met, better = {}, {}, {}, {}
    for ds in plan.datasets:
        for pe in plan.pes:
            cell = f"{ds}/{pe}"
            ratios[cell] = {a: done[jobs[ds, pe, a].key]["cum_ratio"] for a in ALPHA_GRID}
            chosen[cell], met[cell] = choose_alpha(ratios[cell], RATIO_BOUND)
            better[cell] = {a: done[jobs[ds, pe, a].key]["n_better"] for a in ALPHA_GRID}
    metrics = {
        "teleport_operating_point": ops,
        "k_fraction_of_epoch": {ds: op["k_fraction"] for ds, op in ops.items()},
        "operating_point_cumulative_ratio": ratios,
        "chosen_alpha": chosen,
        "operating_point_rule_met": met,
        "operating_point_candidates_beating_reference": better,
    }
    return ops, metrics, {j.key for j in jobs.values()}


def select_lr(ctx: RunContext, plan: TeleportPlan, run: Runner, ops: dict, alphas: dict) -> tuple[dict, dict, str]:
    """Per (data set, PE) and arm (base, guarded teleport): the lr with the best mean VALIDATION accuracy over
    the selection seeds (never the test split). All cells go to one run_jobs call (one worker pool).
    Returns ({(ds, pe, "base" | "tele"): lr}, the metrics, the note)."""
    chosen, grids = {}, {}
    for ds in plan.datasets:
        for pe in plan.pes:
            if plan.lr:
                chosen[ds, pe, "base"] = chosen[ds, pe, "tele"] = plan.lr[ds]
                continue
            tele = dict(alpha=alphas[f"{ds}/{pe}"], steps=ops[ds]["consecutive"], max_ratio=RATIO_BOUND)
            for arm, method, kw in (("base", "base", {}), ("tele", "tele", tele)):
                grids[ds, pe, arm] = {
                    lr: [ArmRun(ds, pe, method, s, ctx.quick, lr, plan.epochs[ds], **kw) for s in plan.lr_seeds]
                    for lr in plan.lr_grid
                }
    done = run([r.job(ctx.device) for g in grids.values() for rs in g.values() for r in rs])
    table = {}
    for (ds, pe, arm), grid in grids.items():
        acc = {lr: statistics.fmean(done[r.key]["val_acc"] for r in rs) for lr, rs in grid.items()}
        table[f"{ds}/{pe}/{arm}"] = acc
        chosen[ds, pe, arm] = max(acc, key=acc.get)
    metrics = {
        "chosen_lr": {f"{ds}/{pe}/{arm}": lr for (ds, pe, arm), lr in chosen.items()},
        "lr_selection_val_acc": table,
    }
    rule = (
        "fixed for quick mode"
        if plan.lr
        else f"chosen per arm on mean validation accuracy over seeds {plan.lr_seeds} from {plan.lr_grid}"
    )
    return chosen, metrics, f"SGD lr {rule}: {metrics['chosen_lr']}"


def cell_arms(plan: TeleportPlan, ds: str, pe: str, k: int, alpha: float, lr: dict, quick: bool) -> dict:
    """Arms of one (data set, PE): {Arm: [ArmRun per seed]}."""
    ep, seeds = plan.epochs[ds], plan.seeds

    def runs(arm: Arm, lr_: float, seeds_=seeds, **kw) -> list[ArmRun]:
        return [ArmRun(ds, pe, arm.method, s, quick, lr_, ep, **kw) for s in seeds_]

    tele = dict(alpha=alpha, steps=k)
    spec = {
        BASE: runs(BASE, lr["base"]),
        GUARDED: runs(GUARDED, lr["tele"], max_ratio=RATIO_BOUND, **tele),
        TELE: runs(TELE, lr["tele"], **tele),
    }
    if plan.epoch2:
        spec[GUARDED_EPOCH2] = runs(GUARDED_EPOCH2, lr["tele"], max_ratio=RATIO_BOUND, epoch_at=2, **tele)
    if plan.paper_lr:  # the paper's lr for both arms (App. E), beside the validated ones
        spec[BASE_PAPER_LR] = runs(BASE_PAPER_LR, PAPER_LR)
        spec[GUARDED_PAPER_LR] = runs(GUARDED_PAPER_LR, PAPER_LR, max_ratio=RATIO_BOUND, **tele)
        spec[TELE_PAPER_LR] = runs(TELE_PAPER_LR, PAPER_LR, **tele)
    if ds in plan.extras_on and pe in plan.zhao_pes:
        spec[ZHAO] = runs(ZHAO, lr["tele"], steps=k)
    if ds == "mnist1d" and pe == "rope":
        for a in plan.ablation:  # alpha at fixed |K|, unguarded (Table 2 style)
            spec[ablation_arm(a)] = runs(ablation_arm(a), lr["tele"], plan.ablation_seeds, alpha=a, steps=k)
        # the guard at work: the Teleporter's default alpha 0.65 with and without it
        spec[GUARD_DEMO] = runs(GUARD_DEMO, lr["tele"], plan.demo_seeds, alpha=0.65, steps=k, max_ratio=RATIO_BOUND)
        spec[UNGUARDED_DEMO] = runs(UNGUARDED_DEMO, lr["tele"], plan.demo_seeds, alpha=0.65, steps=k)
    return spec


def run_training(ctx: RunContext, plan: TeleportPlan) -> tuple[dict, dict[str, Arm], dict, list[str]]:
    """All ViT runs as independent jobs. Returns ({(ds, pe, arm label, optimizer): [record per seed]}, {arm label:
    Arm}, the metrics, the notes)."""
    run = Runner(ctx)
    ops, metrics, probes = operating_points(ctx, plan, run)
    chosen, lr_metrics, lr_note = select_lr(ctx, plan, run, ops, metrics["chosen_alpha"])
    metrics.update(lr_metrics)
    spec: dict = {}
    for ds in plan.datasets:
        for pe in plan.pes:
            lr = {"base": chosen[ds, pe, "base"], "tele": chosen[ds, pe, "tele"]}
            alpha, k = metrics["chosen_alpha"][f"{ds}/{pe}"], ops[ds]["consecutive"]
            cell = cell_arms(plan, ds, pe, k, alpha, lr, ctx.quick)
            spec.update({(ds, pe, arm, "sgd"): rs for arm, rs in cell.items()})
        if plan.adamw and ds in plan.extras_on:  # AdamW variant (App. D) on RoPE, unguarded as the paper
            tele = dict(alpha=metrics["chosen_alpha"][f"{ds}/rope"], steps=ops[ds]["consecutive"])
            for arm, kw in ((BASE, {}), (TELE, tele)):
                spec[ds, "rope", arm, "adamw"] = [
                    ArmRun(ds, "rope", arm.method, s, ctx.quick, 3e-3, plan.epochs[ds], optimizer="adamw", **kw)
                    for s in plan.seeds
                ]
    done = run([r.job(ctx.device) for rs in spec.values() for r in rs])
    vit = {k: r for k, r in done.items() if k not in probes}
    metrics["epochs"] = plan.epochs
    metrics["vit_run_seconds_total"] = sum(r.get("seconds", 0.0) for r in vit.values())
    metrics["vit_runs"] = len(vit)
    runs = {(ds, pe, arm.label, opt): [done[r.key] for r in rs] for (ds, pe, arm, opt), rs in spec.items()}
    arms = {arm.label: arm for (_, _, arm, _) in spec}
    return runs, arms, metrics, [lr_note, reuse_note("ViT", run.stats)]
