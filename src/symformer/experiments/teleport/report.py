"""Experiment `teleport`: symmetry groups of attention for every positional encoding, and teleportation at the
paper's operating point (transformer-teleportation.txt, Sec. 4 and App. G).

(a) invariance in float64 under random group elements for every PE kind, and the negative checks;
(b) closed-form candidate gradient norms against brute force;
(c) the App. G operating point per (data set, PE): |K| at 2-4% of an epoch (4-16 consecutive steps), then the
    largest alpha in {0.05, ..., 0.65} whose cumulative gradient-norm ratio over those steps stays <= 1.05,
    measured on the training set at the start of training (seed 0), never on test accuracy;
(d) SGD+momentum+cosine training of small ReLU ViTs on MNIST-1D (1-D) and digits (2-D), learned APE / RoPE /
    STRING, 5 paired seeds: baseline, the guarded teleport (epoch 1 and epoch 2), the paper's unguarded Alg. 1
    at the chosen alpha, both arms also at the paper's lr 0.015; lr chosen on validation per arm; an alpha
    ablation at fixed |K|; the Zhao et al. baseline; an AdamW variant;
(e) a character LM on tiny Shakespeare, sinusoidal vs RoPE, teleporting mid-warmup (App. E: steps 500-515,
    alpha 0.2, M 8, scaled down).
"""

from __future__ import annotations

import time

import torch

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.teleport import claims as teleport_claims
from symformer.experiments.teleport.exactness import closed_form_checks, invariance_checks
from symformer.experiments.teleport.figures import figures
from symformer.experiments.teleport.metrics import guard_metrics, lm_part, speedup_metrics
from symformer.experiments.teleport.plan import TeleportPlan
from symformer.experiments.teleport.runs import ALPHA_GRID, RATIO_BOUND
from symformer.experiments.teleport.training import run_training
from symformer.results import ExperimentResult


@experiment(
    "teleport",
    "Symmetry groups of attention for every PE; teleportation at the paper's operating point, "
    "guarded and unguarded (SGD, ViT, char LM)",
)
def run(ctx: RunContext) -> ExperimentResult:
    t0 = time.perf_counter()
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    plan = TeleportPlan.for_run(ctx.quick, ctx.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: intra-op threading only adds synchronisation; restored below
    try:
        return _run(ctx, plan, t0)
    finally:
        torch.set_num_threads(threads)


def exactness_metrics(trials: int) -> dict:
    """(a), (b) in float64 on the CPU."""
    inv = invariance_checks(trials)
    return {
        "invariance_max_rel_err": inv["errs"],
        "qk_group_dimension": inv["dims"],
        "rope_generic_diagonal_err": inv["diag"],
        "rope_wrong_pairing_err": inv["wrong"],
        "closed_form_max_rel_err": closed_form_checks(),
    }


def claims_of(m: dict, runs: dict, lm: dict, n_seeds: int, quick: bool) -> list:
    return (
        teleport_claims.exactness_claims(m)
        + teleport_claims.overhead_claim(m, quick)
        + teleport_claims.speed_and_accuracy_claims(m, runs, n_seeds, quick)
        + teleport_claims.guard_claim(m, quick)
        + teleport_claims.extra_claims(m, lm, n_seeds, quick)
    )


def _run(ctx: RunContext, plan: TeleportPlan, t0: float) -> ExperimentResult:
    m = exactness_metrics(plan.trials)
    t1 = time.perf_counter()
    runs, arms, training_metrics, training_notes = run_training(ctx, plan)
    m.update(training_metrics)
    m.update(speedup_metrics(runs, arms))
    m.update(guard_metrics(runs, arms))
    t2 = time.perf_counter()
    lm, lm_metrics, lm_notes = lm_part(ctx)
    m.update(lm_metrics)
    claims = claims_of(m, runs, lm, len(plan.seeds), ctx.quick)
    notes = [
        "all runs use 1 intra-op thread (tiny models); the environment block shows the CLI default",
        *training_notes,
        *lm_notes,
        f"seconds: exactness {t1 - t0:.1f}, ViT training {t2 - t1:.1f}, LM {time.perf_counter() - t2:.1f}",
    ]
    figure_names = figures(ctx.out_dir, runs, lm)
    notes += teleport_claims.setting_notes(claims)
    notes.append(f"total seconds: {time.perf_counter() - t0:.1f}")
    config = {
        "plan": plan.as_config(),
        "intra_op_threads": 1,
        "ratio_bound": RATIO_BOUND,
        "alpha_grid": list(ALPHA_GRID),
    }
    return ExperimentResult(metrics=m, claims=claims, config=config, figures=figure_names, notes=notes)
