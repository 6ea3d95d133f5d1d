"""One 16-bit training step against the float32 step, for the `precision` experiment and the tests.

A tiny causal LM (d_model 32, 2 heads, 1 layer, vocabulary 64, 64 tokens) of every positional x attention
combination takes one forward + backward on one batch from one init, in float32 and in bfloat16 by one of two
routes a user takes:
  * "autocast": float32 weights, the step under `torch.autocast("cpu", dtype=torch.bfloat16)`;
  * "cast": the model cast with `.to(torch.bfloat16)` (its parts keep what must stay float32).
The loss is the cross-entropy of the logits in float32 (as `train.tasks.LanguageModeling` computes it), so the
comparison measures the model's 16-bit arithmetic, not a 16-bit log-sum-exp over the vocabulary.

At the default init the logits are nearly uniform (loss ~ log 64 whatever the layers compute), so a 2% bound on the
loss would hide errors inside the layers. The head and the query/key projections are scaled up (HEAD_GAIN, QK_GAIN)
so that the logits spread over a few nats and the attention is sharp: the loss then depends on the positions and on
the attention weights, and a part that rounds them moves it.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

import symformer.attention  # noqa: F401  (registers the parts)
import symformer.positional  # noqa: F401
from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_choice, check_int
from symformer.models import CausalLM, TransformerConfig
from symformer.registry import POSITIONAL


def positionals() -> tuple[str, ...]:
    """Every registered positional part, in registration order (read from the registry when called)."""
    return tuple(POSITIONAL.registered())


POSITIONALS = positionals()  # the parts registered with symformer.positional
# issue 40's three attention kinds, named on purpose: exact softmax and the two approximations of the papers
ATTENTIONS = ("softmax", "favor", "plash")


def train_combinations() -> tuple[tuple[str, str], ...]:
    """Every (positional, attention) pair of symformer's own models that the precision experiment trains."""
    return tuple((p, a) for p in positionals() for a in ATTENTIONS)


TRAIN_COMBINATIONS: tuple[tuple[str, str], ...] = train_combinations()
ROUTES = ("autocast", "cast")

D_MODEL, N_HEADS, VOCAB, SEQ, BATCH = 32, 2, 64, 64, 2
HEAD_GAIN, QK_GAIN = 4.0, 2.0


def tiny_lm(positional: str, attention: str, seed: int = 0) -> CausalLM:
    """The float32 model of one combination, its init fixed by `seed` (global RNG state restored after)."""
    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        cfg = TransformerConfig(
            d_model=D_MODEL, n_heads=N_HEADS, n_layers=1, positional=positional, attention=attention, max_len=SEQ
        )
        model = CausalLM(cfg, VOCAB).to(torch.float32)
    with torch.no_grad():
        model.head.weight.mul_(HEAD_GAIN)
        for blk in model.encoder.blocks:
            blk.attn.q_proj.weight.mul_(QK_GAIN)
            blk.attn.k_proj.weight.mul_(QK_GAIN)
    return model


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) token ids (BATCH, SEQ): a random sequence shifted by one."""
    g = seeded_generator(10_000 + seed)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return idx[:, :-1], idx[:, 1:]


def step(model: CausalLM, x: torch.Tensor, y: torch.Tensor, route: str | None) -> tuple[float, list[torch.Tensor]]:
    """One forward + backward; (loss, gradients in float32, parameter order). route None: plain (float32)."""
    model.train()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=route == "autocast"):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    grads = [torch.zeros(p.shape) if p.grad is None else p.grad.float() for p in model.parameters()]
    return float(loss.detach()), grads


def train_step_comparison(positional: str, attention: str, route: str, seed: int = 0) -> dict:
    """One bfloat16 training step by `route` ("autocast" | "cast") against the float32 step on the same batch and
    init: {"loss_rel_diff": |loss16 - loss32| / |loss32|, "finite": loss and every gradient finite, "loss32",
    "loss16", "grad_rel_err": ||grad16 - grad32|| / ||grad32|| over all parameters}."""
    check_choice("positional", positional, positionals())
    check_choice("attention", attention, ATTENTIONS)
    check_choice("route", route, ROUTES)
    check_int("seed", seed, 0)
    model32 = tiny_lm(positional, attention, seed)
    model16 = copy.deepcopy(model32)
    if route == "cast":
        model16 = model16.to(torch.bfloat16)
    x, y = batch(seed)
    loss32, g32 = step(model32, x, y, None)
    loss16, g16 = step(model16, x, y, route)
    finite = math.isfinite(loss16) and all(bool(torch.isfinite(g).all()) for g in g16)
    num = math.sqrt(sum(float((a - b).double().pow(2).sum()) for a, b in zip(g16, g32, strict=True)))
    den = math.sqrt(sum(float(b.double().pow(2).sum()) for b in g32))
    return {
        "loss_rel_diff": abs(loss16 - loss32) / abs(loss32),
        "finite": finite,
        "loss32": loss32,
        "loss16": loss16,
        "grad_rel_err": num / den if den > 0 else math.inf,
    }
