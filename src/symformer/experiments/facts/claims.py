"""The claims of experiment `facts` from parts (a) and (b): constructions, the ratios of MLP sizes and their scaling."""

from __future__ import annotations

from symformer.experiments.base import combined
from symformer.experiments.facts.plan import PAPER
from symformer.results import Claim, ExperimentResult, verdict
from symformer.stats import fit_exponent


def claims_a(acc: dict) -> ExperimentResult:
    res = ExperimentResult()
    res.metrics["construction_store_accuracy_min"] = min(acc.values())
    res.metrics["construction_store_accuracy"] = acc
    worst = min(acc, key=acc.get)
    res.claims.append(
        Claim(
            "a/Thm4.3.1",
            "every construction stores 100% of the facts where its conditions hold",
            "100% (Thm 4.3.1, Constructions 4.1/B.1, Alg. 5/8)",
            f"min accuracy {min(acc.values()):.4f} over {len(acc)} (method, d)",
            verdict(min(acc.values()) >= 1.0),
            f"worst {worst}: {acc[worst]:.4f}; all: {acc}",
            "ours: d in {32, 64}, F = d^2/4, tied sphere embeddings, 1 seed; two-hot keys at d = 8 (quick) / 16",
            "Thm 4.3.1: any d, F under the construction's conditions",
        )
    )
    return res


def claims_ratios(rows: list[dict], gd_methods: list[str], setting: str) -> ExperimentResult:
    res = ExperimentResult()
    dref, Fref = 32, 256
    res.metrics["bits_per_param"] = {
        r["method"]: r["bits_per_param"] for r in rows if r["d"] == dref and r["F"] == Fref
    }
    p = {
        m: next((r["params"] for r in rows if r["method"] == m and r["d"] == dref and r["F"] == Fref), None)
        for m in gd_methods
    }
    ratio = lambda a, b: (p[a] / p[b]) if p.get(a) and p.get(b) else None  # noqa: E731
    r_gd, r_gdgd, r_ntk, r_mo = (
        ratio("bin+jl", "gd-swiglu"),
        ratio("gd+gd", "gd-swiglu"),
        ratio("ntk", "bin+jl"),
        ratio("ntk", "ntk-mo"),
    )
    res.metrics["gd_vs_binjl_param_ratio"] = r_gd
    res.metrics["gdgd_vs_gd_param_ratio"] = r_gdgd
    res.metrics["ntk_vs_constructed_param_ratio"] = r_ntk
    at = f"d={dref}, F={Fref}, params {p}"
    fmt = lambda x: f"{x:.3g}x" if x else "n/a"  # noqa: E731
    ps = "Fig. 2b/2c: d up to 256, F up to 16k, several seeds (count not stated); GD+JL also in the paper"
    res.claims += [
        Claim(
            "e/Fig2b-gd",
            "GD MLPs need ~20x fewer parameters than Bin+JL",
            "~20x",
            fmt(r_gd),
            verdict(None if r_gd is None else PAPER["gd_vs_binjl"] / 2 <= r_gd <= 2 * PAPER["gd_vs_binjl"]),
            f"{at}; holds if within a factor 2 of 20x",
            setting,
            ps,
        ),
        Claim(
            "e/Fig2c-gdgd",
            "GD+GD within 4x of the GD-trained MLP's parameter count",
            "~4x",
            fmt(r_gdgd),
            verdict(None if r_gdgd is None else r_gdgd <= PAPER["gdgd_vs_gd"]),
            at,
            setting,
            ps,
        ),
        Claim(
            "e/Fig2b-ntk",
            "constructed MLPs need 5-150x fewer parameters than NTK MLPs",
            "5-150x",
            fmt(r_ntk),
            verdict(None if r_ntk is None else PAPER["ntk_lo"] <= r_ntk <= PAPER["ntk_hi"]),
            at,
            setting,
            ps,
        ),
        Claim(
            "A.1.4/Fig5",
            "margin-optimal targets U* improve NTK MLPs 2-4x",
            "2-4x",
            fmt(r_mo),
            verdict(None if r_mo is None else r_mo >= 2.0),
            f"{at}; kappa = 1; holds if NTK(V) / NTK(U*) >= 2 (the kappa sweep is row A.1.4/Fig5-kappa)",
            f"ours: one point (kappa = 1, d={dref}, F={Fref}) of "
            f"{setting[len('ours: ') :]}; the paper's form, the kappa sweep, is row A.1.4/Fig5-kappa",
            "Fig. 5: kappa sweep, d up to 256",
        ),
    ]
    return res


def claims_scaling(rows: list[dict], setting: str) -> ExperimentResult:
    res = ExperimentResult()

    slopes = {}
    for method in ("bin+jl", "gd-swiglu", "ntk"):
        pts = [(r["F"], r["params"]) for r in rows if r["method"] == method and r["params"]]
        if len({f for f, _ in pts}) >= 2:
            slopes[method] = fit_exponent([f for f, _ in pts], [q for _, q in pts])
    res.metrics["scaling_exponent"] = slopes  # each method over all of its own points
    # the comparison fits both methods on the same (d, F) points: slopes over different supports (quick runs
    # GD at d = 32 only) would mix the d-dependence into the F-dependence
    params = {
        m: {(r["d"], r["F"]): r["params"] for r in rows if r["method"] == m and r["params"]}
        for m in ("bin+jl", "gd-swiglu")
    }
    common = sorted(set(params["bin+jl"]) & set(params["gd-swiglu"]))
    both = (
        {m: fit_exponent([F for _, F in common], [params[m][p] for p in common]) for m in params}
        if len({F for _, F in common}) >= 2
        else {}
    )
    res.metrics["scaling_exponent_common"] = both
    ok = abs(both["bin+jl"] - both["gd-swiglu"]) <= 0.3 if both else None
    res = combined(res, claim_per_d(rows, setting))
    res.claims.append(
        Claim(
            "b/Fig2c",
            "ours: constructed MLPs scale like GD MLPs as F grows (one slope over the common (d, F) points)",
            "same slope of params against F",
            "n/a"
            if not both
            else f"Bin+JL {both['bin+jl']:.3f}, GD {both['gd-swiglu']:.3f} (difference "
            f"{abs(both['bin+jl'] - both['gd-swiglu']):.3f})",
            verdict(ok),
            f"log-log slopes of params against F on the (d, F) points both methods have: {common}; holds if they "
            f"differ by <= 0.3; each method over all its points: {slopes}; the paper's per-d form is row "
            "b/Fig2c-per-d",
            setting,
            "Fig. 2c: d in {32, 64, 128}, F = alpha d^2 for various alpha (Sec. 4.4)",
        )
    )
    return res


def per_d_slopes(rows: list[dict], methods=("bin+jl", "gd-swiglu", "ntk")) -> dict[str, dict[int, float]]:
    """{method: {d: log-log slope of params against F at that d}} where a d has >= 2 F with a size."""
    out: dict[str, dict[int, float]] = {}
    for m in methods:
        for d in sorted({r["d"] for r in rows if r["method"] == m}):
            pts = sorted((r["F"], r["params"]) for r in rows if r["method"] == m and r["d"] == d and r["params"])
            if len({F for F, _ in pts}) >= 2:
                out.setdefault(m, {})[d] = fit_exponent([F for F, _ in pts], [q for _, q in pts])
    return out


def claim_per_d(rows: list[dict], setting: str) -> ExperimentResult:
    """Fig. 2c as Sec. 4.4 states it: "like GD MLPs, our construction exhibits the same scaling regardless of
    the choice of d" (NTK diverges at large alpha). One slope of params against F per d and method; the claim
    holds if Bin+JL's slopes at >= 2 d lie within 0.3 of each other (the spread is reported for every method)."""
    per = per_d_slopes(rows)
    spread = {m: max(v.values()) - min(v.values()) for m, v in per.items() if len(v) >= 2}
    metrics = {"scaling_exponent_per_d": per, "scaling_exponent_spread": spread}
    s = spread.get("bin+jl")
    fmt = lambda v: ", ".join(f"d={d}: {x:.3f}" for d, x in v.items())  # noqa: E731
    claim = Claim(
        "b/Fig2c-per-d",
        "constructed MLPs show the same scaling in F at every d, like GD MLPs (paper's form)",
        "same slope at every d",
        "n/a" if s is None else f"Bin+JL slopes {fmt(per['bin+jl'])} (spread {s:.3f})",
        verdict(None if s is None else s <= 0.3),
        f"log-log slope of params against F at each d: {per}; spread (max - min) per method: {spread}; holds if "
        "Bin+JL's spread is <= 0.3",
        setting,
        "Fig. 2c: d in {32, 64, 128}, F = alpha d^2 for various alpha (Sec. 4.4)",
    )
    return ExperimentResult(metrics=metrics, claims=[claim])


# ---------------------------------------------------------------- the plan: every point a recorded job
