"""The job functions of experiment `linearize` (module level, JSON arguments and results, so the runner can record,
resume and spread them): the softmax teacher, one linearize run per arm, one scratch run per attention, and the
decoding cost at a long context."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from symformer.data import load_char_text
from symformer.experiments.linearize.plan import LinearizePlan
from symformer.integrations.hf import configure, require_transformers, state_cache
from symformer.integrations.hf.lm import evaluate, n_parameters, tiny_llama, train_lm
from symformer.linearize import CORES, LinearizeConfig, linearize, student_of


def _split(p: LinearizePlan, data_dir: str):
    return load_char_text(block=p.block, data_dir=data_dir, max_chars=p.max_chars)


def val_loss(model, split, p: LinearizePlan) -> float:
    """The validation loss every arm is compared on: the first eval_batches batches of batch_size windows (the
    points linearize's curves record)."""
    return evaluate(model, split.val, batch_size=p.batch_size, max_batches=p.eval_batches)


def load_teacher(model_dir: str):
    tf = require_transformers()
    tf.utils.logging.disable_progress_bar()
    return tf.LlamaForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()


def train_teacher(plan: dict, data_dir: str, model_dir: str, seed: int) -> dict:
    """The softmax Llama trained from a config (saved to model_dir) and its validation curve."""
    p = LinearizePlan.from_dict(plan)
    split = _split(p, data_dir)
    model = tiny_llama(split.meta["vocab_size"], p.spec, seed=seed)
    curve = train_lm(
        model,
        split,
        p.teacher_steps,
        batch_size=p.batch_size,
        lr=3e-3,
        eval_every=max(p.teacher_steps // 10, 1),
        eval_batches=p.eval_batches,
        seed=seed,
    )
    model.save_pretrained(model_dir)
    return {
        "tokens": [s * p.tokens_per_step for s in curve.steps],
        "val_loss": curve.val_loss,
        "final_val_loss": val_loss(model, split, p),
        "params": n_parameters(model),
        "seconds": curve.seconds,
    }


def arm_config(p: LinearizePlan, attention: str, positional: str, seed: int) -> LinearizeConfig:
    """The arm's LinearizeConfig: the plan's budgets, and its learning rates and LoRA rank unless plan.train sets
    the attention's own."""
    own = {"lr1": p.lr1, "lr2": p.lr2, "lora_rank": p.lora_rank, **p.train.get(attention, {})}
    return LinearizeConfig(
        attention,
        positional,
        stage1_tokens=p.stage1_steps * p.tokens_per_step,
        stage2_tokens=p.stage2_steps * p.tokens_per_step,
        batch_size=p.batch_size,
        **own,
        core_options=dict(getattr(p, attention)),
        seed=seed,
        eval_every=max(min(p.stage1_steps, p.stage2_steps) // p.points, 1),
        eval_batches=p.eval_batches,
        checkpoint_every=25,
    )


def linearize_arm(
    plan: dict, data_dir: str, teacher_dir: str, attention: str, positional: str, seed: int, work_dir=None
) -> dict:
    """One arm: the teacher linearized (checkpoints in work_dir: a killed run resumes there)."""
    p = LinearizePlan.from_dict(plan)
    split = _split(p, data_dir)
    t0 = time.perf_counter()
    resume = work_dir is not None and (Path(work_dir) / "checkpoint.pt").is_file()
    res = linearize(load_teacher(teacher_dir), split, arm_config(p, attention, positional, seed), work_dir, resume)
    return {
        "history": res.history,
        "val_loss": {f"stage{s}": res.val_loss(s) for s in (0, 1, 2)},
        "params": n_parameters(res.model),
        "seconds": time.perf_counter() - t0,
    }


def scratch_arm(plan: dict, data_dir: str, attention: str, seed: int) -> dict:
    """A linear model of the teacher's size trained from scratch for the arms' whole budget (stages 1 + 2)."""
    p = LinearizePlan.from_dict(plan)
    split = _split(p, data_dir)
    model = configure(
        tiny_llama(split.meta["vocab_size"], p.spec, seed=seed),
        attention=CORES[attention],
        seed=seed,
        **getattr(p, attention),
    )
    steps = p.stage1_steps + p.stage2_steps
    curve = train_lm(
        model,
        split,
        steps,
        batch_size=p.batch_size,
        lr=3e-3,
        eval_every=max(steps // (2 * p.points), 1),
        eval_batches=p.eval_batches,
        seed=seed,
    )
    return {
        "tokens": [s * p.tokens_per_step for s in curve.steps],
        "val_loss": curve.val_loss,
        "final_val_loss": val_loss(model, split, p),
        "params": n_parameters(model),
        "seconds": curve.seconds,
    }


def _cache_bytes(cache) -> int:
    """Bytes held by a generate() cache: the decoding states of a symformer cache, the keys and values of HF's."""
    total = 0
    for layer in cache.layers:
        if callable(getattr(layer, "nbytes", None)):
            total += layer.nbytes()
        else:
            total += sum(t.numel() * t.element_size() for t in (layer.keys, layer.values) if torch.is_tensor(t))
    return total


def _new_cache(model):
    """An empty decoding cache: the states of a model with symformer cores, else HF's KV cache."""
    if getattr(model.config, "symformer_attention", None):
        return state_cache(model)
    return require_transformers().DynamicCache(config=model.config)


def _decode_round(model, ids, tokens: int) -> tuple[float, int]:
    """(seconds per token, cache bytes): an untimed prefill of ids into a new cache, then `tokens` greedy one-token
    forwards through it, timed together (the prefill's cost, which dwarfs a few steps, stays out of the figure)."""
    cache = _new_cache(model)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    nbytes = _cache_bytes(cache)
    nxt = out.logits[:, -1:].argmax(-1)
    t0 = time.perf_counter()
    for _ in range(tokens):
        nxt = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
    return (time.perf_counter() - t0) / tokens, nbytes


def decode_cost(plan: dict, data_dir: str, teacher_dir: str, seed: int, repeats: int = 3) -> dict:
    """Per-token decoding seconds after a prefill of `context` tokens (the median of `repeats` rounds of
    `decode_tokens` one-token forwards, the models interleaved in each round) and the cache's bytes after the
    prefill, for the softmax teacher (its KV cache) and each linear core (its state) at the same weights."""
    p = LinearizePlan.from_dict(plan)
    split = _split(p, data_dir)
    teacher = load_teacher(teacher_dir)
    models = {"softmax": teacher}
    for a in CORES:
        models[a] = student_of(teacher, arm_config(p, a, "rope", seed)).eval()
    ids = split.val.x.flatten()[: p.context].reshape(1, -1)
    times: dict = {k: [] for k in models}
    nbytes = {}
    with torch.no_grad():
        for _ in range(repeats):
            for name, m in models.items():
                seconds, nbytes[name] = _decode_round(m, ids, p.decode_tokens)
                times[name].append(seconds)
    return {
        "context": p.context,
        "seconds_per_token": {k: statistics.median(v) for k, v in times.items()},
        "cache_bytes": nbytes,
        "threads": torch.get_num_threads(),
    }
