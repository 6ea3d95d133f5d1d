"""Rows of the `positional` suite for Hugging Face models (extra `hf`): one training step (forward, backward,
AdamW step) of a config-built tiny Llama character LM with its native RoPE and with symformer STRING / ESPR
patched into every attention layer (symformer.integrations.hf.patch_positional).

Ratios: hf_llama_string_step_vs_rope, hf_llama_espr_step_vs_rope = patched step time / native step time
(target <= 1.3). The three models are timed in alternating rounds and each keeps its fastest round's
median, so a burst of load on a shared machine hits every method alike rather than one of them."""

from __future__ import annotations

import torch

from symformer._rng import seeded_generator
from symformer.benchmarks.base import BenchContext, BenchResult, median_seconds
from symformer.integrations.hf.lm import TinyLlama, lm_loss, n_parameters, tiny_llama

VOCAB = 65  # tiny Shakespeare's character vocabulary
# named on purpose, not every registered part: the two ratios above compare STRING and ESPR with the native RoPE
METHODS = {"hf_llama_native_rope": (None, {}), "hf_llama_string": ("string", {}), "hf_llama_espr": ("espr", {})}


def _step_fn(model, x, y):

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        lm_loss(model, x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def hf_rows(res: BenchResult, ctx: BenchContext) -> None:
    """Append the HF Llama training-step rows and ratios to `res` (a note instead without transformers)."""
    try:
        import transformers  # noqa: F401

    except ImportError:
        res.notes.append("hf_llama_* rows skipped: transformers is not installed (pip install 'symformer[hf]')")
        return
    batch, block = (8, 128) if ctx.quick else (16, 256)
    spec = TinyLlama(max_len=block)
    g = seeded_generator(ctx.seed)
    x = torch.randint(0, VOCAB, (batch, block), generator=g)
    y = torch.randint(0, VOCAB, (batch, block), generator=g)
    steps, params = {}, {}
    for name, (positional, opts) in METHODS.items():
        model = tiny_llama(VOCAB, spec, positional, seed=ctx.seed, **opts).to(ctx.device).train()
        steps[name], params[name] = _step_fn(model, x.to(ctx.device), y.to(ctx.device)), n_parameters(model)
    mrt = 0.5 if ctx.quick else 2.0
    best: dict[str, float] = {}
    threads = torch.get_num_threads()
    if ctx.device == "cpu":
        # one thread: a ~2M-parameter model's many small kernels gain nothing from intra-op threads, and on a
        # loaded machine each pays OpenMP synchronisation (2 threads at load 12: ESPR's ratio read 6.5, not 1.3)
        torch.set_num_threads(1)
    try:
        for _ in range(2 if ctx.quick else 3):
            for name, fn in steps.items():
                t = median_seconds(fn, mrt, ctx.device)
                best[name] = min(best.get(name, t), t)
    finally:
        torch.set_num_threads(threads)
    shape = f"B{batch}_N{block}_d{spec.hidden_size}_L{spec.n_layers}_H{spec.n_heads}_Hkv{spec.n_kv_heads}"
    for name, t in best.items():
        res.rows.append(
            {
                "kind": "hf llama train step",
                "method": name,
                "shape": shape,
                "mode": "train fwd+bwd+adamw",
                "median_s": t,
                "peak_bytes": None,
                "params": params[name],
            }
        )
    res.ratios["hf_llama_string_step_vs_rope"] = best["hf_llama_string"] / best["hf_llama_native_rope"]
    res.ratios["hf_llama_espr_step_vs_rope"] = best["hf_llama_espr"] / best["hf_llama_native_rope"]
    n_params = params["hf_llama_native_rope"]
    res.notes.append(
        f"hf_llama_* rows: transformers LlamaForCausalLM from a config ({n_params:,} "
        f"parameters, sdpa attention), one training step on {batch} x {block} tokens, one CPU thread; "
        "fastest of alternating rounds of medians"
    )


__all__ = ["hf_rows", "METHODS"]
