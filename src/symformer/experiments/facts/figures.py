"""Figures of experiment `facts` beside the claim rows they illustrate: size against rho at fixed F (Fig. 2a: the
rho law and the whitening gain, c/Fig2a-* and d/Fig2a-pooled) and the NTK capacity across kappa (Fig. 5,
A.1.4/Fig5-kappa). Each is drawn from the rows the claims read, so a figure never shows other numbers than its row."""

from __future__ import annotations

import math
from pathlib import Path

from symformer.experiments.plots import pyplot
from symformer.stats import loglog

RHO_SIZE = "rho_size.png"
NTK_KAPPA = "ntk_kappa.png"
_MARKERS = {"raw": "o", "whitened": "^", "offset": "x"}
_METHODS = {"bin+jl": ("constructed (Bin+JL)", "C0"), "gd-swiglu": ("GD (SwiGLU)", "C1")}


def rho_size(out_dir: Path, rows: list[dict], d: int, F: int) -> str:
    """Parameters against rho on log-log axes, one colour per method and one marker per family, with the log-log
    fit over raw + whitened (the fit c/Fig2a-* reports). A point that stores nothing up to its search's cap is drawn
    hollow at that cap (a lower bound, as d/Fig2a-pooled uses it)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, (label, colour) in _METHODS.items():
        for fam, marker in _MARKERS.items():
            pts = [r for r in rows if r["family"] == fam and r["rho"] > 0]
            found = [(r["rho"], r[method]) for r in pts if r[method]]
            bound = [(r["rho"], r.get(f"{method}_lower_bound")) for r in pts if not r[method]]
            if found:
                ax.plot(*zip(*found), marker, color=colour, ls="none", label=f"{label}, {fam}")
            if any(b for _, b in bound):
                xs = [(x, b) for x, b in bound if b]
                ax.plot(*zip(*xs), marker, mfc="none", color=colour, ls="none", label=f"{label}, {fam}: >= cap")
        fit = [(r["rho"], r[method]) for r in rows if r["family"] != "offset" and r[method] and r["rho"] > 0]
        if len(fit) >= 3:
            a, b = _loglog_line(fit)
            xs = sorted(x for x, _ in fit)
            ax.plot(xs, [math.exp(a) * x**b for x in xs], "-", color=colour, lw=1, label=f"{label} fit: rho^{b:.2f}")
    title = f"size against rho at fixed F (Fig. 2a form): d={d}, F={F}"
    return _save(fig, ax, out_dir / RHO_SIZE, "decodability rho (min over seeds)", title, 6)


def ntk_kappa(out_dir: Path, rows: list[dict], d: int, F: int) -> str:
    """NTK(V) and NTK(U*) parameters against kappa (Fig. 5 form). Where no h up to the cap stores every fact the
    construction has broken down: drawn hollow at the parameters of the largest h tried."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, label, colour in (("ntk", "NTK(V)", "C2"), ("ntk-mo", "NTK(U*), margin-optimal", "C3")):
        found = [(r["kappa"], r[method]) for r in rows if r[method]]
        cap = [(r["kappa"], r["search"][method].get("params_at_cap")) for r in rows if not r[method]]
        if found:
            ax.plot(*zip(*sorted(found)), "o-", color=colour, label=label)
        cap = [(k, p) for k, p in cap if p]
        if cap:
            ax.plot(*zip(*sorted(cap)), "o", mfc="none", color=colour, label=f"{label}: none stores (at cap)")
    title = f"NTK MLPs across kappa (Fig. 5 form): d={d}, F={F}"
    return _save(fig, ax, out_dir / NTK_KAPPA, "condition number kappa", title, 7)


def _save(fig, ax, path: Path, xlabel: str, title: str, legend_size: int) -> str:
    """Both figures: log-log axes, parameters on y; written to `path`, whose name is returned for the report."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("parameters to store every fact")
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path.name


def _loglog_line(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line of log y on log x: stats.loglog's slope, with its intercept."""
    _, slope = loglog([x for x, _ in pts], [y for _, y in pts])
    lx, ly = [math.log(x) for x, _ in pts], [math.log(y) for _, y in pts]
    return sum(ly) / len(ly) - slope * sum(lx) / len(lx), slope
