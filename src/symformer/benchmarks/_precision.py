"""The `*_bf16` rows of the `positional` and `attention` suites: every positional part and attention core timed in
bfloat16, with an accuracy check beside the timing.

A part is built in float32 and cast with `.to(torch.bfloat16)` (the route a user takes; what must stay float32 is the
part's business), and runs on bfloat16 inputs. Its reference is a float64 copy of the float32 part on the same
(bfloat16-valued) inputs, so the error measures the part's 16-bit arithmetic, not the rounding of the inputs:
  * err_vs_bound = max |out_bf16 - out_float64| / (2 eps(bfloat16) scale), eps(bfloat16) = 2^-7 (the bound of
    docs/precision.md);
    scale = max|q| (rotations), max|x| (additive parts), max|v| (attention cores: the output is a weighted mean of
    rows of v). At most 1 meets the bound.
A part that fails in bfloat16 gets a row with its error instead of a timing (the suite goes on). Each row also has
the float32 time of the same call, and `<name>_bf16_vs_fp32` ratios (no target on CPU, where many 16-bit kernels are
slow; on a GPU bfloat16 should be at or below float32).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer.attention import FavorAttention, PlashAttention, SoftmaxAttention
from symformer.benchmarks.base import BenchContext, median_seconds
from symformer.positional import (
    ESPR,
    STRING,
    CirculantSTRING,
    LearnedPE,
    RoPE,
    SinusoidalPE,
    partial_rotary,
    rotary_parts,
)
from symformer.registry import POSITIONAL

BF16 = torch.bfloat16
EPS = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}  # the eps(dtype)
ROT_SHAPE = (1, 8, 4096, 64)  # B, H, N, Dh: positions 0..4095 (long enough for rounded positions to show)
CORE_SHAPES = {True: (1, 4, 1024, 128), False: (1, 4, 4096, 128)}  # quick / full: B, H, N, Dh (d_model 512)


def _grid(n: int) -> torch.Tensor:
    side = int(round(n**0.5))
    ax = torch.arange(side, dtype=torch.float32)
    return torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, 2)


def positional_parts(dh: int, d_model: int, n: int) -> dict[str, tuple[Callable[[], torch.nn.Module], str, int]]:
    """name -> (factory of the float32 part, kind "rotary" | "additive", coordinate dimension): every registered
    rotary part (positional.rotary_parts(), registration order), those configured below as their rows (RoPE in
    both layouts and 2-D mixed mode, STRING with P != I, ESPR with non-commuting generators), any other with its
    registry defaults; then a partial rotary part and the additive parts."""
    configured = {
        "rope": {
            "rope": (lambda: RoPE(dh, 1, pairing="interleaved"), "rotary", 1),
            "rope_half": (lambda: RoPE(dh, 1, pairing="half"), "rotary", 1),
            # the recorded rows' frozen random-direction init ("mixed" is rope-vit's learned RoPE-Mixed)
            "rope_mixed_grid2d": (lambda: RoPE(dh, 2, mode="mixed_random"), "rotary", 2),
        },
        "string": {"string": (lambda: STRING(dh, 1, init_scale=0.1, learnable=False), "rotary", 1)},
        "circulant_string": {"circulant_string": (lambda: CirculantSTRING(dh, 1), "rotary", 1)},
        "espr": {"espr": (lambda: ESPR(dh, 1, commuting_init=False, learnable=False), "rotary", 1)},
    }
    out = {}
    for name in rotary_parts():
        default = {name: (lambda name=name: POSITIONAL.build(name, head_dim=dh, coord_dim=1), "rotary", 1)}
        out.update(configured.get(name, default))
    return {
        **out,
        "partial": (lambda: partial_rotary(dh, coord_dim=1), "rotary", 1),
        "sinusoidal": (lambda: SinusoidalPE(d_model, 1), "additive", 1),
        "learned": (lambda: LearnedPE(d_model, 1, max_len=n), "additive", 1),
    }


def attention_cores(dh: int, heads: int) -> dict[str, Callable[[], torch.nn.Module]]:
    """Exact softmax and the two approximations of the papers, named on purpose (the issue-40 rows)."""
    return {
        "softmax": lambda: SoftmaxAttention(),
        "favor": lambda: FavorAttention(dh, n_features=256),
        "plash": lambda: PlashAttention(dh, heads, dh * heads),
    }


def _max_err(out, ref) -> float:
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    return max(float((o.double() - r.double()).abs().max()) for o, r in zip(outs, refs, strict=True))


def _timed(call: Callable, inputs: list[torch.Tensor], backward: bool, mrt: float, device: str) -> float:
    def run():
        if backward:
            out = call()
            sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
            for t in inputs:
                t.grad = None
        else:
            with torch.no_grad():
                call()

    return median_seconds(run, mrt, device)


def bf16_row(
    name: str,
    kind: str,
    build: Callable[[], torch.nn.Module],
    args32: list[torch.Tensor],
    extra: tuple,
    scale_arg: int,
    ctx: BenchContext,
    mrt: float,
    shape: str,
) -> list[dict]:
    """Rows (fwd, fwd+bwd) of part `build()` cast to bfloat16 on args32 (float32 tensors, rounded to bfloat16 values;
    `extra`: positions and other fixed arguments), with err_vs_bound; an error row where bfloat16 fails."""
    dev = ctx.device
    base = {"kind": kind, "method": f"{name}_bf16", "shape": shape, "dtype": "bfloat16", "route": ".to(bfloat16)"}
    seed_torch(ctx.seed)
    part32 = build().to(dev).eval()
    args16 = [a.to(dev, BF16) for a in args32]
    try:
        part16 = copy.deepcopy(part32).to(BF16)
        with torch.no_grad():
            out = part16(*args16, *extra)
            ref = copy.deepcopy(part32).to(torch.float64)(*[a.double() for a in args16], *extra)
        scale = float(args16[scale_arg].double().abs().max())
        err = _max_err(out, ref)
        acc = {
            "max_abs_err": err,
            "bound": 2 * EPS[BF16] * scale,
            "err_vs_bound": err / (2 * EPS[BF16] * scale),
            "out_dtype": str((out[0] if isinstance(out, tuple) else out).dtype).removeprefix("torch."),
        }
        rows = []
        for backward in (False, True):
            a16 = [a.detach().clone().requires_grad_(backward) for a in args16]
            a32 = [a.detach().float().clone().requires_grad_(backward) for a in args16]
            t16 = _timed(lambda a16=a16: part16(*a16, *extra), a16, backward, mrt, dev)
            t32 = _timed(lambda a32=a32: part32(*a32, *extra), a32, backward, mrt, dev)
            rows.append(
                {**base, "mode": "fwd+bwd" if backward else "fwd", "median_s": t16, "fp32_median_s": t32, **acc}
            )
        return rows
    except Exception as e:  # noqa: BLE001  (the row records why bfloat16 fails; the suite goes on)
        msg = (str(e).strip().splitlines() or [""])[0][:200]
        return [{**base, "mode": "fwd", "median_s": None, "error": f"{type(e).__name__}: {msg}"}]


def bf16_note(what: str, inputs: str, where: str, scale: str) -> str:
    return (
        f"*_bf16 rows (issue 40): each {what} built in float32, cast with .to(torch.bfloat16), on bfloat16 "
        f"{inputs} {where}; err_vs_bound = max |out - float64 reference on the same inputs| / "
        f"(2 eps(bf16) {scale}), eps(bf16) = 2^-7 (at most 1 meets the bound); fp32_median_s is the same call "
        f"in float32; a row with `error` is a {what} that fails in bfloat16 (recorded, not timed)"
    )


def bf16_ratios(rows: list[dict]) -> dict:
    """<method>_vs_fp32[mode] = bfloat16 time / float32 time, and the worst err_vs_bound per method."""
    out: dict = {}
    for r in rows:
        if r.get("median_s") is not None:
            out[f"{r['method']}_vs_fp32[{r['mode']}]"] = r["median_s"] / r["fp32_median_s"]
            key = f"{r['method']}_err_vs_bound"
            out[key] = max(out.get(key, 0.0), r["err_vs_bound"])
    return out


def positional_bf16_rows(ctx: BenchContext, mrt: float) -> list[dict]:
    b, h, n, dh = ROT_SHAPE
    g = seeded_generator(ctx.seed)
    q, k = (torch.randn(b, h, n, dh, generator=g) for _ in range(2))
    x = torch.randn(b, n, h * dh, generator=g)
    pos1 = torch.arange(n, dtype=torch.float32, device=ctx.device)[:, None]
    rows = []
    for name, (build, kind, c) in positional_parts(dh, h * dh, n).items():
        pos = pos1 if c == 1 else _grid(n).to(ctx.device)
        label = f"B{b}_H{h}_N{n}_Dh{dh}" + ("" if c == 1 else "_grid2d")
        if kind == "rotary":
            rows += bf16_row(name, "rotate q,k", build, [q, k], (pos,), 0, ctx, mrt, label)
        else:
            rows += bf16_row(name, "additive PE", build, [x], (pos,), 0, ctx, mrt, f"B{b}_N{n}_D{h * dh}")
    return rows


def attention_bf16_rows(ctx: BenchContext, mrt: float) -> list[dict]:
    b, h, n, dh = CORE_SHAPES[ctx.quick]
    g = seeded_generator(ctx.seed)
    q, k, v = (torch.randn(b, h, n, dh, generator=g) for _ in range(3))
    rows = []
    for name, build in attention_cores(dh, h).items():
        rows += bf16_row(name, "attention core", build, [q, k, v], (), 2, ctx, mrt, f"B{b}_H{h}_N{n}_Dh{dh}")
    return rows
