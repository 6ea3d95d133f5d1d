"""Experiment `extrapolation` as registered: its jobs, figure and result."""

from __future__ import annotations

import math
import time
from dataclasses import asdict

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.extrapolation.claims import claims, summarize
from symformer.experiments.extrapolation.plan import DATA, config_for
from symformer.experiments.extrapolation.runs import LM_JOB
from symformer.experiments.plots import pyplot
from symformer.results import ExperimentResult
from symformer.runner.jobs import Job, one_thread, reuse_note, run_jobs


def plot(table: dict, contexts: tuple[int, ...], path) -> None:
    """bpc against evaluation context, one line per part (N/A points left out), standard errors as bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for part, row in table.items():
        pts = [(c, row[str(c)]) for c in contexts if row[str(c)]["mean"] is not None]
        se = [p[1]["se"] if math.isfinite(p[1]["se"]) else 0.0 for p in pts]
        ax.errorbar([p[0] for p in pts], [p[1]["mean"] for p in pts], yerr=se, marker="o", capsize=3, label=part)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(contexts), [str(c) for c in contexts])
    ax.set_xlabel("evaluation context (tokens; trained at the first)")
    ax.set_ylabel("validation bits per character")
    ax.set_title("Length extrapolation, tiny Shakespeare")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@experiment(
    "extrapolation",
    "Length extrapolation of char LMs trained at context 64 with each positional part (our own measurement)",
    data_files=(DATA,),
)
def run(ctx: RunContext) -> ExperimentResult:
    # small models: one intra-op thread per process (as run_jobs' workers use) is as fast and does not oversubscribe
    with one_thread():
        return _run(ctx)


def _run(ctx: RunContext) -> ExperimentResult:
    t0 = time.time()
    cfg = config_for(ctx.quick, ctx.seed)
    data_dir = str(ctx.data_file(DATA).parent)
    cd = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    jobs = [
        Job(cfg.run_key(p, s), LM_JOB.on(ctx.device), dict(part=p, seed=s, cfg=cd, data_dir=data_dir))
        for p in cfg.parts
        for s in cfg.seeds
    ]
    stats: dict = {}
    got = run_jobs(jobs, ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    runs = {p: [got[cfg.run_key(p, s)] for s in cfg.seeds] for p in cfg.parts}
    table, ratio = summarize(runs, cfg.eval_contexts)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    plot(table, cfg.eval_contexts, ctx.out_dir / "bpc_vs_length.png")
    rows = [
        f"{p}: " + ", ".join(f"{c}: " + ("N/A" if v["mean"] is None else f"{v['mean']:.3f}") for c, v in row.items())
        for p, row in table.items()
    ]
    notes = [
        f"wall time {time.time() - t0:.0f}s; per-run training seconds: "
        + ", ".join(f"{k}: {v['train_seconds']:.0f}" for k, v in got.items()),
        reuse_note("LM", stats),
        "bpc by context: " + "; ".join(rows),
        f"{runs[cfg.parts[0]][0]['n_chars']} validation characters scored at every context.",
        "learned PE has a table of the training context's size: longer contexts are N/A (never clamped).",
    ]
    return ExperimentResult(
        metrics={"extrapolation_bpc": table, "extrapolation_ratio_512": ratio},
        claims=claims(runs, cfg),
        config=asdict(cfg),
        figures=["bpc_vs_length.png"],
        notes=notes,
    )
