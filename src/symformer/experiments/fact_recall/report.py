"""Experiment `fact-recall`: fact-storing MLPs inside transformers (fact-storing-mlps.txt Sec. 5, App. A.2-A.3).

(1) SSFR: smallest MLP with >= 99% fact-adaptive accuracy per MLP kind and F (Sec. 5.1, Fig. 3a);
(2) capacity against usability over whitening alpha x kappa, and the Lipschitz estimate (Sec. 5.2-5.3; full);
(3) the book -> author LM with a fact expert: MLP swap check (Sec. 5.4, Fig. 9b);
(4) editing: MLP swapping against ROME, MEMIT and AlphaEdit (Fig. 4, App. A.3.4).
Quick: SSFR at F = 256 with one kind, the swap check and editing at one split. Runs go through
runner.jobs (records under runs/, --jobs, --resume).
"""

from __future__ import annotations

import sys

from symformer.experiments.base import RunContext, combined, experiment
from symformer.experiments.fact_recall import plan as fact_recall_plan
from symformer.experiments.fact_recall.claims import (
    PAPER_TRAININGS_PER_POINT,
    best_trainings,
    ssfr_claims,
    usability_claims,
)
from symformer.experiments.fact_recall.lm_claims import lm_claims
from symformer.experiments.fact_recall.plan import OPTIONS
from symformer.experiments.facts.methods import METHODS
from symformer.experiments.plots import size_vs_facts
from symformer.results import ExperimentResult
from symformer.runner.jobs import Job, reuse_note, run_jobs


def _log(ctx: RunContext, msg: str) -> None:
    if ctx.progress:
        print(f"[fact-recall] {msg}", file=sys.stderr, flush=True)


def _ssfr_order(job: Job) -> tuple:
    """Constructions first (largest F first: S5.1's F = 4096 number early), then NTK, then GD smallest F first,
    so the two longest jobs (GD-SwiGLU and GD-ReLU at F = 4096, whose failing sizes are 20,000-epoch builds)
    run last, side by side, and no worker idles through a long final job. The order changes no result."""
    kind, F = job.kwargs["kind"], job.kwargs["n_facts"]
    if METHODS[kind].trained_mlp:
        return (2, F, kind)
    return (1 if kind == "ntk" else 0, -F, kind)


def _run_plan(ctx: RunContext, lm_job: Job, runs, stats: dict) -> tuple[dict, dict, list[dict] | None, dict | None]:
    """(LM result, SSFR results by job key, usability points, top-1 LM result; the last two None in quick mode).
    The jobs are independent except that usability needs h* from the GD-SwiGLU F = 256 search. Full mode runs
    that search beside the LM job, then the top-1 LM and every other SSFR search (`_ssfr_order`) together with
    the usability points in one batch: no worker waits for a phase to drain. Quick: one batch, the LM job
    first."""
    ssfr_jobs = fact_recall_plan.ssfr_jobs(ctx)
    if ctx.quick:
        out = run_jobs([lm_job, *ssfr_jobs], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
        return out[lm_job.key], {j.key: out[j.key] for j in ssfr_jobs}, None, None
    star = [j for j in ssfr_jobs if j.kwargs["kind"] == "gd-swiglu" and j.kwargs["n_facts"] == 256]
    first = run_jobs([lm_job, *star], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
    h = first[star[0].key]["min_size"] if star else None
    rest = sorted((j for j in ssfr_jobs if j not in star), key=_ssfr_order)
    usab = fact_recall_plan.usability_jobs(ctx, h or 64)
    top1 = fact_recall_plan.top1_job(lm_job)
    second = run_jobs([top1, *rest, *usab], runs, ctx.jobs, ctx.resume, stats, ctx.job_log)
    done = {**first, **second}
    return (first[lm_job.key], {j.key: done[j.key] for j in ssfr_jobs}, [second[j.key] for j in usab], second[top1.key])


def _size_figure(ctx: RunContext, ssfr: dict) -> str:
    """Item 3 / Fig. 3a: the smallest usable MLP (>= 99% fact-adaptive accuracy) against F, per kind, beside the
    F log F optimum (a kind whose search found no size at some F has no point there)."""
    series: dict[str, list] = {}
    for r in ssfr.values():
        series.setdefault(r["kind"], []).append((r["n_facts"], r["min_params"]))
    size_vs_facts(
        ctx.out_dir / "ssfr_size_vs_facts.png",
        series,
        "parameters, smallest MLP with >= 99% fact-adaptive acc.",
        "SSFR: usable MLP size against F (Fig. 3a style, d = 128)",
    )
    return "ssfr_size_vs_facts.png"


@experiment(
    "fact-recall",
    "fact MLPs inside transformers: SSFR recall, MLP swapping, editing vs ROME/MEMIT/AlphaEdit",
    options=OPTIONS,
)
def run(ctx: RunContext) -> ExperimentResult:
    # every training run goes through run_jobs, which runs it on one intra-op thread whatever --jobs is
    # checked before any training: the usability jobs start hours into a full run
    paper_usability = fact_recall_plan.paper_usability(ctx)
    stats: dict = {}
    runs = ctx.out_dir / "runs"
    lm_job = fact_recall_plan.lm_job(ctx)
    lm, ssfr, pts, top1 = _run_plan(ctx, lm_job, runs, stats)
    for r in ssfr.values():
        _log(
            ctx,
            f"SSFR {r['kind']} F={r['n_facts']}: min size {r['min_size']} (largest failing "
            f"{r.get('max_failing_size')}) params {r['min_params']} "
            f"best acc {r['best_fact_adaptive_accuracy']:.4f}",
        )
    res = ssfr_claims(ssfr, ctx.quick)
    res.figures.append(_size_figure(ctx, ssfr))
    if pts is not None:
        res = combined(res, usability_claims(best_trainings(pts), PAPER_TRAININGS_PER_POINT if paper_usability else 1))
    _log(ctx, f"LM swap: {lm['swap']}")
    res = combined(res, lm_claims(lm, ctx.quick, top1))
    res.config = {"quick": ctx.quick, "options": ctx.options, "lm": lm_job.kwargs, "ssfr_jobs": sorted(ssfr)}
    res.notes.append(reuse_note("fact-recall", stats))
    res.notes.append(
        "Readings (ours): SSFR predictions are decoded among the value tokens (eq. 1); the read-out has a "
        "learnable temperature; names and titles are single tokens from a seeded generator; editing "
        "keys' second moment C is taken over the preserved facts' sequences; ROME targets are computed "
        "once on the unedited model; targets v* per fact as ROME's compute_v / MEMIT's compute_z (train_steps s = "
        "s - 1 updates, early stopping per fact, only where the grid names it: ROME); the facts in neither edit "
        "split keep their authors unscored; score = harmonic mean (the text; Fig. 4's caption says geometric)."
    )
    return res
