"""Experiment `plash`: sketch moments (Prop. C.4, ANW bound), the certification simulation of Fig. 2/4 over
the tau_g range where certificates trigger, and ETTh1 forecasting inside an Informer-faithful backbone
(plash-attention.txt, Sec. 4). Parts: plan, checks and checks_report (sketches,
certificates), forecast, claims."""

from __future__ import annotations

import math
import time

from symformer.experiments.base import RunContext, combined, experiment
from symformer.experiments.plash.checks_report import cert_part, sketch_part
from symformer.experiments.plash.claims import forecast_claims, horizon_average
from symformer.experiments.plash.forecast import forecast_job
from symformer.experiments.plash.plan import (
    HORIZONS,
    METHODS,
    PAPER_ETTH1,
    ForecastPlan,
    PlashPlan,
    method_kwargs,
)
from symformer.results import ExperimentResult
from symformer.runner.jobs import reuse_note, run_jobs
from symformer.stats import mean_se
from symformer.train.presets import informer_lengths


def _progress(ctx: RunContext, what: str, t0: float) -> None:
    if ctx.progress:
        print(f"[plash] {what} done {time.perf_counter() - t0:.0f}s", flush=True)


# cost of a run per token of a window, relative to softmax: about the attention suite's forecaster-step ratios
# (`*_forecast_step_vs_softmax_h24`, results/bench/attention); only the order of the jobs depends on it,
# never a result
_STEP_COST = {"softmax": 1.0, "favor": 1.5, "plash": 5.6}


def _longest_first(jobs: dict) -> list:
    """The jobs, longest expected first (method cost x tokens per window), so that with --jobs N no worker sits
    idle at the end while another runs a long PLASH horizon-168 job; ties keep the plan's order."""

    def cost(item) -> float:
        (m, h, _), _ = item
        return _STEP_COST.get(m, 1.0) * (sum(informer_lengths(h)) + h)

    return [j for _, j in sorted(jobs.items(), key=cost, reverse=True)]


def forecast_runs(ctx: RunContext, plan: ForecastPlan) -> tuple[dict, str]:
    """({(method, horizon): [run record per seed]}, the reuse note) through run_jobs (records under runs/,
    --jobs, --resume)."""
    jobs = {(m, h, s): forecast_job(ctx, m, h, s, plan) for h in plan.horizons for m in METHODS for s in plan.seeds}
    stats: dict = {}
    got = run_jobs(_longest_first(jobs), ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    runs: dict = {}
    for (m, h, _), j in jobs.items():
        runs.setdefault((m, h), []).append(got[j.key])
    return runs, reuse_note("ETTh1", stats)


def forecast_metrics(runs: dict, plan: ForecastPlan) -> dict:
    """Test MSE and MAE per method and horizon (mean and standard error over seeds), their ratios and averages."""
    hs = plan.horizons
    metrics = {
        name: {m: {f"h={h}": mean_se([r[key] for r in runs[(m, h)]]) for h in hs} for m in METHODS}
        for name, key in (("etth1_mse", "test_mse"), ("etth1_mae", "test_mae"))
    }
    mse = {m: {h: metrics["etth1_mse"][m][f"h={h}"]["mean"] for h in hs} for m in METHODS}
    metrics["plash_vs_softmax_mse_ratio"] = {f"h={h}": mse["plash"][h] / mse["softmax"][h] for h in hs}
    metrics["etth1_paper_table1"] = PAPER_ETTH1
    metrics["etth1_training"] = {
        f"{m} h={h}": {
            "best_epoch": [r["best_epoch"] for r in rs],
            "epochs_run": [r["epochs_run"] for r in rs],
            "seconds": [round(r["seconds"], 1) for r in rs],
        }
        for (m, h), rs in runs.items()
    }
    akw = method_kwargs("plash", plan.train_windows is not None)
    metrics["sweep_mse_h24"] = {f"M={akw['M']},D_k={akw['D_k']}": mse["plash"][24]} if 24 in hs else {}
    metrics["etth1_mse_horizon_average"] = {m: horizon_average(metrics["etth1_mse"][m]) for m in METHODS}
    return metrics


def forecast_part(ctx: RunContext, plan: PlashPlan) -> ExperimentResult:
    """ETTh1 forecasting with each attention inside Informer, trained on ctx.device."""
    runs, note = forecast_runs(ctx, plan.forecast)
    metrics = forecast_metrics(runs, plan.forecast)
    claims = forecast_claims(
        metrics["etth1_mse_horizon_average"], metrics["plash_vs_softmax_mse_ratio"], plan.forecast, plan.quick
    )
    config = {
        **plan.forecast.as_dict(),
        "methods": {m: method_kwargs(m, plan.quick) for m in METHODS},
        "paper_horizons": HORIZONS,
    }
    return ExperimentResult(metrics=metrics, claims=claims, config={"forecast": config}, notes=[note])


@experiment(
    "plash",
    "PLASH: sketch moments, certification rate over tau_g, ETTh1 forecasting inside Informer",
    data_files=("ETTh1.csv",),
    options={
        "quick_epochs": (3, "epochs of each ETTh1 forecasting run under --quick"),
        "quick_train_windows": (1024, "random training windows of each forecasting run under --quick"),
    },
)
def run(ctx: RunContext) -> ExperimentResult:
    t0 = time.perf_counter()
    plan = PlashPlan.from_context(ctx)
    sketches = sketch_part(plan)
    _progress(ctx, "sketches", t0)
    certificates = cert_part(plan)
    _progress(ctx, "certificates", t0)
    forecasts = forecast_part(ctx, plan)
    _progress(ctx, "etth1", t0)
    settings = ExperimentResult(config={"quick": ctx.quick, "cert_eta": plan.cert_eta})
    res = combined(settings, sketches, certificates, forecasts)
    res.config["seconds"] = time.perf_counter() - t0
    res.notes.append("The certificate uses eq. (103) with the D_k^{(k-1)/2} factor restored (no effect for K={1}).")
    if not all(math.isfinite(t) for t in res.metrics["certrate_tau_star"].values()):
        res.notes.append("tau_g*(M) = inf: CertRate never reached 0.5 on the grid for that M.")
    return res
