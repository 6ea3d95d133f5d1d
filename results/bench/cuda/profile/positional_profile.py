"""Run on the device machine at 22f70cd (PYTHONPATH=src plus rotary-embedding-torch): are the cuda positional
gaps (RoPE vs rotary-embedding-torch, ESPR train step) launch overhead or per-element cost? CUDA-event timing
at the bench's small shape and at a large one, and the top kernels. Output: positional_profile.log."""
# ruff: noqa: B023  (the closures are called inside the iteration that binds them)

import time

import torch
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
from torch.profiler import ProfilerActivity, profile

from symformer.models.layers import MultiHeadAttention
from symformer.positional import RoPE

dev = "cuda"


def cuda_ms(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    torch.cuda.synchronize()
    gpu = e0.elapsed_time(e1) / reps
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) * 1e3 / reps
    return round(gpu, 4), round(wall, 4)


def top(fn, k=8):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=k, max_name_column_width=60))


for B, H, N, D in [(8, 8, 1024, 64), (8, 32, 4096, 128)]:
    q = torch.randn(B, H, N, D, device=dev)
    k = torch.randn_like(q)
    pos = torch.arange(N, device=dev, dtype=torch.float32)[:, None]
    ropes = {p: RoPE(D, 1, pairing=p).to(dev) for p in ("interleaved", "half")}
    rot = RotaryEmbedding(D).to(dev)
    f = rot(torch.arange(N, device=dev, dtype=torch.float32))
    fns = {
        "rope": lambda: ropes["interleaved"](q, k, pos),
        "rope_half": lambda: ropes["half"](q, k, pos),
        "rope_rotate_novalidate": lambda: (ropes["interleaved"].rotate(q, pos), ropes["interleaved"].rotate(k, pos)),
        "ret": lambda: (apply_rotary_emb(f, q), apply_rotary_emb(f, k)),
    }
    bytes_ = 4 * q.numel() * 4
    print(f"shape {(B, H, N, D)}: memory floor {bytes_ / 4.0e12 * 1e3:.4f} ms at 4 TB/s")
    for n, fn in fns.items():
        print(f"  {n}: (cuda-event ms, wall ms) {cuda_ms(fn)}")
    if N == 1024:
        top(fns["rope"])
        top(fns["ret"], 6)
for pe in ("rope", "espr"):
    kw = {"commuting_init": False} if pe == "espr" else {}
    layer = MultiHeadAttention(512, 8, "softmax", pe, 1, positional_kwargs={"pairing": "interleaved", **kw}).to(dev)
    x = torch.randn(8, 1024, 512, device=dev, requires_grad=True)
    pos = torch.arange(1024, device=dev, dtype=torch.float32)[:, None]

    def step():
        layer(x, pos).sum().backward()

    try:
        print(f"layer {pe} train fwd+bwd: {cuda_ms(step, 20)}")
        if pe == "espr":
            top(step, 12)
    except Exception as e:
        print(pe, "layer call failed:", type(e).__name__, e)
