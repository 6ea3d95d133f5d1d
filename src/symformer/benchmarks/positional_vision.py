"""The `positional` suite's 2-D rows (issue 62): rotating q and k forward + backward at timm / rope-vit's ViT-S
shape (B 8, H 6, Dh 64) on a 32 x 32 patch grid, for RoPE-Mixed (rope-vit's per-head parameterisation: the
stand-in for timm's RotaryEmbeddingMixed, which cannot import here), RoPE-Axial in timm's layout, STRING (P != I)
and ESPR (non-commuting: one exponential per grid position); and the float64 exactness of both layouts against
transcriptions of rope-vit's / timm's formulas (the tests' references, tests/positional/test_vision_converters.py).
Ratios come from back-to-back calls in one process (interleaved_ratio)."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from symformer._rng import seeded_generator
from symformer.benchmarks.base import BenchContext, BenchResult, median_seconds, one_call_seconds
from symformer.benchmarks.timm_reference import TimmStyleAxial, TimmStyleMixed
from symformer.positional import ESPR, STRING, RoPE, grid_positions, rope_vit_axial
from symformer.results import environment

VISION_SHAPE = (8, 6, 1024, 64)  # B, H, N = 32 x 32, Dh


def _parts(h: int, dh: int) -> dict:
    return {
        "rope_mixed_2d": RoPE(dh, 2, pairing="interleaved", mode="mixed", n_heads=h, seed=0),
        "rope_axial_timm_2d": rope_vit_axial(dh),
        "string_2d": STRING(dh, 2, n_heads=h, init_scale=0.1, seed=0),
        "espr_2d": ESPR(dh, 2, commuting_init=False, seed=0),
    }


def _references(parts: dict, pos: torch.Tensor) -> dict:
    """timm-equivalent rotations (timm_reference.py) with the same frequencies as our mixed and axial parts."""
    return {
        "timm_reference_mixed_2d": TimmStyleMixed(parts["rope_mixed_2d"].beta, pos),
        "timm_reference_axial_2d": TimmStyleAxial(parts["rope_axial_timm_2d"].beta, pos),
    }


def _fwd_bwd(part, q, k, pos):
    def run():
        a, b = part(q, k) if isinstance(part, (TimmStyleAxial, TimmStyleMixed)) else part(q, k, pos)
        (a.sum() + b.sum()).backward()
        q.grad = k.grad = None

    return run


def _interleaved(run_a, run_b, reps: int, device: str) -> float:
    run_a(), run_b()
    return statistics.median(one_call_seconds(run_a, device) / one_call_seconds(run_b, device) for _ in range(reps))


def exactness_f64() -> dict:
    """rope_mixed_vs_reference_f64 and axial_timm_layout_vs_reference_f64: max |ours - reference| in float64 on a
    14 x 20 grid (rope-vit's compute_mixed_cis / compute_axial_cis with apply_rotary_emb, transcribed)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # float64 masters
    try:
        mixed, axial = RoPE(64, 2, pairing="interleaved", mode="mixed", n_heads=6, seed=0), rope_vit_axial(64)
    finally:
        torch.set_default_dtype(old)
    h, w = 14, 20
    t = torch.arange(h * w, dtype=torch.float64)
    t_x, t_y = t % w, torch.div(t, w, rounding_mode="floor")
    x = torch.randn(2, 6, h * w, 64, generator=seeded_generator(0), dtype=torch.float64)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    ang = t_x[None, :, None] * mixed.beta[:, None, :, 0] + t_y[None, :, None] * mixed.beta[:, None, :, 1]
    ref_mixed = torch.view_as_real(xc * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    f = 100.0 ** (-torch.arange(16, dtype=torch.float64) / 16)
    ang = torch.cat((torch.outer(t_x, f), torch.outer(t_y, f)), dim=-1)
    ref_axial = torch.view_as_real(xc * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    with torch.no_grad():
        e_mixed = float((mixed.rotate(x, torch.stack((t_x, t_y), -1)) - ref_mixed).abs().max())
        e_axial = float((axial.rotate(x, torch.stack((t_y, t_x), -1)) - ref_axial).abs().max())
    return {"rope_mixed_vs_reference_f64": e_mixed, "axial_timm_layout_vs_reference_f64": e_axial}


def _matmul_gflop(run) -> float:
    with FlopCounterMode(display=False) as fc:
        run()
    return fc.get_total_flops() / 1e9


def lower_bounds(parts: dict, q, k, pos, mixed_run, reps: int, device: str) -> dict:
    """What STRING and ESPR cannot go below at this shape, timed against RoPE-Mixed like the rows' ratios:
    `string_2d_dense_products_vs_rope_mixed_*`, STRING's six dense (B H N x Dh)(Dh x Dh) products alone (P^T q and
    P^T k, their input gradients, P's two gradient terms: what a dense P costs whatever else is saved);
    `string_2d_rope_part_vs_rope_mixed_*`, its RoPE part alone (P folded away); `espr_2d_application_vs_rope_mixed_*`,
    ESPR's per-token products alone, forward + backward, with its maps given (exponentials for free). Also the
    matmul GFLOP of each forward + backward (torch.utils.flop_counter: elementwise work is not counted).

    Args:
        parts (dict): `_parts` (string_2d, espr_2d used).
        q (B, H, N, Dh): queries, requiring grad.
        k (B, H, N, Dh): keys, requiring grad.
        pos (N, 2): the grid.
        mixed_run (callable): RoPE-Mixed's forward + backward, the denominator.
        reps (int): interleaved rounds per ratio.
        device (str): where the tensors live.

    Returns:
        ratios (dict): the three lower-bound ratios and the three GFLOP counts, named with the grid.
    """
    side = math.isqrt(pos.shape[0])
    string, espr = parts["string_2d"], parts["espr_2d"]
    folded = STRING(q.shape[-1], 2, n_heads=q.shape[1], init_scale=0.1, seed=0).to(q.device)
    folded._folded = True  # the RoPE part alone: P^T taken as merged into the projections (fold_into)
    rows, p = q.detach().reshape(-1, q.shape[-1]), string.orthogonal().detach()
    maps = espr._token_maps(pos, torch.float32).detach().requires_grad_()

    def products():
        for _ in range(2):  # per tensor (q, k): P^T x (row form x P), its input gradient g P^T, P's term x^T g
            rows.mm(p), rows.mm(p.T), rows.T.mm(rows)

    def application():
        a, b = espr._rotate_active(q, maps), espr._rotate_active(k, maps)
        (a.sum() + b.sum()).backward()
        q.grad = k.grad = maps.grad = None

    out = {
        f"string_2d_dense_products_vs_rope_mixed_{side}x{side}": _interleaved(products, mixed_run, reps, device),
        f"string_2d_rope_part_vs_rope_mixed_{side}x{side}": _interleaved(
            _fwd_bwd(folded, q, k, pos), mixed_run, reps, device
        ),
        f"espr_2d_application_vs_rope_mixed_{side}x{side}": _interleaved(application, mixed_run, reps, device),
    }
    for name in ("string_2d", "espr_2d"):
        out[f"{name}_fwd_bwd_matmul_gflop_{side}x{side}"] = _matmul_gflop(_fwd_bwd(parts[name], q, k, pos))
    out[f"espr_2d_application_matmul_gflop_{side}x{side}"] = _matmul_gflop(application)
    return out


def vision_rows(res: BenchResult, ctx: BenchContext, mrt: float) -> None:
    """Append the 2-D rows, `*_2d_fwd_bwd_vs_rope_mixed_32x32` ratios and the float64 exactness to `res`."""
    b, h, n, dh = VISION_SHAPE
    side = math.isqrt(n)
    g = seeded_generator(ctx.seed)
    q = torch.randn(b, h, n, dh, generator=g).to(ctx.device).requires_grad_()
    k = torch.randn(b, h, n, dh, generator=g).to(ctx.device).requires_grad_()
    pos = grid_positions(side, device=ctx.device)
    shape = f"B{b}_H{h}_N{side}x{side}_Dh{dh}"
    runs = {}
    parts = _parts(h, dh)
    parts = {**parts, **_references(parts, pos)}
    for name, part in parts.items():
        runs[name] = _fwd_bwd(part.to(ctx.device), q, k, pos)
        res.rows.append(
            {
                "kind": "rotate q,k 2-D",
                "method": name,
                "shape": shape,
                "mode": "fwd+bwd",
                "dtype": "float32",
                "median_s": median_seconds(runs[name], mrt, ctx.device),
            }
        )
    reps = 5 if ctx.quick else 9
    for name in ("espr_2d", "string_2d", "rope_axial_timm_2d"):
        key = f"{name.replace('_timm', '')}_fwd_bwd_vs_rope_mixed_{side}x{side}"
        res.ratios[key] = _interleaved(runs[name], runs["rope_mixed_2d"], reps, ctx.device)
    for ours, ref in (("rope_axial_timm_2d", "timm_reference_axial_2d"), ("rope_mixed_2d", "timm_reference_mixed_2d")):
        key = f"{ours.replace('_timm', '')}_fwd_bwd_vs_reference_{side}x{side}"
        res.ratios[key] = _interleaved(runs[ours], runs[ref], reps, ctx.device)
    for name in ("espr_2d", "string_2d"):  # against the timm-equivalent itself (the named targets use our mixed)
        key = f"{name}_fwd_bwd_vs_reference_mixed_{side}x{side}"
        res.ratios[key] = _interleaved(runs[name], runs["timm_reference_mixed_2d"], reps, ctx.device)
    res.ratios.update(lower_bounds(parts, q, k, pos, runs["rope_mixed_2d"], reps, ctx.device))
    res.ratios.update(exactness_f64())
    res.notes.append(
        f"*_2d rows: rotate q, k forward + backward at {shape} (a {side} x {side} grid); rope_mixed_2d is RoPE-Mixed "
        "with per-head learned frequencies (the stand-in for timm's RotaryEmbeddingMixed, which cannot import "
        "here); ratios are medians of back-to-back calls. timm_reference_{mixed,axial}_2d are plain-torch "
        "transcriptions of timm's RotaryEmbeddingMixed / RotaryEmbeddingCat formulas with our parts' frequencies "
        "(benchmarks/timm_reference.py): the denominators of *_vs_reference_* (issue 62: <= 0.5)."
    )


def record(out: Path, min_run_time: float = 0.5) -> dict:
    """The 2-D rows alone (`vision_rows`, full rounds), written to `out` as JSON with the environment and the load
    average at start and end: what results/bench/positional/vision_2d.json holds.

    Args:
        out (Path): the JSON file to write.
        min_run_time (float): seconds per row's blocked_autorange.

    Returns:
        data (dict): what was written.
    """
    started, load0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), os.getloadavg()
    res = BenchResult()
    vision_rows(res, BenchContext(Path(out).parent, quick=False), min_run_time)
    env = {**environment(), "command": " ".join(["python -m symformer.benchmarks.positional_vision", *sys.argv[1:]])}
    data = {
        "suite": "positional (2-D rows only)",
        "quick": False,
        "rows": res.rows,
        "ratios": res.ratios,
        "notes": res.notes,
        "environment": {**env, "started_at": started, "loadavg_start": load0, "loadavg_end": os.getloadavg()},
    }
    Path(out).write_text(json.dumps(data, indent=1))
    return data


if __name__ == "__main__":  # python -m symformer.benchmarks.positional_vision OUT.json
    if len(sys.argv) != 2:
        sys.exit("usage: python -m symformer.benchmarks.positional_vision OUT.json")
    print(json.dumps(record(Path(sys.argv[1]))["ratios"], indent=1))
