"""Run on the device machine at 22f70cd (PYTHONPATH=src): what the rotary parts' argument checks cost inside a
layer and an HF decode step on cuda: the same call with RotaryPositional._check_qk replaced by its shape-only part,
and the host syncs per call (torch.cuda.set_sync_debug_mode). Output: rotary_checks_cost.log."""

# ruff: noqa: B023  (the closures are called inside the iteration that binds them)
import time
import warnings

import torch

from symformer.models.layers import MultiHeadAttention
from symformer.positional.base import RotaryPositional

dev = "cuda"
CHECKED = RotaryPositional._check_qk


def unchecked(self, q, k, positions, key_positions):
    return positions if key_positions is None else key_positions


def ms(fn, reps=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return round((time.perf_counter() - t) * 1e3 / reps, 4)


def syncs(fn):
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(x.message) for x in w)


def both(name, fn, reps=30):
    out = {}
    for mode, chk in (("checked", CHECKED), ("unchecked", unchecked)):
        RotaryPositional._check_qk = chk
        out[mode] = (ms(fn, reps), syncs(fn))
    RotaryPositional._check_qk = CHECKED
    print(f"{name}: (ms per call, host syncs per call) {out}", flush=True)


for pe in ("rope", "string", "espr"):
    kw = {"pairing": "interleaved", **({"commuting_init": False} if pe == "espr" else {})}
    layer = MultiHeadAttention(512, 8, "softmax", pe, 1, positional_kwargs=kw).to(dev)
    x = torch.randn(8, 1024, 512, device=dev)
    pos = torch.arange(1024, device=dev)[:, None]
    with torch.no_grad():
        both(f"layer {pe} infer fwd B8 N1024", lambda: layer(x, pos))
    xs = torch.randn(1, 1, 512, device=dev)
    with torch.no_grad():
        both(f"layer {pe} infer fwd B1 N1", lambda: layer(xs, pos[:1]))

from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

from symformer.integrations.hf import patch_positional  # noqa: E402

cfg = LlamaConfig(
    vocab_size=256,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=8,
    max_position_embeddings=4096,
)
for pe in ("native", "rope", "string"):
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dev).eval()
    if pe != "native":
        model = patch_positional(model, pe)
    ids = torch.randint(0, 256, (1, 1024), device=dev)
    with torch.no_grad():
        cache = DynamicCache(config=cfg)
        model(ids, past_key_values=cache, use_cache=True)
        n = [1024]

        def step():
            cp = torch.tensor([n[0]], device=dev)
            model(ids[:, :1], past_key_values=cache, use_cache=True, cache_position=cp, position_ids=cp[None])
            n[0] += 1

        both(f"hf llama {pe} decode step at ~1k", step, reps=40)
