"""`generation` suite: per-token decoding latency and state memory of a config-built ~20M-parameter Llama with
SDPA and a KV cache (transformers' DynamicCache) and with every registered decoding core (attention.decoding_cores:
FAVOR+ and PLASH; symformer decoding states in a StateCache, integrations.hf.cache), at contexts 1k, 4k, 16k (and
64k without --quick, where SDPA's cache of 1.6 GB is filled with random keys and values rather than prefilled
quadratically), batch 1, in one process.

Per context and method: the prompt is prefilled in one forward (timed once: `prefill_s`); then every (method,
context) decodes `tokens` + 2 single tokens, round-robin in a shuffled order, one step each per round
(`decode_s`: the median of its step times after the first two), so a burst of load on a shared machine, or the
memory traffic of SDPA's long caches, hits every row alike. A core's per-token time is what its `forward(...,
state=)` costs (the decoding contract declares no other work to time), so `block_amortised_s` is 0 in every row
(the column of the recorded reports, where a PLASH state that recomputed its prefix summaries outside the step had
that cost divided by causal_block added). `state_bytes`: the bytes the cache holds after the prefill (keys and
values for SDPA; the states' `nbytes()` otherwise: [S, z] and the stabiliser for FAVOR+; summaries, their Stage
II-III keys and values and the current block for PLASH).

Ratios and their goals: favor/plash_decode_16k_vs_1k <= 1.2, favor/plash_decode_vs_sdpa_16k <= 0.25,
favor/plash_state_bytes_vs_kv_16k <= 0.05; sdpa_decode_16k_vs_1k for reference."""

from __future__ import annotations

import statistics

import torch

from symformer._rng import seeded_generator
from symformer.attention.decoding import decoding_cores
from symformer.benchmarks._hf_llama import config_llama
from symformer.benchmarks.base import BenchContext, BenchResult, suite, timed_call
from symformer.integrations import hf
from symformer.integrations.hf.cache import cache_kwargs, state_cache

VOCAB = 256
SPEC = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=8,
    head_dim=64,
)
FAVOR = dict(n_features=256, chunk_size=128)
PLASH = dict(M=64, D_k=64, width=64, mixer_heads=4, causal_block=256)


def methods() -> tuple[str, ...]:
    """ "sdpa" (the baseline: transformers' own attention and KV cache), then every registered decoding core in name
    order (the order of the recorded reports: favor, plash)."""
    return ("sdpa", *sorted(decoding_cores()))


def core_options(method: str) -> dict:
    """The bench's sizes for a decoding core: FAVOR and PLASH above (read when called, so a test can shrink them);
    any other registered core runs with its defaults."""
    return {"favor": FAVOR, "plash": PLASH}.get(method, {})


def __getattr__(name: str):
    if name == "METHODS":  # the methods registered now (`methods()`): a core registered later is in it too
        return methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _model(method: str, seed: int, max_len: int):

    model = config_llama(seed, max_len, vocab_size=VOCAB, **SPEC).eval()
    if method != "sdpa":
        hf.configure(model, attention=method, **core_options(method))
    return model


def _cache(model, method: str):
    import transformers as tf

    return tf.DynamicCache(config=model.config) if method == "sdpa" else state_cache(model)


def _state_bytes(cache, method: str) -> int:
    if method == "sdpa":
        return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    return sum(layer.nbytes() for layer in cache.layers)


def _synthetic_kv(model, cache, context: int, g: torch.Generator) -> None:
    """Fill a DynamicCache with `context` random keys and values per layer: what a decoding step reads and copies
    depends on the cache's size only, and a quadratic SDPA prefill at 16k takes minutes on 2 cores."""
    for i in range(SPEC["num_hidden_layers"]):
        shape = (1, SPEC["num_key_value_heads"], context, SPEC["head_dim"])
        dev = model.device
        cache.update(torch.randn(shape, generator=g).to(dev), torch.randn(shape, generator=g).to(dev), i)


@torch.no_grad()
def prefill(model, method: str, context: int, seed: int, timed: bool = True) -> dict:
    """A cache holding `context` random tokens (timed=False: SDPA's filled with random keys and values, prefill
    not timed), the next token to feed, and the row's measurements so far."""
    g = seeded_generator(seed)
    ids = torch.randint(0, VOCAB, (1, context), generator=g).to(model.device)  # drawn on the CPU: same on any device
    cache = _cache(model, method)
    if timed:
        seconds, out = timed_call(
            lambda: model(ids, **cache_kwargs(model, cache), use_cache=True, logits_to_keep=1), model.device
        )
        nxt = out.logits[:, -1:].argmax(-1)
    else:
        _synthetic_kv(model, cache, context, g)
        nxt, seconds = ids[:, -1:], None
    return {
        "model": model,
        "method": method,
        "cache": cache,
        "next": nxt,
        "position": context,
        "times": [],
        "prefill_s": seconds,
        "state_bytes": _state_bytes(cache, method),
    }


@torch.no_grad()
def decode_one(run: dict) -> None:
    """Decode one token with the run's cache; its wall time is appended to run["times"]."""
    model = run["model"]
    pos = torch.tensor([[run["position"]]], device=model.device)
    seconds, out = timed_call(
        lambda: model(run["next"], **cache_kwargs(model, run["cache"]), use_cache=True, position_ids=pos), model.device
    )
    run["times"].append(seconds)
    run["next"], run["position"] = out.logits[:, -1:].argmax(-1), run["position"] + 1


def summary(run: dict) -> dict:
    """decode_s: the median step after two warm-up steps (block_amortised_s: 0, module doc)."""
    return {
        "prefill_s": run["prefill_s"],
        "decode_s": statistics.median(run["times"][2:]),
        "block_amortised_s": 0.0,
        "state_bytes": run["state_bytes"],
    }


def measure(model, method: str, context: int, tokens: int, seed: int, timed: bool = True) -> dict:
    """One row on its own: prefill, then `tokens` + 2 single-token steps."""
    run = prefill(model, method, context, seed, timed)
    for _ in range(tokens + 2):
        decode_one(run)
    return summary(run)


@suite(
    "generation",
    "per-token decoding latency and state memory: SDPA + KV cache vs FAVOR+ and PLASH states "
    "(HF Llama ~20M parameters, contexts 1k-16k)",
)
def run(ctx: BenchContext) -> BenchResult:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return BenchResult(
            notes=["generation suite skipped: transformers is not installed (pip install 'symformer[hf]')"]
        )
    contexts = (1024, 4096, 16384) if ctx.quick else (1024, 4096, 16384, 65536)
    tokens = 12 if ctx.quick else 32
    every = methods()
    cores = every[1:]
    res = BenchResult(
        config={
            "model": {"vocab_size": VOCAB, **SPEC},
            **{m: core_options(m) for m in cores},
            "contexts": contexts,
            "tokens": tokens,
            "batch": 1,
        }
    )
    rows: dict[tuple[str, int], dict] = {}
    models = {m: _model(m, ctx.seed, max(contexts) + tokens + 8).to(ctx.device) for m in every}
    n_params = sum(p.numel() for p in models["sdpa"].parameters())
    threads = torch.get_num_threads()
    if ctx.device == "cpu":  # batch-1 decoding is matrix-vector work: threads add OpenMP joins on a loaded machine
        torch.set_num_threads(1)
    try:
        for method in every:  # warm-up: first-call costs (allocator, lazy init) stay out of the 1k row
            measure(models[method], method, 256, 2, ctx.seed)
        runs = {}
        for context in contexts:
            for method in every:
                # SDPA's quadratic prefill: timed up to 4k in --quick, 16k in full runs (64k would take hours on CPU)
                timed = not (method == "sdpa" and context > (4096 if ctx.quick else 16384))
                runs[method, context] = prefill(models[method], method, context, ctx.seed, timed)
        # decoding steps round-robin over every (method, context), in a fresh order each round: load on a shared
        # machine, and the memory traffic of SDPA's long caches (a 16k step copies 400 MB), hit all rows alike
        order = list(runs.values())
        g = seeded_generator(ctx.seed)
        for _ in range(tokens + 2):
            for i in torch.randperm(len(order), generator=g).tolist():
                decode_one(order[i])
        for (method, context), run in runs.items():
            rows[method, context] = r = summary(run)
            res.rows.append({"method": method, "context": context, "params": n_params, **r})
            if ctx.progress:
                print(f"[generation] {method} {context}: decode {r['decode_s'] * 1e3:.1f} ms", flush=True)
    finally:
        torch.set_num_threads(threads)
    for m in (*cores, "sdpa"):
        res.ratios[f"{m}_decode_16k_vs_1k"] = rows[m, 16384]["decode_s"] / rows[m, 1024]["decode_s"]
    for m in cores:
        res.ratios[f"{m}_decode_vs_sdpa_16k"] = rows[m, 16384]["decode_s"] / rows["sdpa", 16384]["decode_s"]
    for m in cores:
        res.ratios[f"{m}_state_bytes_vs_kv_16k"] = rows[m, 16384]["state_bytes"] / rows["sdpa", 16384]["state_bytes"]
    synthetic = 4096 if ctx.quick else 16384
    res.notes.append(
        f"transformers LlamaForCausalLM from a config ({n_params:,} parameters, float32), batch 1, "
        f"one CPU thread; SDPA's cache beyond {synthetic} tokens is filled with random keys and values "
        f"(its quadratic prefill is not timed: prefill_s null); decode_s = median of {tokens} "
        "single-token steps (round-robin over the rows, shuffled each round) after 2 warm-up steps "
        "(+ PLASH's per-block summary recomputation / causal_block); prefill_s = one call"
    )
    return res


__all__ = ["run", "measure", "prefill", "decode_one", "summary"]
