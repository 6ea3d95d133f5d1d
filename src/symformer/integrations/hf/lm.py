"""A tiny config-built Llama character LM and a plain training loop, shared by examples/hf_llama_string.py,
experiment `hf` and the `positional` bench rows. Nothing is downloaded: the model comes from a LlamaConfig and
the vocabulary is the characters of the text (symformer.data.load_char_text)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_int
from symformer.integrations.hf._common import require_transformers
from symformer.integrations.hf.positional import patch_positional


@dataclass(frozen=True)
class TinyLlama:
    """About 2M parameters at the defaults (hidden 192, 4 layers, 6 query heads of Dh 32 over 2 key heads)."""

    hidden_size: int = 192
    n_layers: int = 4
    n_heads: int = 6
    n_kv_heads: int = 2
    intermediate_size: int = 512
    max_len: int = 256
    rope_theta: float = 10000.0


def tiny_llama(
    vocab_size: int,
    spec: TinyLlama = TinyLlama(),
    positional: str | None = None,
    seed: int = 0,
    attn_implementation: str = "sdpa",
    **options,
):
    """LlamaForCausalLM(LlamaConfig(...)) with native RoPE, or patched with a symformer `positional` part."""
    tf = require_transformers()
    cfg = tf.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        max_position_embeddings=spec.max_len,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        attn_implementation=attn_implementation,
        bos_token_id=None,
        eos_token_id=None,
    )
    seed_torch(seed)
    model = tf.LlamaForCausalLM(cfg)
    return model if positional in (None, "native") else patch_positional(model, positional, **options)


def lm_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Next-character cross-entropy (y is x shifted by one, as symformer.data's windows give it)."""
    logits = model(input_ids=x).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


@torch.no_grad()
def evaluate(model, data, batch_size: int = 32, max_batches: int | None = None, loss_fn=None) -> float:
    """Mean validation cross-entropy (nats per character) over the first `max_batches` batches; loss_fn(model, x, y)
    in place of lm_loss for a model without HF's call convention (a symformer CausalLM)."""
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for i, s in enumerate(range(0, len(data), batch_size)):
        if max_batches is not None and i >= max_batches:
            break
        x, y = data.x[s : s + batch_size], data.y[s : s + batch_size]
        tot += float((loss_fn or lm_loss)(model, x, y)) * len(x)
        n += len(x)
    model.train(was)
    return tot / max(n, 1)


@dataclass
class Curve:
    steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_lm(
    model,
    split,
    steps: int,
    batch_size: int = 16,
    lr: float = 3e-3,
    eval_every: int = 50,
    eval_batches: int | None = 8,
    seed: int = 0,
    on_after_backward=None,
) -> Curve:
    """AdamW with linear warm-up (10% of steps) then cosine decay; a validation point every `eval_every` steps
    and at the end. on_after_backward(step, (x, y), loss) runs between backward and the optimizer step."""
    check_int("steps", steps, 1)
    check_int("eval_every", eval_every, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    g = seeded_generator(seed)
    curve, t0 = Curve(), time.perf_counter()
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(split.train), (batch_size,), generator=g)
        x, y = split.train.x[idx], split.train.y[idx]
        loss = lm_loss(model, x, y)
        loss.backward()
        if on_after_backward is not None:
            on_after_backward(step, (x, y), loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            curve.steps.append(step + 1)
            curve.train_loss.append(float(loss.detach()))
            curve.val_loss.append(evaluate(model, split.val, batch_size=32, max_batches=eval_batches))
    curve.seconds = time.perf_counter() - t0
    return curve


def n_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["TinyLlama", "tiny_llama", "lm_loss", "evaluate", "train_lm", "Curve", "n_parameters"]
