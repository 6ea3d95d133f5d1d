"""Experiment `precision`: every part in bfloat16 and float16 against a float64 reference.

Not a paper's claim but the library's: a symformer part is exact to its dtype however the model was made 16-bit
(built in 16 bits, cast with `.to()`, or run under autocast), patched Hugging Face models are as accurate as the
native 16-bit model, and a 16-bit training step gives finite gradients and the float32 step's loss. The anchor is
HF's own 16-bit model (its RoPE after `.to(torch.bfloat16)` rounds `inv_freq`: transformers issue 29496).

Bounds (fixed before any run):
- rotation: max |R(r) q - R(r) q in float64| <= 2 eps(dtype) max |q|, eps(bfloat16) = 2^-7, eps(float16) = 2^-10,
  positions up to 8192 (metric = error / bound, goal <= 1);
- HF logits: error of the patched 16-bit model against the float64 model <= 1.5x the native 16-bit model's;
- training: |loss16 - loss32| / |loss32| <= 0.02 and every gradient finite.
"""

from __future__ import annotations

import time

import torch

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.precision.claims import precision_claims
from symformer.experiments.precision.hf_checks import hf_logit_err_vs_native, hf_native_rope_err_vs_bound
from symformer.experiments.precision.plan import (
    DTYPES,
    GEOMETRIES,
    HF_ROUTES,
    HF_TOKENS,
    ROUTES,
    TRAIN_ROUTES,
    PrecisionPlan,
)
from symformer.experiments.precision.rotation_checks import rotation_errors
from symformer.experiments.precision.train_checks import train_step_comparison
from symformer.results import ExperimentResult
from symformer.runner.jobs import one_thread


def rotation_metrics(parts, seeds) -> tuple[dict[str, float], dict[str, float]]:
    """({"part[@2d]/dtype/route": worst forward error / bound over seeds}, the same for the backward pass: the
    gradients of a fixed linear functional w.r.t. the inputs and the part's parameters)."""
    fwd, bwd = {}, {}
    for part in parts:
        for geo, (coord_dim, n) in GEOMETRIES.items():
            name = part if geo == "1d" else f"{part}@{geo}"
            for dn, dt in DTYPES.items():
                for route in ROUTES:
                    runs = [
                        rotation_errors(part, dt, route, n=n, coord_dim=coord_dim, seed=s, backward=True) for s in seeds
                    ]
                    key = f"{name}/{dn}/{route}"
                    fwd[key] = max(r["forward"] if r["out_dtype_ok"] else float("inf") for r in runs)
                    bwd[key] = max(max(r["grad_input"], r["grad_param"]) for r in runs)
    return fwd, bwd


def hf_metrics(families, seeds, n_tokens: int) -> tuple[dict[str, float], dict[str, dict]]:
    """({"family/dtype[/cast]": worst patched / native error ratio over seeds}, the errors behind each ratio)."""
    ratios, detail = {}, {}
    for fam in families:
        for dn, dt in DTYPES.items():
            for route in HF_ROUTES:
                runs = [hf_logit_err_vs_native(fam, dt, n_tokens=n_tokens, seed=s, route=route) for s in seeds]
                worst = max(runs, key=lambda r: r["ratio"])
                key = f"{fam}/{dn}" if route == "config" else f"{fam}/{dn}/{route}"
                ratios[key], detail[key] = worst["ratio"], worst
    return ratios, detail


def train_metrics(combinations, seeds) -> tuple[dict[str, float], dict[str, bool]]:
    """({"positional/attention/route": worst relative loss difference}, {same keys: every step finite})."""
    diff, finite = {}, {}
    for pos, att in combinations:
        for route in TRAIN_ROUTES:
            runs = [train_step_comparison(pos, att, route, seed=s) for s in seeds]
            key = f"{pos}/{att}/{route}"
            diff[key] = max(r["loss_rel_diff"] for r in runs)
            finite[key] = all(bool(r["finite"]) for r in runs)
    return diff, finite


@experiment(
    "precision",
    "Mixed precision: rotary parts, patched HF models and training steps in bfloat16 / float16 against float64",
    requires={"transformers": "hf"},  # its anchor is HF's own 16-bit rotary embedding
)
def run(ctx: RunContext) -> ExperimentResult:
    with one_thread():
        return _run(ctx)


def _run(ctx: RunContext, parts=None, families=None, combinations=None) -> ExperimentResult:
    t0 = time.time()
    plan = PrecisionPlan.for_run(ctx.quick, ctx.seed, parts, families, combinations)
    seeds, parts, families, combinations = plan.seeds, plan.parts, plan.families, plan.combinations
    rot, rot_grad = rotation_metrics(parts, seeds)
    t_rot = time.time() - t0
    hf, hf_detail = hf_metrics(families, seeds, n_tokens=HF_TOKENS) if families else ({}, {})
    t_hf = time.time() - t0 - t_rot
    diff, finite = train_metrics(combinations, seeds) if combinations else ({}, {})
    anchor = {dn: hf_native_rope_err_vs_bound(dt, seed=ctx.seed) for dn, dt in DTYPES.items()} if families else {}
    setting = (
        f"ours: CPU, torch {torch.__version__}, seeds {list(seeds)}; rotations of q ~ N(0, 1) at positions "
        f"0-8191 (1-D) and a 64 x 64 grid; HF: tiny config-built models at 2048 tokens with q / k scaled 3x "
        f"(sharp attention); "
        f"training: one step of a 1-layer d = 32 model"
    )
    metrics = {
        "precision_rotation_err_vs_bound": rot,
        "precision_rotation_grad_err_vs_bound": rot_grad,
        "precision_hf_logit_err_vs_native": hf,
        "precision_hf_logit_errors": hf_detail,
        "precision_train_loss_rel_diff": diff,
        "precision_train_finite": finite,
        "precision_anchor_hf_rope_err_vs_bound": anchor,
    }
    notes = [
        f"wall time {time.time() - t0:.0f}s (rotations {t_rot:.0f}s, HF {t_hf:.0f}s) with one intra-op thread.",
        "rotations: max absolute error against the float64 computation of the same 16-bit inputs; HF logits: "
        "root-mean-square error against the float64 model over tokens 1024-2047 (the max over ~40k logits of two "
        "correctly rounding models differs by tens of percent between draws, too noisy for a 1.5x goal).",
        "HF rows: family/dtype is the model built as from_pretrained(dtype=...) builds it; family/dtype/cast is "
        "a float32 model cast with .to(dtype); both against the native model made the same way.",
    ]
    config = {
        "seeds": list(seeds),
        "parts": list(parts),
        "families": list(families),
        "combinations": [list(c) for c in combinations],
        "dtypes": list(DTYPES),
        "routes": list(ROUTES),
    }
    return ExperimentResult(
        metrics=metrics,
        claims=precision_claims(rot, rot_grad, hf, diff, finite, anchor, setting),
        config=config,
        notes=notes,
    )
