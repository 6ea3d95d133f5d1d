"""`positional` suite: rotating q and k, and whole attention layers, with RoPE / STRING / ESPR.

Rotation rows time `rotate(q, k)` at (B=1, H=8, N=4096, Dh=64) and (B=8, H=8, N=1024, Dh=64), float32,
forward and forward+backward (gradients w.r.t. q and k; position tables / exps cached as each library
does for repeated positions). Layer rows time a MultiHeadAttention (projections + rotation + SDPA) with
d_model = H * Dh: forward under no_grad in eval mode (inference) and forward+backward with every
parameter trainable (training). Positions are 1-D token indices 0..N-1 for every method. All ratios
come from rows measured in this process.
"""
from __future__ import annotations

import torch

from symformer.benchmarks.base import (
    BenchContext,
    BenchResult,
    median_seconds,
    peak_memory_bytes,
    suite,
)

SHAPES = ((1, 8, 4096, 64), (8, 8, 1024, 64))


def _rotators(dh: int, device: str) -> dict:
    """name -> rotate(q, k) callables over shared 1-D positions (built once, caches warm)."""
    from symformer.positional import ESPR, STRING, RoPE

    out: dict = {}
    rope = RoPE(dh, 1, pairing="interleaved").to(device)
    rope_half = RoPE(dh, 1, pairing="half").to(device)
    out["rope"] = lambda q, k, pos: rope(q, k, pos)
    out["rope_half"] = lambda q, k, pos: rope_half(q, k, pos)
    try:
        from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb

        rot = RotaryEmbedding(dh).to(device)  # same frequencies as our RoPE (theta 10000, interleaved pairs)
        cache: dict = {}

        def ret(q, k, pos):
            n = q.shape[-2]
            if n not in cache:  # the library caches freqs for a sequence length the same way
                cache[n] = rot(torch.arange(n, device=q.device, dtype=torch.float32))
            f = cache[n]
            return apply_rotary_emb(f, q), apply_rotary_emb(f, k)

        out["rotary_embedding_torch"] = ret
    except ImportError:  # optional [bench] dependency
        pass
    string = STRING(dh, 1, init_scale=0.1, learnable=False).to(device)
    out["string_unfolded"] = lambda q, k, pos: string(q, k, pos)
    folded = STRING(dh, 1, init_scale=0.1, learnable=False).to(device)
    folded.folded.fill_(True)  # P^T lives in W_Q / W_K: the rotation is the RoPE part only
    out["string_folded"] = lambda q, k, pos: folded(q, k, pos)
    espr = ESPR(dh, 1, commuting_init=False, learnable=False).to(device)
    out["espr_cached_exp"] = lambda q, k, pos: espr(q, k, pos)
    return out


def _time(fn, backward: bool, inputs: list, ctx: BenchContext, min_run_time: float) -> tuple[float, int | None]:
    def run():
        if backward:
            out = fn()
            sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
            for t in inputs:
                t.grad = None
        else:
            with torch.no_grad():
                fn()

    return median_seconds(run, min_run_time, ctx.device), peak_memory_bytes(run, ctx.device)


def _layers(d_model: int, heads: int, device: str, coord_dim: int = 1) -> dict:
    from symformer.models.layers import MultiHeadAttention
    from symformer.positional import fold_string

    torch.manual_seed(0)

    def mk(pos: str, **kw):
        return MultiHeadAttention(d_model, heads, "softmax", pos, coord_dim, positional_kwargs=kw).to(device)

    if coord_dim > 1:  # non-commuting ESPR: one matrix_exp (and its backward) per distinct grid position
        return {"rope_grid2d": mk("rope", pairing="interleaved"), "espr_grid2d": mk("espr", commuting_init=False)}
    layers = {"rope": mk("rope", pairing="interleaved"), "espr": mk("espr", commuting_init=False),
              "string_unfolded": mk("string", init_scale=0.1), "string_folded": mk("string", init_scale=0.1)}
    fold_string(layers["string_folded"])
    return layers


def _grid(n: int, device: str) -> torch.Tensor:
    side = int(round(n ** 0.5))
    ax = torch.arange(side, dtype=torch.float32, device=device)
    return torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, 2)


def _time_layers(res: BenchResult, cells: dict, ctx: BenchContext, shape: tuple, x0: torch.Tensor,
                 pos: torch.Tensor, mrt: float) -> None:
    b, h, n, dh = shape
    label = f"B{b}_H{h}_N{n}_Dh{dh}"
    for name, layer in _layers(h * dh, h, ctx.device, pos.shape[-1]).items():
        for backward in (False, True):
            if name == "string_folded" and backward:
                continue  # folding is an inference transformation
            layer.train(backward)
            x = x0.clone().requires_grad_(backward)
            t, mem = _time(lambda layer=layer, x=x: layer(x, pos), backward, [x, *layer.parameters()], ctx, mrt)
            mode = "train fwd+bwd" if backward else "infer fwd"
            cells[("layer", name, label, mode)] = t
            res.rows.append({"kind": "attention layer", "method": name, "shape": label, "mode": mode,
                             "positions": f"{pos.shape[-1]}-D", "median_s": t, "peak_bytes": mem})


@suite("positional", "RoPE / STRING / ESPR rotations and attention layers vs rotary-embedding-torch")
def run(ctx: BenchContext) -> BenchResult:
    res = BenchResult()
    mrt = 0.1 if ctx.quick else 0.5
    g = torch.Generator().manual_seed(ctx.seed)
    cells: dict = {}
    for b, h, n, dh in SHAPES:
        shape = f"B{b}_H{h}_N{n}_Dh{dh}"
        pos = torch.arange(n, dtype=torch.float32, device=ctx.device)[:, None]
        q0 = torch.randn(b, h, n, dh, generator=g).to(ctx.device)
        k0 = torch.randn(b, h, n, dh, generator=g).to(ctx.device)
        for name, rot in _rotators(dh, ctx.device).items():
            for backward in (False, True):
                q, k = q0.clone().requires_grad_(backward), k0.clone().requires_grad_(backward)
                t, mem = _time(lambda rot=rot, q=q, k=k, pos=pos: rot(q, k, pos), backward, [q, k], ctx, mrt)
                mode = "fwd+bwd" if backward else "fwd"
                cells[("rot", name, shape, mode)] = t
                res.rows.append({"kind": "rotate q,k", "method": name, "shape": shape, "mode": mode,
                                 "median_s": t, "peak_bytes": mem})
        if ctx.quick and (b, h, n, dh) != SHAPES[-1]:
            continue  # quick: attention layers at one shape only
        x0 = torch.randn(b, n, h * dh, generator=g).to(ctx.device)
        _time_layers(res, cells, ctx, (b, h, n, dh), x0, pos, mrt)
        if not ctx.quick:
            _time_layers(res, cells, ctx, (b, h, n, dh), x0, _grid(n, ctx.device), mrt)
    _ratios(res, cells)
    from symformer.benchmarks.positional_hf import (
        hf_rows,  # HF Llama rows (extra `hf`): benchmarks/positional_hf.py
    )
    hf_rows(res, ctx)
    res.config = {"shapes": [list(s) for s in SHAPES], "dtype": "float32",
                  "positions": "1-D token indices; full mode adds 2-D grids (sqrt(N) x sqrt(N)) for the *_grid2d layers",
                  "layer_shapes": [list(SHAPES[-1])] if ctx.quick else [list(s) for s in SHAPES],
                  "min_run_time_s": mrt, "threads": torch.get_num_threads(), "device": ctx.device}
    res.notes.append("Headline ratios are the worst (largest) over shapes and modes; per-cell ratios follow.")
    res.notes.append("espr_layer_vs_rope_layer uses 1-D token positions, where ESPR computes exp(nL) = exp(L)^n "
                     "exactly by doubling; espr_layer_vs_rope_layer_grid2d (full mode) is the non-commuting "
                     "2-D case with one matrix_exp per distinct position.")
    return res


def _ratio_set(res: BenchResult, cells: dict, key: str, num: tuple, den: tuple, modes: tuple) -> None:
    vals = []
    for (kind, name, shape, mode), t in cells.items():
        if kind == num[0] and name == num[1] and mode in modes and (den[0], den[1], shape, mode) in cells:
            r = t / cells[(den[0], den[1], shape, mode)]
            res.ratios[f"{key}[{shape},{mode}]"] = r
            vals.append(r)
    if vals:
        res.ratios[key] = max(vals)


def _ratios(res: BenchResult, cells: dict) -> None:
    tmp = BenchResult()
    _ratio_set(tmp, cells, "rope_vs_rotary_embedding_torch", ("rot", "rope"), ("rot", "rotary_embedding_torch"),
               ("fwd", "fwd+bwd"))
    _ratio_set(tmp, cells, "espr_layer_vs_rope_layer", ("layer", "espr"), ("layer", "rope"), ("train fwd+bwd",))
    _ratio_set(tmp, cells, "string_folded_layer_vs_rope_layer", ("layer", "string_folded"), ("layer", "rope"),
               ("infer fwd",))
    _ratio_set(tmp, cells, "espr_layer_vs_rope_layer_grid2d", ("layer", "espr_grid2d"), ("layer", "rope_grid2d"),
               ("train fwd+bwd",))
    _ratio_set(tmp, cells, "espr_layer_vs_rope_layer_inference", ("layer", "espr"), ("layer", "rope"), ("infer fwd",))
    _ratio_set(tmp, cells, "string_unfolded_layer_vs_rope_layer", ("layer", "string_unfolded"), ("layer", "rope"),
               ("infer fwd", "train fwd+bwd"))
    # fixed headline names first, then the per-cell breakdown
    res.ratios.update({k: v for k, v in tmp.ratios.items() if "[" not in k})
    res.ratios.update({k: v for k, v in tmp.ratios.items() if "[" in k})
