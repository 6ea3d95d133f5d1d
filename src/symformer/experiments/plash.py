"""Experiment `plash`: sketch moments (Prop. C.4, ANW bound), the certification simulation of Fig. 2/4 over
the tau_g range where certificates trigger, and ETTh1 forecasting inside an Informer-faithful backbone
(plash-attention.txt; NOTES.md sections 2 and 5). Parts live in plash_checks.py and plash_forecast.py."""

from __future__ import annotations

import math
import time

from symformer.experiments.base import RunContext, experiment
from symformer.experiments.jobs import reuse_note, run_jobs
from symformer.experiments.plash_checks import DEGREES, cert_simulation, sketch_checks
from symformer.experiments.plash_forecast import (
    HORIZONS,
    PAPER_ETTH1,
    forecast_job,
    method_kwargs,
    protocol,
)
from symformer.results import Claim, ExperimentResult, verdict
from symformer.stats import mean_se

PAPER_SKETCH = "Prop. C.4 / eq. (47)-(48): any k >= 1, any D, 3-wise h and 4-wise s"
PAPER_CERT = (
    "Sec. H.5: K = {1}, D = 256, tau = 1, N_q = 32, N_k = 64, h = 4, d = 32, 200 draws, sigma ~ U[0.004, "
    "0.08]; 15 x 15 log grid tau_g in [631, 1585], eps_out in [520, 853]"
)
PAPER_FORECAST = (
    "Informer backbone (512 / 8 heads / 2+1 layers / d_ff 2048, ProbSparse replaced), ETTh1 horizons "
    "{24, 48, 168, 336, 720}, Adam 1e-4 decayed, batch 32, 6 epochs, attention dropout 0.05"
)


def _progress(ctx: RunContext, what: str, t0: float) -> None:
    if ctx.progress:
        print(f"[plash] {what} done {time.perf_counter() - t0:.0f}s", flush=True)


# ------------------------------------------------------------------------------------------------ sketches
def sketch_part(ctx: RunContext, res: ExperimentResult) -> None:
    draws = 2000 if ctx.quick else 20000
    sk = sketch_checks(draws, ctx.seed)
    setting = f"ours: d = D = 16, {draws} independent hash draws per k, k = 1, 2, 3"
    zmax = max(abs(z) for z in sk["z"].values())
    res.metrics["sketch_unbiased_max_abs_z"] = zmax
    res.metrics["sketch_variance"] = {
        f"k={k}": {
            "measured": sk["var"][k],
            "prop_c4_bound": sk["bound"][k],
            "uniform_measured": sk["var_uniform"][k],
            "uniform_prop_c4_bound": sk["bound_uniform"][k],
            "anw_bound": (2 + 3**k) / 16,
        }
        for k in DEGREES
    }
    res.metrics["sketch_anw_var_ratio_max"] = max(sk["anw_ratio"].values())
    res.claims.append(
        Claim(
            "C.4-mean",
            "E<TS_k(x), TS_k(y)> = <x,y>^k, k = 1, 2, 3",
            "eq. (47)",
            f"max |z| = {zmax:.2f}",
            verdict(zmax < 4.0),
            "z-score of the mean over independent hash draws; |z| >= 4 has probability ~6e-5",
            setting,
            PAPER_SKETCH,
        )
    )
    # Var estimate's relative standard error ~ sqrt(2 + kurtosis) / sqrt(draws): allow 30% slack in quick mode.
    slack = 1.3 if ctx.quick else 1.1
    worst = {k: max(sk["var"][k] / sk["bound"][k], sk["var_uniform"][k] / sk["bound_uniform"][k]) for k in DEGREES}
    res.claims.append(
        Claim(
            "C.4-var",
            "Var<TS_k(x), TS_k(y)> <= (<x,y>^2k + |x|^2k |y|^2k) / D",
            "eq. (48), all k",
            ", ".join(f"k={k}: var/bound = {w:.2f}" for k, w in worst.items()),
            verdict(all(w <= slack for w in worst.values())),
            "a finding about the paper: Step 4 of the proof of Prop. C.4 "
            "treats the lifted sketch C of x^(k-fold tensor) "
            "as one CountSketch with 4-wise independent signs and keeps "
            "only the index pairings (p,q) = (r,t) or (t,r). "
            "That is right for a single CountSketch (k = 1), but the lifted sign s(p) = prod_t s_t(p_t) and hash "
            "h(p) = sum_t h_t(p_t) mod D pair up factor by factor, so mixed ('rectangle') patterns also survive the "
            "expectation; x = y = uniform unit vector exceeds the bound for k >= 2 (with fully independent hashes too)",
            setting,
            PAPER_SKETCH,
        )
    )
    ratios = ", ".join(f"k={k}: {r:.2f}" for k, r in sk["anw_ratio"].items())
    res.claims.append(
        Claim(
            "ANW-var",
            "Var<TS_k(x), TS_k(y)> <= (2 + 3^k) |x|^2k |y|^2k / D (Avron, Nguyen, Woodruff "
            "2014, Lemma 2): the bound the sketch actually satisfies",
            "cited after Assumption C.2 (Avron et al., 2014)",
            f"measured var / ANW bound: {ratios} (max {res.metrics['sketch_anw_var_ratio_max']:.2f})",
            verdict(res.metrics["sketch_anw_var_ratio_max"] <= 1.0),
            "worst of a random correlated pair and x = y = uniform; <= 1 means the bound holds",
            setting,
            "not checked in the paper (it relies on eq. 48)",
        )
    )


# ----------------------------------------------------------------------------------------- certification
def _shape_ok(cs: dict) -> tuple[bool, bool | None]:
    """(CertRate never falls as tau_g grows for any M, grid-mean CertRate at the largest M > at the smallest M;
    None when the two means tie, i.e. the grid cannot resolve an M effect)."""
    rising_tau = all(all(b >= a for a, b in zip(r, r[1:])) for r in cs["certrate"].values())
    ms = sorted(cs["certrate"])
    mean = {m: sum(cs["certrate"][m]) / len(cs["certrate"][m]) for m in ms}
    if math.isclose(mean[ms[-1]], mean[ms[0]], abs_tol=1e-12):
        return rising_tau, None
    return rising_tau, mean[ms[-1]] > mean[ms[0]]


def cert_part(ctx: RunContext, res: ExperimentResult) -> None:
    cs = cert_simulation(ctx.quick, ctx.seed)
    ms = sorted(cs["certrate"])
    res.metrics["certrate_mean"] = {f"M={m}": sum(r) / len(r) for m, r in cs["certrate"].items()}
    res.metrics["certrate_tau_star"] = {f"M={m}": t for m, t in cs["tau_star"].items()}
    res.metrics["certificate_violations"] = cs["violations"]
    res.metrics["certrate_grid"] = {f"M={m}": g for m, g in cs["grid"].items()}  # {tau_g: [rate per eps_out]}
    res.metrics["certificate_detail"] = {
        "certified_cells": cs["certified_cells"],
        "draws": cs["draws"],
        "tau_g_grid": cs["tau_grid"],
        "eps_out_grid": cs["eps_grid"],
        "trivial_bound_median": cs["trivial_bound_median"],
        "median_eps_I_plus_eps_det": cs["median_eps_I_plus_det"],
        "median_measured_error": cs["median_error"],
        "median_C_at_tau_g_ends": cs["median_C"],
        "sizing_rule_delta": cs["delta"],
    }
    rising_tau, rising_m = _shape_ok(cs)
    triv = max(cs["trivial_bound_median"].values())
    own = max(cs["median_eps_I_plus_det"].values())
    setting = (
        f"ours: {len(ms)} M values {ms}, {cs['draws']} draws, {len(cs['tau_grid'])} x {len(cs['eps_grid'])} "
        f"log grid tau_g in [631, 1e5], eps_out in [520, 853]; PLASH at our defaults (random init, mixer "
        f"width 32, LayerNorm eps 1e-5)"
    )
    res.claims.append(
        Claim(
            "Fig.4-rate",
            "CertRate rises with tau_g and with M (paper: grid-mean 0.246 at M=16 -> 0.368 at M=64)",
            "Sec. H.5, Fig. 2/4",
            "tau_g*(M) where CertRate crosses 0.5: "
            + ", ".join(f"M={m}: {cs['tau_star'][m]:.3g}" for m in ms)
            + f"; non-decreasing in tau_g: {rising_tau}; grid-mean rises with M: {rising_m}",
            verdict(False if not rising_tau else rising_m),
            "a shape comparison only: the absolute rate depends on constants the paper does not report (the block's "
            "initialisation, the mixer width, the LayerNorm eps), and at ours the certificate triggers near tau_g "
            "~2-3e4, above the paper's window; median constant C falls from "
            + ", ".join(f"{v['tau_g_min']:.2g}" for v in cs["median_C"].values())
            + " (tau_g = 631) to "
            + ", ".join(f"{v['tau_g_max']:.2g}" for v in cs["median_C"].values())
            + " (tau_g = 1e5). The trivial bound "
            f"||Y_soft|| + ||Y_PLASH|| (median <= {triv:.1f}) is {520 / triv:.0f}-{853 / triv:.0f}x below the paper's "
            "eps_out window, so every eps_out there is certified by the triangle inequality alone; the certificate's "
            f"own eps_I + eps_det (median up to {own:.1f}) is already of the size of that trivial bound",
            setting,
            PAPER_CERT,
        )
    )
    n_cert, n_viol = cs["certified_cells"], cs["violations"]
    res.claims.append(
        Claim(
            "H.3-sound",
            "certified draws have ||Y_soft - Y_PLASH||_F <= eps_out",
            "Thm H.3",
            f"{n_viol} violations in {n_cert} certified (M, tau_g, draw, eps_out) cells",
            verdict(n_viol == 0 if n_cert > 0 else None),
            "inconclusive when nothing is certified (the check is then vacuous)",
            setting,
            PAPER_CERT,
        )
    )


# ------------------------------------------------------------------------------------------- forecasting
def _methods() -> list[str]:
    return ["softmax", "favor", "plash"]


# cost of a run per token of a window, relative to softmax (bench attention: a PLASH forecaster step is ~5.6x a
# softmax one, FAVOR+ ~1.5x); only the order of the jobs depends on it, never a result
_STEP_COST = {"softmax": 1.0, "favor": 1.5, "plash": 5.6}


def _longest_first(jobs: dict) -> list:
    """The jobs, longest expected first (method cost x tokens per window), so that with --jobs N no worker sits
    idle at the end while another runs a long PLASH horizon-168 job; ties keep the plan's order."""
    from symformer.train.presets import informer_lengths

    def cost(item) -> float:
        (m, h, _), _ = item
        return _STEP_COST.get(m, 1.0) * (sum(informer_lengths(h)) + h)

    return [j for _, j in sorted(jobs.items(), key=cost, reverse=True)]


def _forecast_runs(ctx: RunContext, proto: dict, res: ExperimentResult) -> dict:
    """{(method, horizon): [run record per seed]} through run_jobs (records under runs/, --jobs, --resume)."""
    jobs = {
        (m, h, s): forecast_job(ctx, m, h, s, proto)
        for h in proto["horizons"]
        for m in _methods()
        for s in proto["seeds"]
    }
    stats: dict = {}
    got = run_jobs(_longest_first(jobs), ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    res.notes.append(reuse_note("ETTh1", stats))
    runs: dict = {}
    for (m, h, _), j in jobs.items():
        runs.setdefault((m, h), []).append(got[j.key])
    return runs


def horizon_average(per_h: dict) -> dict:
    """{"mean", "se"} of the average over horizons of per-horizon {"mean", "se"} (seeds independent across
    horizons, so the standard errors add in quadrature)."""
    n = len(per_h)
    return {
        "mean": sum(v["mean"] for v in per_h.values()) / n,
        "se": math.sqrt(sum(v["se"] ** 2 for v in per_h.values())) / n,
    }


def relative_difference(a: dict, b: dict) -> tuple[float, float]:
    """a/b - 1 and its standard error by the delta method (a and b independent)."""
    r = a["mean"] / b["mean"]
    return r - 1, abs(r) * math.sqrt((a["se"] / a["mean"]) ** 2 + (b["se"] / b["mean"]) ** 2)


def band_verdict(rel: float, se: float, bound: float) -> str:
    """holds when rel + 2 se <= bound, fails when rel - 2 se > bound, else inconclusive (se = 0: a point test)."""
    return verdict(True if rel + 2 * se <= bound else False if rel - 2 * se > bound else None)


def _pm(x: dict) -> str:
    return f"{x['mean']:.4f}" + (f" ± {x['se']:.4f}" if x["se"] > 0 else "")


def _pct(rel: float, se: float) -> str:
    return f"{100 * rel:+.1f}" + (f" ± {100 * se:.1f}%" if se > 0 else "%")


def _forecast_metrics(runs: dict, proto: dict, res: ExperimentResult) -> dict:
    hs = proto["horizons"]
    for name, key in (("etth1_mse", "test_mse"), ("etth1_mae", "test_mae")):
        res.metrics[name] = {m: {f"h={h}": mean_se([r[key] for r in runs[(m, h)]]) for h in hs} for m in _methods()}
    mse = {m: {h: res.metrics["etth1_mse"][m][f"h={h}"]["mean"] for h in hs} for m in _methods()}
    res.metrics["plash_vs_softmax_mse_ratio"] = {f"h={h}": mse["plash"][h] / mse["softmax"][h] for h in hs}
    res.metrics["etth1_paper_table1"] = PAPER_ETTH1
    res.metrics["etth1_training"] = {
        f"{m} h={h}": {
            "best_epoch": [r["best_epoch"] for r in rs],
            "epochs_run": [r["epochs_run"] for r in rs],
            "seconds": [round(r["seconds"], 1) for r in rs],
        }
        for (m, h), rs in runs.items()
    }
    akw = method_kwargs("plash", proto["train_windows"] is not None)
    res.metrics["sweep_mse_h24"] = {f"M={akw['M']},D_k={akw['D_k']}": mse["plash"][24]} if 24 in hs else {}
    return mse


def forecast_part(ctx: RunContext, res: ExperimentResult) -> None:
    proto = protocol(ctx)
    runs = _forecast_runs(ctx, proto, res)
    _forecast_metrics(runs, proto, res)
    hs, sz = proto["horizons"], proto["size"]
    pk = method_kwargs("plash", ctx.quick)
    setting = (
        f"ours: Informer {sz['d_model']} / {sz['n_heads']} heads / {sz['e_layers']}+{sz['d_layers']} layers / "
        f"d_ff {sz['d_ff']}, horizons {list(hs)}, seeds {list(proto['seeds'])}, <= {proto['epochs']} epochs, "
        f"patience {proto['patience']}, full test set, PLASH M={pk['M']} D_k={pk['D_k']}"
        + (
            f"; quick: {proto['train_windows']} random training windows, {proto['val_windows']} validation windows"
            if proto["train_windows"]
            else ""
        )
    )
    ratios = res.metrics["plash_vs_softmax_mse_ratio"]
    avg = {m: horizon_average(res.metrics["etth1_mse"][m]) for m in _methods()}
    res.metrics["etth1_mse_horizon_average"] = avg
    one = len(proto["seeds"]) == 1
    rule = (
        "1 seed: a point comparison, no error bar"
        if one
        else "holds if the relative difference + 2 SE is within the bound, fails if - 2 SE is beyond it, else "
        "inconclusive (SE over seeds per horizon, combined over horizons, delta method for the ratio)"
    )
    rel, se = relative_difference(avg["plash"], avg["softmax"])
    res.claims.append(
        Claim(
            "T1-etth1",
            f"PLASH (M={pk['M']}, D_k={pk['D_k']}) test MSE within 5% of Informer's vanilla attention, "
            "averaged over horizons",
            "Table 1: Vanilla 0.5553, PLASH(64,128) 0.5747 (+3.5%), best 0.4553",
            f"softmax {_pm(avg['softmax'])}, plash {_pm(avg['plash'])} ({_pct(rel, se)}); per "
            "horizon plash/softmax: " + ", ".join(f"{k}: {v:.3f}" for k, v in ratios.items()),
            band_verdict(rel, se, 0.05),
            rule,
            setting,
            PAPER_FORECAST,
        )
    )
    if "favor" in avg:
        relf, sef = relative_difference(avg["favor"], avg["softmax"])
        res.claims.append(
            Claim(
                "T1-favor",
                "Performer (FAVOR+) test MSE at or below vanilla attention, averaged over horizons",
                "Table 1: Vanilla 0.5553, Performer 0.5065 (-8.8%)",
                f"softmax {_pm(avg['softmax'])}, favor {_pm(avg['favor'])} ({_pct(relf, sef)})",
                band_verdict(relf, sef, 0.0),
                rule + "; FAVOR+ takes no attention dropout (no attention matrix), its features are drawn per layer",
                setting,
                PAPER_FORECAST,
            )
        )
    res.config["forecast"] = {
        **proto,
        "methods": {m: method_kwargs(m, ctx.quick) for m in _methods()},
        "paper_horizons": HORIZONS,
    }


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
    res = ExperimentResult()
    res.config = {"quick": ctx.quick, "cert_eta": 0.99}
    sketch_part(ctx, res)
    _progress(ctx, "sketches", t0)
    cert_part(ctx, res)
    _progress(ctx, "certificates", t0)
    forecast_part(ctx, res)
    _progress(ctx, "etth1", t0)
    res.config["seconds"] = time.perf_counter() - t0
    res.notes.append("The certificate uses eq. (103) with the D_k^{(k-1)/2} factor restored (no effect for K={1}).")
    if not all(math.isfinite(t) for t in res.metrics["certrate_tau_star"].values()):
        res.notes.append("tau_g*(M) = inf: CertRate never reached 0.5 on the grid for that M.")
    return res
