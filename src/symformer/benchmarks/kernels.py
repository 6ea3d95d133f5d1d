"""`kernels` suite: the fused Triton kernels (symformer.kernels) against what users compare them with, on a GPU.

GPU only: on a machine without CUDA, or with another --device, or without Triton, the suite records nothing and
refuses with one ValueError line (`symformer bench kernels` prints it and exits 2). It runs only when named
(`symformer bench kernels --device cuda`), so `symformer bench` on a CPU machine never reaches the refusal.

Structure: `SECTIONS` is a list of functions `(ctx) -> (rows, ratios)`, each timing one kernel family in this
process; `run` calls them in order and merges their rows and ratios. The rotary section is here (`rotary_rows`);
other families plug in by appending their section function to the list (benchmarks/_kernels_*.py).

Rotary rows (bf16, half pairing, float32 tables as every library's RoPE takes them or its own):
- B8 H32 N4096 Dh128, forward (under torch.no_grad) and forward + backward (gradients w.r.t. q and k);
- the decoding shape: B8 H32 N1 Dh128 at position 4095 (the table row of that offset), forward;
for our kernel (RoPE(kernel="triton")), our torch path (RoPE(kernel="torch")), HF's `apply_rotary_pos_emb` (Llama)
eager and under torch.compile(fullgraph=True), Liger-Kernel's `liger_rotary_pos_emb` where it imports, and
rotary-embedding-torch (its own interleaved layout and cached freqs).
Ratios: `rope_kernel_vs_liger_fwd_bwd` (against compiled HF where Liger does not import: the `ratio_basis` row says
which), `rope_kernel_vs_memory_floor` (forward time over bytes moved / copy bandwidth, the bandwidth measured
here with a 1 GiB device copy: the `bandwidth` row), `espr_layer_vs_rope_layer_gpu` (an attention layer's training
step, ESPR over RoPE, at the positional suite's layer shape). Headline ratios are medians of back-to-back calls.

Circulant STRING rows (`circulant_rows`): its FFT path against a dense matmul with R(r), forward and forward +
backward; `circulant_fft_vs_matmul_*` say which a GPU should run (both are torch code: no kernel is written for it
until these numbers say one is worth it).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from symformer._rng import seeded_generator
from symformer._validation import fail
from symformer.benchmarks._kernels_favor import favor_rows
from symformer.benchmarks._kernels_plash import plash_rows
from symformer.benchmarks.base import BenchContext, BenchResult, median_seconds, suite
from symformer.benchmarks.positional import LAYER_SHAPE, _layers, interleaved_ratio
from symformer.kernels import triton_available
from symformer.positional import CirculantSTRING, RoPE

Section = Callable[[BenchContext], "tuple[list[dict[str, Any]], dict[str, Any]]"]
ROPE_SHAPE = (8, 32, 4096, 128)
DECODE_POSITION = 4095


def require_gpu(ctx: BenchContext) -> None:
    """ValueError naming --device unless the suite can time Triton kernels on a CUDA device here."""
    if not str(ctx.device).startswith("cuda") or not torch.cuda.is_available():
        fail(
            "--device",
            ctx.device if torch.cuda.is_available() else f"{ctx.device} (this machine has no CUDA device)",
            "a CUDA device: the kernels suite times Triton kernels on a GPU and records nothing elsewhere",
        )
    if not triton_available():
        fail("--device", ctx.device, "a machine where Triton imports (pip install symformer[triton])")


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy of `nbytes` (read + write counted): the floor's bandwidth."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / median_seconds(lambda: dst.copy_(src), 0.3, device)


def _hf_apply():
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:  # optional `hf` extra
        return None
    return apply_rotary_pos_emb


def _liger_apply():
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except ImportError:  # not a dependency: timed where the user installed it (pip install liger-kernel)
        return None
    return liger_rotary_pos_emb


def _rotate_half_tables(dh: int, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's (1, N, Dh) cos / sin in the activations' dtype, as LlamaRotaryEmbedding hands them to the attention."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32, device=positions.device) / dh))
    emb = torch.cat([positions.float()[:, None] * inv] * 2, dim=-1)[None]  # (1, N, Dh)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_methods(dh: int, positions: torch.Tensor, dtype: torch.dtype) -> dict[str, Callable]:
    """name -> f(q, k) -> (q', k') for every rotary implementation compared (tables built once, as each caches)."""
    dev = positions.device
    ours = {kern: RoPE(dh, kernel=kern).to(dev) for kern in ("triton", "torch")}
    out: dict[str, Callable] = {
        "symformer_kernel": lambda q, k: ours["triton"](q, k, positions),
        "symformer_torch": lambda q, k: ours["torch"](q, k, positions),
    }
    cos, sin = _rotate_half_tables(dh, positions, dtype)
    hf = _hf_apply()
    if hf is not None:
        out["hf_eager"] = lambda q, k: hf(q, k, cos, sin)
        compiled: dict = {}  # compiled at the first (untimed warm-up) call

        def hf_compiled(q, k):
            if "fn" not in compiled:
                compiled["fn"] = torch.compile(hf, fullgraph=True)
            return compiled["fn"](q, k, cos, sin)

        out["hf_compiled"] = hf_compiled
    liger = _liger_apply()
    if liger is not None:
        out["liger"] = lambda q, k: liger(q, k, cos, sin)
    try:
        from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
    except ImportError:  # optional `bench` extra
        return out
    freqs = RotaryEmbedding(dh).to(dev)(positions.float())
    out["rotary_embedding_torch"] = lambda q, k: (apply_rotary_emb(freqs, q), apply_rotary_emb(freqs, k))
    return out


def _runner(fn: Callable, q: torch.Tensor, k: torch.Tensor, backward: bool) -> Callable[[], None]:
    gq, gk = torch.randn_like(q), torch.randn_like(k)

    def fwd():
        with torch.no_grad():
            fn(q, k)

    def fwd_bwd():
        qa, ka = q.detach().requires_grad_(), k.detach().requires_grad_()
        torch.autograd.backward(fn(qa, ka), (gq, gk))

    return fwd_bwd if backward else fwd


def _floor_bytes(shape: tuple, dtype: torch.dtype, backward: bool) -> int:
    """Bytes a rotation of q and k must move: read both, write both, read the float32 (N, Dh/2) cos and sin; the
    backward moves the same again (read the gradients, write theirs)."""
    b, h, n, dh = shape
    once = 4 * b * h * n * dh * torch.empty((), dtype=dtype).element_size() + 2 * n * (dh // 2) * 4
    return 2 * once if backward else once


def rotary_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    """The rotary section (module docstring): rows for every method, shape and mode; the three rotary ratios."""
    dev, dtype, mrt = ctx.device, torch.bfloat16, 0.2 if ctx.quick else 1.0
    g = seeded_generator(ctx.seed)
    rows: list[dict] = []
    runs: dict = {}
    bw = copy_bandwidth(dev)
    rows.append({"kind": "bandwidth", "method": "measured device copy (1 GiB)", "bytes_per_s": bw})
    b, h, n, dh = ROPE_SHAPE
    cases = (  # fmt: skip
        ("B8_H32_N4096_Dh128", torch.arange(n, device=dev), (b, h, n, dh), (False, True)),
        (
            f"decode_B8_H32_N1_Dh128_at{DECODE_POSITION}",
            torch.tensor([DECODE_POSITION], device=dev),
            (b, h, 1, dh),
            (False,),
        ),
    )
    for label, pos, shape, modes in cases:
        q = torch.randn(shape, generator=g).to(dev, dtype)
        k = torch.randn(shape, generator=g).to(dev, dtype)
        for name, fn in rope_methods(dh, pos, dtype).items():
            for backward in modes:
                run = runs[(name, label, backward)] = _runner(fn, q, k, backward)
                t = median_seconds(run, mrt, dev)
                floor = _floor_bytes(shape, dtype, backward) / bw
                mode = "fwd+bwd" if backward else "fwd"
                rows.append(
                    {"kind": "rotate q,k", "method": name, "shape": label, "mode": mode, "dtype": "bfloat16",
                     "median_s": t, "memory_floor_s": floor, "vs_memory_floor": t / floor}
                )  # fmt: skip
    main = cases[0][0]
    ratios: dict[str, Any] = {}
    basis = "liger" if ("liger", main, True) in runs else "hf_compiled"
    reps = 5 if ctx.quick else 15
    if (basis, main, True) in runs:
        ratios["rope_kernel_vs_liger_fwd_bwd"] = interleaved_ratio(
            runs[("symformer_kernel", main, True)], runs[(basis, main, True)], reps, dev
        )
        rows.append({"kind": "ratio_basis", "method": "rope_kernel_vs_liger_fwd_bwd", "against": basis})
    kernel_fwd = [r for r in rows if r.get("method") == "symformer_kernel" and r.get("shape") == main]
    for r in kernel_fwd:
        suffix = "" if r["mode"] == "fwd" else "_fwd_bwd"
        ratios[f"rope_kernel_vs_memory_floor{suffix}"] = r["vs_memory_floor"]
    for other in ("hf_eager", "hf_compiled", "liger", "rotary_embedding_torch", "symformer_torch"):
        for backward in (False, True):
            if (other, main, backward) in runs:
                mode = "fwd_bwd" if backward else "fwd"
                ratios[f"rope_kernel_vs_{other}_{mode}"] = interleaved_ratio(
                    runs[("symformer_kernel", main, backward)], runs[(other, main, backward)], reps, dev
                )
    lrows, lratios = _espr_layer_rows(ctx, mrt)
    return rows + lrows, {**ratios, **lratios}


def _espr_layer_rows(ctx: BenchContext, mrt: float) -> tuple[list[dict], dict]:
    """An attention layer's training step (forward + backward, float32, 1-D token positions) with ESPR and with
    RoPE (the rotary kernel where it runs), at the positional suite's layer shape."""
    b, h, n, dh = LAYER_SHAPE
    g = seeded_generator(ctx.seed)
    x = torch.randn(b, n, h * dh, generator=g).to(ctx.device)
    pos = torch.arange(n, dtype=torch.float32, device=ctx.device)[:, None]
    layers = _layers(h * dh, h, ctx.device)
    runs = {}
    rows = []
    for name in ("rope", "espr"):
        layer = layers[name].train()

        def step(layer=layer):
            layer(x, pos).float().sum().backward()
            layer.zero_grad(set_to_none=True)

        runs[name] = step
        label = f"B{b}_H{h}_N{n}_Dh{dh}"
        t = median_seconds(step, mrt, ctx.device)
        rows.append({"kind": "layer", "method": name, "shape": label, "mode": "train fwd+bwd", "median_s": t})
    ratio = interleaved_ratio(runs["espr"], runs["rope"], 5 if ctx.quick else 9, ctx.device)
    return rows, {"espr_layer_vs_rope_layer_gpu": ratio}


def circulant_methods(part: CirculantSTRING, positions: torch.Tensor) -> dict[str, Callable]:
    """Circulant STRING's two ways to apply R(r) to x (..., N, Dh): its FFT path (`rotate`: rfft, a phase per
    frequency, irfft, in float32) and a dense product with the matrices R(r) (N, Dh, Dh) built once per step, in
    float32 too. Which is faster is a GPU question (cuFFT launches against one batched GEMM)."""

    def fft(x):
        return part.rotate(x, positions)

    def matmul(x):
        r = part.matrix(positions).float()  # (N, Dh, Dh), float32 like the FFT path's work
        return (r @ x.float()[..., None])[..., 0].to(x.dtype)  # (..., N, Dh, Dh) @ (..., N, Dh, 1)

    return {"circulant_fft": fft, "circulant_matmul": matmul}


def circulant_rows(ctx: BenchContext) -> tuple[list[dict], dict]:
    """Circulant STRING, FFT against dense matmul: one tensor (q) at B8 H32 N4096 Dh128 in bfloat16, forward and
    forward + backward (gradients w.r.t. x and the circulant columns)."""
    dev, mrt = ctx.device, 0.2 if ctx.quick else 1.0
    b, h, n, dh = ROPE_SHAPE
    part = CirculantSTRING(dh, seed=ctx.seed).to(dev)
    pos = torch.arange(n, device=dev)
    x = torch.randn(ROPE_SHAPE, generator=seeded_generator(ctx.seed)).to(dev, torch.bfloat16)
    rows, runs = [], {}
    for name, fn in circulant_methods(part, pos).items():
        for backward in (False, True):
            gx = torch.randn_like(x)

            def run(fn=fn, backward=backward, gx=gx):
                if backward:
                    fn(x.detach().requires_grad_()).backward(gx)
                    part.zero_grad(set_to_none=True)
                else:
                    with torch.no_grad():
                        fn(x)

            runs[(name, backward)] = run
            mode = "fwd+bwd" if backward else "fwd"
            rows.append(
                {"kind": "rotate x", "method": name, "shape": "B8_H32_N4096_Dh128", "mode": mode,
                 "dtype": "bfloat16", "median_s": median_seconds(run, mrt, dev)}
            )  # fmt: skip
    reps = 5 if ctx.quick else 15
    ratios = {}
    for m, bw in (("fwd", False), ("fwd_bwd", True)):
        fft, mm = runs[("circulant_fft", bw)], runs[("circulant_matmul", bw)]
        ratios[f"circulant_fft_vs_matmul_{m}"] = interleaved_ratio(fft, mm, reps, dev)
    return rows, ratios


#: the suite's sections, in order; each (ctx) -> (rows, ratios). Other kernel families append theirs.
SECTIONS: list[Section] = [rotary_rows, circulant_rows, favor_rows, plash_rows]


@suite("kernels", "fused Triton kernels vs HF / Liger / rotary-embedding-torch (GPU only)", by_name_only=True)
def run(ctx: BenchContext) -> BenchResult:
    require_gpu(ctx)
    res = BenchResult()
    for section in SECTIONS:
        rows, ratios = section(ctx)
        res.rows += rows
        res.ratios.update(ratios)
    res.config = {
        "rope_shape": list(ROPE_SHAPE),
        "decode_position": DECODE_POSITION,
        "layer_shape": list(LAYER_SHAPE),
        "dtype": "bfloat16 rotations (float32 tables), float32 layers",
        "device": ctx.device,
        "gpu": torch.cuda.get_device_name(ctx.device),
        "sections": [s.__name__ for s in SECTIONS],
    }
    res.notes.append(
        "rope_kernel_vs_memory_floor: forward time / (bytes moved / measured copy bandwidth); the `bandwidth` row "
        "gives it. rope_kernel_vs_liger_fwd_bwd is against the method in the `ratio_basis` row (compiled HF where "
        "Liger-Kernel does not import)."
    )
    return res
