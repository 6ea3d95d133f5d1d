"""The metrics and claims of experiment `resolution`: accuracy per method, grid and rescale with standard errors
over seeds, and rope-vit's framing (RoPE-Mixed extrapolates best) checked on the grids above the training one,
paired by seed."""

from __future__ import annotations

import math

from symformer.experiments.resolution.plan import PAPER, ResolutionConfig
from symformer.results import Claim, verdict


def mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return m, se


def summarize(runs: dict[str, list[dict]], cfg: ResolutionConfig) -> dict:
    """{rescale: {method: {image size: {"mean", "se"}}}} of test accuracy over seeds."""
    out: dict = {}
    for rescale in ("own", "rescaled"):
        out[rescale] = {}
        for method, rs in runs.items():
            out[rescale][method] = {}
            for s in map(str, cfg.eval_sizes):
                m, se = mean_se([r["accuracy"][rescale][s] for r in rs])
                out[rescale][method][s] = {"mean": m, "se": se}
    return out


def larger(cfg: ResolutionConfig) -> list[str]:
    """The test image sizes above the training one (the extrapolation grids)."""
    return [str(s) for s in cfg.eval_sizes if s > cfg.image_size]


def extrapolation_accuracy(run: dict, cfg: ResolutionConfig, rescale: str = "own") -> float:
    """A run's mean test accuracy over the grids larger than the training grid."""
    sizes = larger(cfg)
    return sum(run["accuracy"][rescale][s] for s in sizes) / len(sizes)


def _paired(a: list[dict], b: list[dict], cfg: ResolutionConfig) -> tuple[float, float]:
    """Mean and SE over seeds of a's minus b's extrapolation accuracy (own positions)."""
    return mean_se([extrapolation_accuracy(x, cfg) - extrapolation_accuracy(y, cfg) for x, y in zip(a, b)])


def _decide(m: float, se: float) -> bool | None:
    """holds / fails when the paired difference is more than 2 SE above / below 0; inconclusive otherwise."""
    if not math.isfinite(se):
        return None
    return True if m > 2 * se else False if m < -2 * se else None


def _setting(cfg: ResolutionConfig) -> str:
    g = ", ".join(f"{cfg.grid(s)}x{cfg.grid(s)}" for s in cfg.eval_sizes)
    return (
        f"ours: sklearn digits upsampled to {cfg.image_size}x{cfg.image_size}, patch {cfg.patch} "
        f"({cfg.train_grid}x{cfg.train_grid} tokens + {cfg.n_prefix} class token); ViT d={cfg.d_model}, "
        f"{cfg.n_layers} layers, {cfg.n_heads} heads, {cfg.steps} AdamW steps of {cfg.batch}; tested on grids {g} "
        f"(the test images upsampled to each size) with the new grid's own positions; {len(cfg.seeds)} seed(s)"
    )


def claims(runs: dict[str, list[dict]], cfg: ResolutionConfig) -> list[Claim]:
    """RES.1: RoPE-Mixed beats RoPE-Axial above the training grid; RES.2: RoPE-Mixed beats every other method
    there (the lowest of its paired margins decides). Both need rope_mixed and the compared methods in the run."""
    if "rope_mixed" not in runs or not larger(cfg):
        return []
    top = PAPER["top1"]
    paper = (
        "ViT-S/16 top-1 at 224 -> 384 px: RoPE-Mixed "
        f"{top['rope_mixed'][0]} -> {top['rope_mixed'][1]}, RoPE-Axial {top['rope_axial'][0]} -> "
        f"{top['rope_axial'][1]}, APE {top['ape'][0]} -> {top['ape'][1]}"
    )
    ev = "paired by seed on the mean accuracy over the grids above the training one; inconclusive within 2 SE"
    out = []
    mixed = runs["rope_mixed"]
    if "rope_axial" in runs:
        m, se = _paired(mixed, runs["rope_axial"], cfg)
        out.append(
            Claim(
                "RES.1",
                "RoPE-Mixed is more accurate than RoPE-Axial above the training resolution",
                paper,
                f"accuracy(rope_mixed) - accuracy(rope_axial) = {m:+.4f} (SE {se:.4f}, {len(mixed)} seed(s))",
                verdict(_decide(m, se)),
                ev,
                _setting(cfg),
                PAPER["setting"],
            )
        )
    others = [k for k in runs if k != "rope_mixed"]
    if others:
        margins = {k: _paired(mixed, runs[k], cfg) for k in others}
        worst = min(margins, key=lambda k: margins[k][0])
        decisions = [_decide(*v) for v in margins.values()]
        ok = False if False in decisions else (True if all(d is True for d in decisions) else None)
        out.append(
            Claim(
                "RES.2",
                "RoPE-Mixed extrapolates best: above the training resolution it is the most accurate method",
                paper,
                "margins of rope_mixed over "
                + ", ".join(f"{k} {v[0]:+.4f} (SE {v[1]:.4f})" for k, v in margins.items())
                + f"; smallest over {worst}",
                verdict(ok),
                ev + "; holds only if every margin holds, fails if any fails",
                _setting(cfg),
                PAPER["setting"],
            )
        )
    return out
