"""Claims, metrics and figures of the OOD translation study (ood.py): T8'.12, T8'.22 per trained model,
T8'.16/T8'.21 as a paired ESPR-minus-STRING risk difference per seed, IR_spec against the OOD gap."""

from __future__ import annotations

import math

from symformer.experiments.espr.arms import STRING, Arm
from symformer.experiments.espr.ood import CANVAS, IR_ZERO, PATCH, OODConfig, ir_radius, is_aligned
from symformer.experiments.plots import pyplot
from symformer.results import Claim, verdict

PAPER = "espr-positional-rotations"
PAPER_SETTING = (
    "none: the ESPR derivation states T8'.12-T8'.22 for function classes and reports no experiment; "
    "the translation study is our test of them"
)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def se(xs: list[float]) -> float:
    """Standard error of the mean (sample standard deviation / sqrt(n)); NaN with fewer than 2 values."""
    if len(xs) < 2:
        return float("nan")
    m = mean(xs)
    return math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1) / len(xs))


def _offs(run: dict, group: str) -> list[str]:
    """Test offsets "dy,dx" of a group: ood (all but the training offset 0,0), aligned, non_aligned."""
    out = []
    for key in run["risk"]:
        dy, dx = (int(v) for v in key.split(","))
        if (dy, dx) == (0, 0):
            continue
        if group == "ood" or (group == "aligned") == is_aligned((dy, dx)):
            out.append(key)
    return out


def ood_risk(run: dict, group: str = "ood") -> float:
    """Mean test cross-entropy over the shifted offsets of `group` (never the training offset)."""
    return mean([run["risk"][k] for k in _offs(run, group)])


def gap(run: dict) -> float:
    """R_T - R_train of T8'.12: mean risk over nu (every test offset, as IR_spec's nu) minus the risk at (0, 0)."""
    return mean(list(run["risk"].values())) - run["risk"]["0,0"]


def paired_difference(runs: dict, arm: str, group: str = "ood") -> dict:
    """ESPR arm minus STRING, OOD risk paired by seed: {"per_seed", "mean", "se", "n"}."""
    diffs = [ood_risk(a, group) - ood_risk(b, group) for a, b in zip(runs[arm], runs[STRING.name])]
    return {"per_seed": diffs, "mean": mean(diffs), "se": se(diffs), "n": len(diffs)}


def espr_against_string(runs: dict, arms: tuple[Arm, ...]) -> list[str]:
    """The names of the ESPR arms in `runs` that T8'.16/T8'.21 compares with STRING (none without a STRING run)."""
    if STRING.name not in runs:
        return []
    return [a.name for a in arms if a.is_espr and a.name in runs]


def decide(m: float, s: float) -> bool | None:
    """True (ESPR lower) / False (ESPR higher) when |mean| > 2 SE, else None (also without an SE)."""
    if not math.isfinite(s):
        return None
    if m < -2 * s:
        return True
    if m > 2 * s:
        return False
    return None


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (scipy; ties get average ranks); NaN with < 3 points or a constant input."""
    from scipy.stats import spearmanr

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return float("nan")
    return float(spearmanr(xs, ys).statistic)


def ir_gap_points(runs: dict) -> list[tuple[str, float, float]]:
    """(arm, IR_spec, gap) of every trained rotary model; IR_spec below IR_ZERO is rounding and counts as 0."""
    pts = []
    for arm, rs in runs.items():
        for r in rs:
            if r["ir"] is not None:
                ir = r["ir"]["ir_spec"]
                pts.append((arm, 0.0 if ir < IR_ZERO else ir, gap(r)))
    return pts


def setting(cfg: OODConfig, n_offsets: int) -> str:
    return (
        f"ours: ViT d={cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads; digits 8x8 on a {CANVAS}x{CANVAS} "
        f"canvas, patch {PATCH}; {cfg.steps} AdamW steps of {cfg.batch}; {len(cfg.seeds)} seed(s) per arm; lr per arm "
        f"from {list(cfg.lrs)} by validation loss at the training offset; {n_offsets} test offsets"
    )


def summarize(runs: dict) -> dict:
    """Per arm: means over seeds of accuracies, risks (all OOD / aligned / non-aligned), gap, B_z, L, IR."""
    out = {}
    for arm, rs in runs.items():
        s = {
            "id_accuracy": mean([r["acc"]["0,0"] for r in rs]),
            "ood_mean_accuracy": mean([mean([r["acc"][k] for k in _offs(r, "ood")]) for r in rs]),
            "ood_risk": mean([ood_risk(r) for r in rs]),
            "ood_risk_aligned": mean([ood_risk(r, "aligned") for r in rs]),
            "ood_risk_non_aligned": mean([ood_risk(r, "non_aligned") for r in rs]),
            "risk_gap": mean([gap(r) for r in rs]),
            "B_z": mean([r["B_z"] for r in rs]),
            "L": mean([r["L"] for r in rs]),
            "lr": rs[0]["lr"],
            "val_loss": mean([r["val_loss"] for r in rs]),
        }
        if rs[0]["ir"] is not None:
            for key in rs[0]["ir"]:
                s[key] = mean([r["ir"][key] for r in rs])
        out[arm] = s
    return out


def _bound_claims(runs: dict, summary: dict, ev: str, st: str) -> list[Claim]:
    """T8'.12 / T8'.22 per trained model: gap <= L C_z IR_spec (and the worst offset vs IR's sup), C_z = B_z."""
    rows12, rows22, ok12, ok22 = [], [], [], []
    for arm, rs in runs.items():
        if rs[0]["ir"] is None:
            continue
        gaps = [gap(r) for r in rs]
        worst = [max(r["risk"].values()) - r["risk"]["0,0"] for r in rs]
        b12 = [r["L"] * r["B_z"] * r["ir"]["ir_spec"] for r in rs]
        b22 = [r["L"] * r["B_z"] * r["ir"]["ir_sup"] for r in rs]
        ok12.append(all(g <= b + 1e-9 for g, b in zip(gaps, b12)))
        ok22.append(all(w <= b + 1e-9 for w, b in zip(worst, b22)))
        rows12.append(
            f"{arm}: gap {mean(gaps):.3f} vs L C_z IR_spec {mean(b12):.3g} (IR_spec {summary[arm]['ir_spec']:.3g})"
        )
        rows22.append(f"{arm}: worst gap {mean(worst):.3f} vs bound {mean(b22):.3g}")
    if not ok12:
        return []
    return [
        Claim(
            "T8'.12",
            "R_T(f) - R_train(f) <= L C_z IR_spec(f)",
            PAPER,
            "; ".join(rows12),
            verdict(all(ok12)),
            ev,
            st,
            PAPER_SETTING,
        ),
        Claim(
            "T8'.22",
            "sup over shifts of the risk gap <= L C_z sup IR",
            PAPER,
            "; ".join(rows22),
            verdict(all(ok22)),
            ev,
            st,
            PAPER_SETTING,
        ),
    ]


def _dominance_claim(runs: dict, espr_arms: list[str], st: str) -> Claim:
    """T8'.16 / T8'.21 read as: the trained ESPR model has lower OOD risk than the trained STRING model.
    Paired over seeds per ESPR arm: holds if lower by more than 2 SE, fails if higher by more than 2 SE,
    inconclusive otherwise, with fewer than 2 seeds, or when the ESPR arms disagree."""
    parts, decisions = [], []
    for arm in espr_arms:
        d = paired_difference(runs, arm)
        decisions.append(decide(d["mean"], d["se"]))
        sub = {g: paired_difference(runs, arm, g) for g in ("aligned", "non_aligned")}
        parts.append(
            f"{arm}: OOD risk ESPR - STRING = {d['mean']:+.3f} (SE {d['se']:.3f}, {d['n']} seeds); aligned "
            f"{sub['aligned']['mean']:+.3f} (SE {sub['aligned']['se']:.3f}), non-aligned "
            f"{sub['non_aligned']['mean']:+.3f} (SE {sub['non_aligned']['se']:.3f})"
        )
    ok = None
    if any(d is True for d in decisions) and not any(d is False for d in decisions):
        ok = True
    elif any(d is False for d in decisions) and not any(d is True for d in decisions):
        ok = False
    return Claim(
        "T8'.16/T8'.21",
        "ESPR dominates STRING out of distribution (lower OOD risk)",
        PAPER,
        "; ".join(parts),
        verdict(ok),
        f"{len(runs[STRING.name])} seed(s), paired by seed (same init and batch order); OOD risk = "
        "mean test cross-entropy over every offset but the training one; decision at 2 standard errors of the "
        "paired difference per ESPR arm; inconclusive within 2 SE, with one seed, or when ESPR arms disagree",
        st,
        PAPER_SETTING,
    )


def ood_claims(ood: dict, cfg: OODConfig) -> tuple[list[Claim], dict]:
    """Claims and the per-arm summary of a `run_ood` result."""
    runs = ood["runs"]
    summary = summarize(runs)
    radius, side = ir_radius()
    st = setting(cfg, len(ood["offsets"]))
    ev = (
        f"ViT on digits trained at offset (0,0) of a {CANVAS}x{CANVAS} canvas, tested at {len(ood['offsets'])} "
        f"offsets; "
        "risk = cross-entropy on the test split; L = sqrt(2) ||W_head||_2 (cross-entropy is sqrt(2)-Lipschitz in the "
        "logits), C_z = B_z = max ||z|| of the pooled features; IR_spec with nu uniform over the offsets (patch "
        "units), "
        f"R = {radius:g} (max l1 norm of a position on the {side}x{side} patch grid), T3.5's R_sp. Relative logits do "
        "not make the model shift-invariant on a finite canvas (the background tokens' relative positions change), "
        "which the link z' = U' z of T8'.10 ignores"
    )
    claims = _bound_claims(runs, summary, ev, st)
    espr_arms = espr_against_string(runs, cfg.arms)
    if espr_arms:
        claims.append(_dominance_claim(runs, espr_arms, st))
    return claims, summary


def ood_metrics(ood: dict, arms: tuple[Arm, ...]) -> dict:
    """The fixed metric names of issue 19 plus the accuracy table and the selected learning rates; `arms`: the
    study's arms (OODConfig.arms), whose runs `ood["runs"]` holds by name."""
    runs = ood["runs"]
    acc = {arm: {k: mean([r["acc"][k] for r in rs]) for k in rs[0]["acc"]} for arm, rs in runs.items()}
    m = {"ood_accuracy": acc, "ood_seeds": min(len(rs) for rs in runs.values()), "ood_selected_lr": ood["selected_lr"]}
    espr_arms = espr_against_string(runs, arms)
    if espr_arms:
        diffs = {a: paired_difference(runs, a) for a in espr_arms}
        m["ood_risk_espr_minus_string_mean"] = {a: d["mean"] for a, d in diffs.items()}
        m["ood_risk_espr_minus_string_se"] = {a: d["se"] for a, d in diffs.items()}
        m["ood_risk_espr_minus_string_by_offsets"] = {
            a: {
                g: {k: v for k, v in paired_difference(runs, a, g).items() if k != "per_seed"}
                for g in ("aligned", "non_aligned")
            }
            for a in espr_arms
        }
    pts = ir_gap_points(runs)
    m["ir_spec_vs_gap_spearman"] = spearman([p[1] for p in pts], [p[2] for p in pts])
    return m


def plot_ood(acc: dict, offs, path) -> None:
    """Accuracy vs offset distance dy + dx, split into patch-aligned offsets (a pure token shift, where
    relative logits can help) and the others (new patch contents)."""
    plt = pyplot()
    offs = [tuple(o) for o in offs]
    groups = {"patch-aligned offsets": [o for o in offs if is_aligned(o)]}
    groups["other offsets"] = [o for o in offs if not is_aligned(o)]
    groups = {k: v for k, v in groups.items() if v}
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4), squeeze=False)
    for ax, (title, group) in zip(axes[0], groups.items()):
        dist = sorted({dy + dx for dy, dx in group})
        for arm, per in acc.items():
            ys = [mean([per[f"{dy},{dx}"] for dy, dx in group if dy + dx == s]) for s in dist]
            ax.plot(dist, ys, marker="o", label=arm)
        ax.set_xlabel("offset dy + dx of the digit (pixels; training at 0)")
        ax.set_ylabel("test accuracy (mean at that distance)")
        ax.set_ylim(0, 1)
        ax.set_title(f"{title} ({CANVAS}x{CANVAS} canvas, patch {PATCH})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ir_gap(runs: dict, path) -> None:
    """IR_spec of every trained rotary model against its OOD gap (symlog x: RoPE/STRING sit at 0)."""
    plt = pyplot()
    pts = ir_gap_points(runs)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for arm in dict.fromkeys(p[0] for p in pts):
        ax.scatter([p[1] for p in pts if p[0] == arm], [p[2] for p in pts if p[0] == arm], label=arm, s=20)
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlabel("IR_spec of the trained model (T8'.7, T3.5's R_sp)")
    ax.set_ylabel("OOD gap R_T - R_train (cross-entropy)")
    rho = spearman([p[1] for p in pts], [p[2] for p in pts])
    ax.set_title(f"IR_spec vs OOD gap (Spearman {rho:.2f}, {len(pts)} models)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
