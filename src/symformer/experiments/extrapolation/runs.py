"""The recorded runs of experiment `extrapolation`: one character LM per (part, seed), trained at the training
context on `device` and scored at every evaluation context."""

from __future__ import annotations

import math
import time

import torch

from symformer._rng import seed_torch
from symformer._validation import check_int, fail
from symformer.data import load_char_text
from symformer.experiments.extrapolation.plan import ExtrapolationConfig, check_length
from symformer.models import TransformerConfig
from symformer.models.lm import CausalLM
from symformer.positional.absolute import LearnedPE
from symformer.runner.devices import tensor_data_on
from symformer.runner.jobs import JobFunction
from symformer.train import TrainConfig, Trainer
from symformer.train.tasks import LanguageModeling


def max_context(model) -> int | None:
    """Longest context a model's positional part supports: a learned table's max_len, else None (no limit)."""
    tables = [m.max_len for m in model.modules() if isinstance(m, LearnedPE)]
    return min(tables) if tables else None


def check_context(model, context) -> int:
    """ValueError naming both lengths when `context` exceeds what the model's positional part supports."""
    check_length("context", context)
    limit = max_context(model)
    if limit is not None and context > limit:
        fail(
            "context",
            context,
            f"at most {limit} (the learned positional table has max_len={limit} positions; "
            "a longer context would index past it)",
        )
    return context


@torch.no_grad()
def context_bpc(model, ids: torch.Tensor, context: int, n_chars: int, batch: int = 16) -> float:
    """Bits per character predicting ids[1 : n_chars + 1] in non-overlapping windows of `context` tokens."""
    check_context(model, context)
    check_int("n_chars", n_chars, 1)
    if n_chars % context or n_chars + 1 > len(ids):
        fail("n_chars", n_chars, f"a multiple of context={context} with n_chars + 1 <= {len(ids)} characters")
    x = ids[:n_chars].reshape(-1, context)
    y = ids[1 : n_chars + 1].reshape(-1, context)
    model.eval()
    nats = 0.0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        nats += float(
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y[i : i + batch].reshape(-1), reduction="sum"
            )
        )
    return nats / n_chars / math.log(2)


def validation_ids(val) -> torch.Tensor:
    """The contiguous validation characters behind load_char_text's non-overlapping windows."""
    return torch.cat([val.x.reshape(-1), val.y[-1, -1:]])


def build_lm(part: str, cfg: ExtrapolationConfig, vocab_size: int):
    kw = {"d_act": cfg.d_model // cfg.n_heads - 4} if part == "espr" else {}  # 4 null coordinates for mixing
    if part in ("string", "espr"):
        kw["pairing"] = "interleaved"  # the recorded runs' pairing (the parts default to "half")
    tc = TransformerConfig(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        positional=part,
        positional_kwargs=kw,
        max_len=cfg.train_context,
    )  # learned table = training context
    return CausalLM(tc, vocab_size)


def lm_job(part: str, seed: int, cfg: dict, data_dir: str | None = None, device: str = "cpu") -> dict:
    """One recorded run: train at the training context on `device`, then bpc at every evaluation context (None +
    reason where the part cannot go)."""
    c = ExtrapolationConfig.from_dict(cfg)
    split = load_char_text(block=c.train_context, data_dir=data_dir)
    spe = len(split.train) // c.batch
    tc = TrainConfig(
        epochs=-(-c.steps // spe),
        batch_size=c.batch,
        optimizer="adamw",
        lr=c.lr,
        weight_decay=0.01,
        schedule="cosine",
        warmup_steps=max(1, c.steps // 20),
        grad_clip=1.0,
        seed=seed,
        max_steps=c.steps,
        eval_batch_size=256,
    )
    seed_torch(seed)
    model = build_lm(part, c, split.meta["vocab_size"]).to(device)
    t0 = time.perf_counter()
    Trainer(model, LanguageModeling(), tensor_data_on(split.train, device), None, tc).fit()
    train_s = time.perf_counter() - t0
    ids = validation_ids(split.val).to(device)
    longest = max(c.eval_contexts)
    avail = len(ids) - 1 if c.eval_chars is None else min(c.eval_chars, len(ids) - 1)
    n_chars = avail // longest * longest
    bpc, na = {}, {}
    for ctx_len in c.eval_contexts:
        try:
            bpc[str(ctx_len)] = context_bpc(model, ids, ctx_len, n_chars)
        except ValueError as e:  # a learned table cannot index past its size: N/A with the reason
            bpc[str(ctx_len)], na[str(ctx_len)] = None, str(e)
    return {
        "part": part,
        "seed": seed,
        "bpc": bpc,
        "na": na,
        "n_chars": n_chars,
        "train_seconds": train_s,
        "seconds": time.perf_counter() - t0,
    }


# the name the recorded runs carry (results/extrapolation/runs); --resume matches records by it, whatever module
# holds lm_job
LM_JOB = JobFunction(lm_job, "symformer.experiments.extrapolation.lm_job")
