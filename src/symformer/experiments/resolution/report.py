"""Experiment `resolution` as registered: its jobs, figure and result."""

from __future__ import annotations

import math
import time
from dataclasses import asdict

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.plots import pyplot
from symformer.experiments.resolution.claims import claims, summarize
from symformer.experiments.resolution.plan import ResolutionConfig, config_for
from symformer.experiments.resolution.runs import RESCALES, VIT_JOB
from symformer.results import ExperimentResult
from symformer.runner.jobs import Job, one_thread, reuse_note, run_jobs


def plot(table: dict, cfg: ResolutionConfig, path) -> None:
    """Test accuracy against the test grid, one line per method, one panel per rescale; SE as bars."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    grids = [cfg.grid(s) for s in cfg.eval_sizes]
    for ax, rescale in zip(axes, RESCALES):
        for method, row in table[rescale].items():
            pts = [row[str(s)] for s in cfg.eval_sizes]
            se = [p["se"] if math.isfinite(p["se"]) else 0.0 for p in pts]
            ax.errorbar(grids, [p["mean"] for p in pts], yerr=se, marker="o", capsize=3, label=method)
        ax.axvline(cfg.train_grid, color="gray", lw=0.8, ls="--")
        ax.set_xticks(grids, [f"{g}x{g}" for g in grids])
        ax.set_xlabel("test grid (tokens per side; dashed: training grid)")
        ax.set_title(f"positions: {'the grid' + chr(39) + 's own' if rescale == 'own' else 'rescaled to training'}")
    axes[0].set_ylabel("test accuracy")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@experiment(
    "resolution",
    "Resolution change of ViTs on upsampled digits: RoPE-Axial, RoPE-Mixed, STRING, ESPR, learned PE (rope-vit)",
)
def run(ctx: RunContext) -> ExperimentResult:
    # small models: one intra-op thread per process (as run_jobs' workers use) is as fast and does not oversubscribe
    with one_thread():
        return _run(ctx)


def _run(ctx: RunContext) -> ExperimentResult:
    t0 = time.time()
    cfg = config_for(ctx.quick, ctx.seed)
    cd = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    jobs = [
        Job(cfg.run_key(m, s), VIT_JOB.on(ctx.device), dict(method=m, seed=s, cfg=cd))
        for m in cfg.methods
        for s in cfg.seeds
    ]
    stats: dict = {}
    got = run_jobs(jobs, ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    runs = {m: [got[cfg.run_key(m, s)] for s in cfg.seeds] for m in cfg.methods}
    table = summarize(runs, cfg)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    plot(table, cfg, ctx.out_dir / "accuracy_vs_grid.png")
    rows = []
    for rescale in RESCALES:
        for m, row in table[rescale].items():
            cells = ", ".join(f"{cfg.grid(int(s))}: {v['mean']:.3f} +- {v['se']:.3f}" for s, v in row.items())
            rows.append(f"{m} ({rescale}): {cells}")
    notes = [
        f"wall time {time.time() - t0:.0f}s; per-run training seconds: "
        + ", ".join(f"{k}: {v['train_seconds']:.0f}" for k, v in got.items()),
        reuse_note("ViT", stats),
        "test accuracy by grid (mean +- SE over seeds): " + "; ".join(rows),
        "own: the test grid's integer positions (a larger grid reaches positions training never saw); rescaled: "
        "positions scaled by train grid / test grid into the training range (learned PE: its table interpolated).",
        "learned PE with own positions reads table rows past the training grid that training never updated.",
    ]
    return ExperimentResult(
        metrics={
            "resolution_accuracy": table,
            "val_accuracy": {m: sum(r["val_accuracy"] for r in rs) / len(rs) for m, rs in runs.items()},
        },
        claims=claims(runs, cfg),
        config=asdict(cfg),
        figures=["accuracy_vs_grid.png"],
        notes=notes,
    )
