"""Experiment `favor`: positive random features on rotated queries and keys (ESPR Tier 7).

1. Monte Carlo check of T7.3 (unbiasedness) on a grid of |x|, |y| and angle, i.i.d. and orthogonal features.
2. Monte Carlo check of T7.4/T7.5 (closed-form variance, 1/n_rf scaling) where the variance is estimable.
3. Attention-output error against exact softmax as a function of m for plain, RoPE- and ESPR-rotated q/k.
4. Equality with performer-pytorch's FastAttention given the same projection matrix.
5. A causal character LM on tiny Shakespeare: softmax against FAVOR+, validation bits per character.
"""

from __future__ import annotations

import math

import torch

from symformer.attention.favor import FavorAttention, draw_features
from symformer.attention.softmax import naive_attention
from symformer.experiments.base import RunContext, experiment
from symformer.experiments.favor_lm import lm_part
from symformer.experiments.plots import pyplot
from symformer.results import Claim, ExperimentResult, verdict
from symformer.stats import fit_exponent

PAPER = "ESPR derivation, Tier 7"
Z_MAX = 4.5  # issue: max |z| <= 4.5 over the grid
VAR_TOL = 0.15  # issue: variance relative error <= 0.15
ESTIMABLE_SE = 0.03  # a point is estimable when the predicted relative s.e. of its sample variance is <= 3%
ROUNDING = 1e-12  # relative floating-point floor of the Monte Carlo mean (float64 sums of 1e5-1e6 terms)
INPUT_STD = 0.4  # q, k entries of the error-vs-m inputs: |q^|^2 = INPUT_STD^2 sqrt(Dh) = 1.28 for Dh = 64


# ---------------------------------------------------------------------------- Monte Carlo (T7.3-T7.5)
def grid_points(d: int, norms: list[float], angles: list[float], seed: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Pairs (x, y) in R^d with prescribed |x|, |y| and angle, in random orientations."""
    g = torch.Generator().manual_seed(seed)
    xs, ys, meta = [], [], []
    for nx in norms:
        for ny in norms:
            for ang in angles:
                u = torch.linalg.qr(torch.randn(d, 2, generator=g, dtype=torch.float64))[0]
                xs.append(nx * u[:, 0])
                ys.append(ny * (math.cos(ang) * u[:, 0] + math.sin(ang) * u[:, 1]))
                meta.append((nx, ny, ang))
    return torch.stack(xs), torch.stack(ys), meta


def single_draw_variance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """T7.4: Var Z = exp(2 x.y) [exp(|x|^2 + |y|^2 + 2 x.y) - 1], with |x|^2 + |y|^2 + 2 x.y evaluated as
    |x + y|^2 (the same number, but without cancellation near y = -x, where the variance vanishes)."""
    xy = (x * y).sum(-1)
    return torch.exp(2 * xy) * torch.expm1(((x + y) ** 2).sum(-1))


def relative_se_of_variance(x: torch.Tensor, y: torch.Tensor, n_rf: int, reps: int) -> torch.Tensor:
    """Predicted relative s.e. of the sample variance of `reps` means of n_rf draws: Z is log-normal with
    log-variance s^2 = |x + y|^2, excess kurtosis e^{4s^2} + 2e^{3s^2} + 3e^{2s^2} - 6; averaging n_rf draws
    divides it by n_rf; Var(sample variance) ~ sigma^4 (kurtosis_excess + 2) / reps."""
    s2 = ((x + y) ** 2).sum(-1)
    kurt = torch.exp(4 * s2) + 2 * torch.exp(3 * s2) + 3 * torch.exp(2 * s2) - 6
    return torch.sqrt((kurt / n_rf + 2) / reps)


def draw_z(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Z(x, y; w_t) = exp(w_t.(x + y) - (|x|^2 + |y|^2)/2) (T7.1), shape (draws, points)."""
    return torch.exp(w @ (x + y).T - 0.5 * ((x * x).sum(-1) + (y * y).sum(-1)))


def monte_carlo(
    d: int, draws: int, n_rf_list: list[int], norms: list[float], angles: list[float], seed: int, chunk: int = 100_000
) -> dict:
    x, y, meta = grid_points(d, norms, angles, seed)
    target = torch.exp((x * y).sum(-1))
    var1 = single_draw_variance(x, y)
    out: dict = {"meta": meta, "z": {}, "var": {}}
    g = torch.Generator().manual_seed(seed + 1)
    for orth in (False, True):
        kind = "orthogonal" if orth else "iid"
        total = torch.zeros_like(target)
        means: dict[int, list[torch.Tensor]] = {n: [] for n in n_rf_list}
        done = 0
        while done < draws:
            c = min(chunk, draws - done)
            block = math.lcm(*n_rf_list, d)  # whole groups of n_rf draws and whole orthogonal blocks
            c = max(c - c % block, block)
            z = draw_z(draw_features(c, d, orth, g), x, y)
            total += z.sum(0)
            for n in n_rf_list:
                means[n].append(z.view(c // n, n, -1).mean(1))
            done += c
        mean = total / done
        # T7.3 z-score with the T7.4/T7.5 standard deviation of the mean of `done` i.i.d. draws (for orthogonal
        # features this is conservative when their variance is no larger, which part 2 measures). At y = -x the
        # estimator is the constant exp(-|x|^2) (variance 0): a rounding floor of 1e-12 relative keeps z finite
        sd = torch.sqrt(var1 / done + (ROUNDING * target) ** 2)
        out["z"][kind] = ((mean - target) / sd).tolist()
        for n in n_rf_list:
            m = torch.cat(means[n])
            emp = m.var(0)
            pred = var1 / n  # T7.5
            se = relative_se_of_variance(x, y, n, len(m))
            # a relative variance error is meaningless where the variance is 0 up to rounding (y = -x)
            ok = (se <= ESTIMABLE_SE) & (var1 > (ROUNDING * target) ** 2)
            out["var"][(kind, n)] = {"ratio": (emp / pred).tolist(), "estimable": ok.tolist()}
    return out


# ---------------------------------------------------------------------------- output error against softmax
def rotated_inputs(kind: str, n: int, dh: int, seed: int):
    """q, k, v (1, 2, n, dh) float64 and the logit scale, after the positional module `kind`."""
    g = torch.Generator().manual_seed(seed)
    # the T7.5 variance grows like exp(|q^|^2 + |k^|^2): moderate norms keep the curve in the Monte Carlo regime
    q, k, v = (torch.randn(1, 2, n, dh, generator=g, dtype=torch.float64) * s for s in (INPUT_STD, INPUT_STD, 1.0))
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    if kind == "plain":
        return q, k, v, None
    if kind == "rope":
        from symformer.positional import RoPE

        rq, rk = RoPE(dh).double()(q, k, pos)
        return rq, rk, v, None
    from symformer.positional import ESPR

    # seed + 1: ESPR's init noise from seed's own generator would be 0.05 q itself
    # the pairing of the recorded runs (STRING/ESPR's default before issue 42)
    espr = ESPR(dh, 1, d_act=dh // 2, commuting_init=False, seed=seed + 1, pairing="interleaved").double()
    with torch.no_grad():
        rq, rk = espr(q, k, pos)
    # q~ lives in the d_act-dim active space; scale = 1/sqrt(d_act) makes q^ = d_act^(-1/4) q~ (T7.2)
    return rq, rk, v, espr.scale


def output_errors(ms: list[int], kinds: list[str], n: int, dh: int, seeds: int) -> dict:
    """Mean relative Frobenius error |Y_favor - Y_softmax|_F / |Y_softmax|_F over feature draws (feature seeds 1..seeds:
    seed 0's Haar block would be built from the inputs' own first Gaussian draws)."""
    res: dict = {}
    for kind in kinds:
        q, k, v, scale = rotated_inputs(kind, n, dh, 0)
        exact = naive_attention(q, k, v, scale=scale)
        res[kind] = []
        for m in ms:
            errs = [
                float(
                    (FavorAttention(dh, n_features=m, seed=s).double()(q, k, v, scale=scale) - exact).norm()
                    / exact.norm()
                )
                for s in range(1, seeds + 1)
            ]
            res[kind].append(sum(errs) / seeds)
    # performer-pytorch's feature epsilon (1e-4) on the plain inputs: a bias that does not average out
    q, k, v, _ = rotated_inputs("plain", n, dh, 0)
    exact = naive_attention(q, k, v)
    res["plain_eps1e-4"] = [
        sum(
            float(
                (FavorAttention(dh, n_features=m, seed=s, kernel_eps=1e-4).double()(q, k, v) - exact).norm()
                / exact.norm()
            )
            for s in range(1, seeds + 1)
        )
        / seeds
        for m in ms
    ]
    return res


# ---------------------------------------------------------------------------- performer-pytorch
def performer_diff(dtype: torch.dtype, causal: bool, n: int = 512, dh: int = 64, m: int = 128) -> float | None:
    try:
        from performer_pytorch import FastAttention
    except ImportError:
        return None
    torch.manual_seed(0)
    fa = FastAttention(dh, nb_features=m, causal=causal).to(dtype)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, n, dh, generator=g, dtype=dtype) for _ in range(3))
    # performer-pytorch adds 1e-4 to every feature and 1e-6 to its causal running key sum (module doc of favor.py)
    ours = FavorAttention(dh, n_features=m, kernel_eps=1e-4, denominator_eps=1e-6 if causal else 0.0).to(dtype)
    ours.set_features(fa.projection_matrix)
    with torch.no_grad():
        return float((ours(q, k, v, is_causal=causal) - fa(q, k, v)).abs().max())


# ---------------------------------------------------------------------------- figure
def plot_errors(path, ms: list[int], errs: dict) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for kind, ys in errs.items():
        ax.loglog(ms, ys, "o-" if "eps" not in kind else "x--", label=kind)
    ref = [errs["plain"][0] * math.sqrt(ms[0] / m) for m in ms]
    ax.loglog(ms, ref, ":", color="gray", label="m^(-1/2)")
    ax.set_xlabel("random features m")
    ax.set_ylabel("relative Frobenius error vs softmax")
    ax.legend()
    ax.set_title("FAVOR+ attention output error")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------- experiment
def _claims_mc(mc: dict, draws: int) -> tuple[list[Claim], dict]:
    zmax = {k: max(abs(z) for z in zs) for k, zs in mc["z"].items()}
    rel, orth_ratio = [], []
    for (kind, n), r in mc["var"].items():
        pts = [x for x, e in zip(r["ratio"], r["estimable"]) if e]
        if kind == "iid" or n == 1:  # T7.4/T7.5 are statements about i.i.d. draws (a single orthogonal row is N(0, I))
            rel += [abs(x - 1) for x in pts]
        else:
            orth_ratio += pts
    n_pts = len(mc["meta"])
    claims = [
        Claim(
            "T7.3",
            "positive random features estimate exp(x.y) without bias",
            PAPER,
            f"max |z| = {max(zmax.values()):.2f} (iid {zmax['iid']:.2f}, orthogonal {zmax['orthogonal']:.2f}) over "
            f"{n_pts} grid points, {draws} draws each",
            verdict(max(zmax.values()) <= Z_MAX),
            f"threshold |z| <= {Z_MAX}; z uses the T7.4/T7.5 standard deviation",
        ),
        Claim(
            "T7.4-T7.5",
            "Var Z = exp(2x.y)[exp(|x|^2+|y|^2+2x.y) - 1], divided by n_rf for n_rf i.i.d. draws",
            PAPER,
            f"max relative error {max(rel):.3f} over {len(rel)} estimable (point, n_rf) cells"
            if rel
            else "no estimable cell",
            verdict(max(rel) <= VAR_TOL if rel else None),
            f"tolerance {VAR_TOL}; estimable = predicted relative s.e. of the sample variance <= {ESTIMABLE_SE}",
        ),
        Claim(
            "ORF",
            "orthogonal features do not increase the variance (Performer, Choromanski et al. 2021)",
            "Performer Thm 2 (not in ESPR)",
            f"max empirical/iid-formula variance ratio {max(orth_ratio):.3f}, "
            f"median {sorted(orth_ratio)[len(orth_ratio) // 2]:.3f}"
            if orth_ratio
            else "no estimable cell",
            verdict(max(orth_ratio) <= 1 + VAR_TOL if orth_ratio else None),
            "ratio of the variance of a block-mean of d orthogonal features to Var Z / d",
        ),
    ]
    metrics = {
        "unbiased_max_abs_z": max(zmax.values()),
        "unbiased_max_abs_z_by_kind": zmax,
        "variance_max_rel_err": max(rel) if rel else None,
        "variance_estimable_cells": len(rel),
        "orthogonal_variance_ratio_max": max(orth_ratio) if orth_ratio else None,
    }
    return claims, metrics


def _mc_part(ctx: RunContext, metrics: dict, claims: list) -> dict:
    d = 16
    draws = 100_000 if ctx.quick else 1_000_000
    norms, angles = [0.25, 0.5, 1.0, 1.5], [0.0, math.pi / 3, math.pi / 2, 2 * math.pi / 3, math.pi]
    n_rf_list = [1, d]
    mc = monte_carlo(d, draws, n_rf_list, norms, angles, ctx.seed)
    new, m = _claims_mc(mc, draws)
    setting = f"ours: d = {d}, {len(mc['meta'])} (|x|, |y|, angle) points, {draws} draws, n_rf in {n_rf_list}"
    for c in new:
        c.setting, c.paper_setting = setting, "any x, y in R^d (analytic statement)"
    claims += new
    metrics.update(m)
    return {"d": d, "draws": draws, "norms": norms, "angles": angles, "n_rf": n_rf_list}


def _error_part(ctx: RunContext, metrics: dict, claims: list, figures: list) -> dict:
    ms = [16, 32, 64, 128, 256, 512, 1024]
    n, seeds = (128, 6) if ctx.quick else (512, 20)
    errs = output_errors(ms, ["plain", "rope", "espr"], n=n, dh=64, seeds=seeds)
    slopes = {k: fit_exponent(ms[2:], v[2:]) for k, v in errs.items() if "eps" not in k}
    metrics["output_rel_err"] = {k: dict(zip(ms, v)) for k, v in errs.items()}
    metrics["output_err_slope_vs_m"] = slopes
    claims.append(
        Claim(
            "T7.3 (attention)",
            "FAVOR+ output error vanishes like m^(-1/2) on plain, RoPE- and ESPR-rotated q/k (Monte Carlo rate)",
            PAPER,
            ", ".join(f"{k}: slope {s:.2f}" for k, s in slopes.items()),
            verdict(all(-0.7 <= s <= -0.3 for s in slopes.values())),
            "least-squares slope of log error against log m over m >= 64; accepted in [-0.7, -0.3]",
            f"ours: N = {n}, head_dim 64, m in {ms}, {seeds} feature seeds",
            "Monte Carlo rate, any m",
        )
    )
    plot_errors(ctx.out_dir / "favor_error_vs_m.png", ms, errs)
    figures.append("favor_error_vs_m.png")
    return {"ms": ms, "dh": 64, "qk_std": INPUT_STD, "n": n, "espr_d_act": 32}


def _performer_part(metrics: dict, claims: list) -> None:
    diffs = {(dt, c): performer_diff(dt, c) for dt in (torch.float32, torch.float64) for c in (False, True)}
    d32 = [v for (dt, _), v in diffs.items() if dt == torch.float32 and v is not None]
    d64 = [v for (dt, _), v in diffs.items() if dt == torch.float64 and v is not None]
    metrics["performer_max_abs_diff"] = max(d32) if d32 else None
    metrics["performer_max_abs_diff_float64"] = max(d64) if d64 else None
    claims.append(
        Claim(
            "performer-pytorch",
            "equal to performer-pytorch FastAttention (same projection; non-causal and causal)",
            "issue 7: <= 1e-4 float32, <= 1e-10 float64",
            f"float32 {metrics['performer_max_abs_diff']}, float64 {metrics['performer_max_abs_diff_float64']}",
            verdict(max(d32) <= 1e-4 and max(d64) <= 1e-10 if d32 and d64 else None),
            "performer-pytorch not installed" if not d32 else "max |difference| over outputs",
            "ours: N = 512, head_dim 64, m = 128, batch 2 x 4 heads",
            "reference implementation",
        )
    )


@experiment(
    "favor",
    "FAVOR+ on rotated queries/keys: T7.3-T7.5 Monte Carlo, error vs m, performer-pytorch, char LM",
    data_files=("tinyshakespeare.txt",),
)
def run(ctx: RunContext) -> ExperimentResult:
    metrics: dict = {}
    claims: list[Claim] = []
    figures: list[str] = []
    config = {"mc": _mc_part(ctx, metrics, claims)}
    config["error_vs_m"] = _error_part(ctx, metrics, claims, figures)
    _performer_part(metrics, claims)
    config["lm"] = lm_part(ctx, metrics, claims, figures)
    return ExperimentResult(
        metrics=metrics,
        claims=claims,
        figures=figures,
        config=config,
        notes=[
            "The stabiliser subtracts one constant per query and one per (batch, head) for all keys; both cancel "
            "in the normalised attention, so they add no bias (favor.py module doc).",
            "performer-pytorch adds 1e-4 to every feature (and 1e-6 to its causal key sums); the row "
            "'plain_eps1e-4' of output_rel_err shows the resulting bias against exact softmax.",
            "ESPR inputs use d_act = head_dim/2 with non-commuting generators; features are drawn in head_dim, "
            "so on the active space the orthogonal blocks are only approximately orthogonal.",
            "The LM row is our claim after Performer's 'comparable accuracy'; the ESPR derivation's Tier 7 "
            "(T7.1-T7.5) is covered by the rows above.",
        ],
    )
