"""The book -> author LM with a fact expert (fact-storing-mlps.txt App. A.3.2-A.3.3): training, fact
accuracy and the non-fact cross-entropy before and after swapping the fact MLP."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from symformer._io import save_atomic
from symformer._rng import resolve_seed, seed_torch, seeded_generator
from symformer._validation import check_device, check_int
from symformer.facts.lm.books import TEMPLATES, BooksTask
from symformer.facts.lm.model import FactRecallConfig, FactRecallTransformer
from symformer.facts.lm.recall import model_device, module_on
from symformer.facts.mse import train_mse_mlp
from symformer.facts.slot import swap_fact_mlp
from symformer.train.checkpoint import CheckpointError, load_loop_state, restore_loop_state


@dataclass
class LMConfig:
    d_model: int = 64
    mlp_hidden: int = 256
    mlp_steps: int = 3000
    steps: int = 1500
    batch_size: int = 128
    lr: float = 2e-3
    seed: int | None = 0
    residual: bool = False  # App. A.3.2: the A.2.2 setup (no residuals) plus MoE and MLP Q/K
    router_top1: bool = False  # top-1 (Switch) routing instead of the soft 2-expert mixture (ours)
    moe_norm: bool = True  # router / language expert behind the frozen pre-MLP norm, like the fact expert


def lm_embeddings(task: BooksTask, d: int, seed: int | None) -> torch.Tensor:
    """Word rows (trainable) and book/author rows uniform on the sphere of radius sqrt(d) (App. A.3.2)."""
    g = seeded_generator(resolve_seed(seed) + 7)
    E = torch.randn(task.vocab_size, d, generator=g)
    return E / E.norm(dim=1, keepdim=True) * math.sqrt(d)


def mlp_for(task: BooksTask, E: torch.Tensor, cfg: LMConfig, seed: int | None = 0):
    """The fact expert: MSE-trained SwiGLU storing book -> author on the tied (normalised) embeddings."""
    nb = len(task.books)
    K = E[task.n_words : task.n_words + nb]
    K = K / K.norm(dim=1, keepdim=True)
    V = E[task.author_slice]
    return train_mse_mlp(K, V, task.facts, cfg.mlp_hidden, steps=cfg.mlp_steps, seed=seed)


def build_lm(task: BooksTask, cfg: LMConfig, device: str = "cpu") -> tuple[FactRecallTransformer, torch.Tensor]:
    """The App. A.3.2 LM with its fact expert, on `device`, and the embeddings E it was built from (on the CPU,
    where the fact MLPs for other facts are trained from them). Drawn and trained on the CPU, then moved, so every
    device starts from the same model."""
    check_device(device)
    E = lm_embeddings(task, cfg.d_model, cfg.seed)
    seed_torch(cfg.seed)
    mcfg = FactRecallConfig(
        vocab_size=task.vocab_size,
        d_model=cfg.d_model,
        residual=cfg.residual,
        qk_mlp=True,
        moe=True,
        router_top1=cfg.router_top1,
        moe_norm=cfg.moe_norm,
    )
    words = torch.zeros(task.vocab_size, dtype=torch.bool)
    words[: task.n_words] = True
    model = FactRecallTransformer(mcfg, E, trainable_tokens=words)
    swap_fact_mlp(model, mlp_for(task, E, cfg, cfg.seed))
    return model.to(device), E


def _targets(tok: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tgt = tok[:, 1:]
    return tgt, mask[:, 1:] & mask[:, :-1]


def train_lm(
    model: FactRecallTransformer,
    task: BooksTask,
    cfg: LMConfig,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 250,
) -> dict:
    """Next-token cross-entropy on every position of S_LM[f], AdamW (App. A.2.2 optimiser). With `checkpoint`
    (a file path) the model, optimiser and batch-sampler states are saved there atomically every
    `checkpoint_every` steps and at the end; a later call on the same freshly built model continues from it
    exactly, so a killed long run (a recorded LM trains for thousands of steps) resumes instead of restarting."""
    check_int("steps", cfg.steps, 1)
    check_int("checkpoint_every", checkpoint_every, 1)
    books, temps = task.all_sequences()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=0.0)
    g = seeded_generator(cfg.seed)
    start, loss, seconds = _resume_lm(checkpoint, model, opt, g, cfg.steps)
    dev = model_device(model)
    t0 = time.perf_counter()

    def save(step: int) -> None:
        if checkpoint is not None:
            save_atomic(
                {
                    "step": step,
                    "loss": loss,
                    "seconds": seconds + time.perf_counter() - t0,
                    "model": model.state_dict(),
                    "opt": opt.state_dict(),
                    "generator": g.get_state(),
                },
                checkpoint,
            )

    for step in range(start, cfg.steps):
        if step > start and step % checkpoint_every == 0:
            save(step)
        idx = torch.randint(len(books), (cfg.batch_size,), generator=g)
        tok, mask, _ = (t.to(dev) for t in task.sequences(books[idx], temps[idx]))  # drawn on the CPU
        tgt, valid = _targets(tok, mask)
        logits = model(tok[:, :-1], mask[:, :-1])
        out = F.cross_entropy(logits[valid], tgt[valid])
        opt.zero_grad()
        out.backward()
        opt.step()
        loss = float(out.detach())
    if start < cfg.steps:
        save(cfg.steps)  # a job killed after training keeps the trained model
    return {"final_loss": loss, "steps": cfg.steps, "seconds": seconds + time.perf_counter() - t0}


def _resume_lm(
    path, model: torch.nn.Module, opt: torch.optim.Optimizer, g: torch.Generator, steps: int
) -> tuple[int, float, float]:
    """(first step, last loss, seconds so far): (0, nan, 0) without a checkpoint file, else what `path` holds,
    loaded into the model, optimiser and generator (weights_only; one-line CheckpointError else)."""
    st = load_loop_state(path, "a fact-LM training checkpoint", ("step", "loss", "seconds"))
    if st is None:
        return 0, float("nan"), 0.0
    if st["step"] > steps:
        raise CheckpointError(f"{path} is not a fact-LM training checkpoint for {steps} steps")
    restore_loop_state(st, model, opt, g)
    return int(st["step"]), float(st["loss"]), float(st["seconds"])


@torch.no_grad()
def lm_eval(
    model: FactRecallTransformer,
    task: BooksTask,
    books: torch.Tensor | None = None,
    templates: torch.Tensor | None = None,
    batch: int = 1024,
    gates: bool = False,
) -> dict:
    """Fact accuracy (argmax over the whole vocabulary at the author position) and the mean cross-entropy
    on non-fact targets (template words; the book and author targets are fact tokens), also split into
    targets predicted before the book token is read and from it on (and, with `gates`, the router's mean
    fact-expert gate at the positions predicting them)."""
    if books is None:
        books, templates = task.all_sequences()
    hits, sums = 0, {"all": [0.0, 0], "before_key": [0.0, 0], "from_key": [0.0, 0]}
    gate_sum = 0.0
    lo_fact, dev = task.n_words, model_device(model)
    for s in range(0, len(books), batch):
        tok, mask, pos = (t.to(dev) for t in task.sequences(books[s : s + batch], templates[s : s + batch]))
        tgt, valid = _targets(tok, mask)
        logits = model(tok[:, :-1], mask[:, :-1])
        pred = logits[torch.arange(len(tok), device=dev), pos].argmax(-1)
        hits += int((pred == tok[:, -1]).sum())
        nonfact = valid & (tgt < lo_fact)
        ce = F.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")
        seen_key = torch.cumsum((tok[:, :-1] >= lo_fact).long(), 1) > 0
        for name, sel in (("all", nonfact), ("before_key", nonfact & ~seen_key), ("from_key", nonfact & seen_key)):
            sums[name][0] += float(ce[sel].sum())
            sums[name][1] += int(sel.sum())
        if gates and model.cfg.moe:
            gate_sum += float(model.fact_gate(tok[:, :-1], mask[:, :-1])[nonfact].sum())
    ce = {k: v[0] / max(v[1], 1) for k, v in sums.items()}
    return {
        "fact_accuracy": hits / len(books),
        "nonfact_ce": ce["all"],
        "nonfact_ce_before_key": ce["before_key"],
        "nonfact_ce_from_key": ce["from_key"],
        "nonfact_fact_gate": gate_sum / max(sums["all"][1], 1),
    }


def swap_check(
    model: FactRecallTransformer, task: BooksTask, E: torch.Tensor, cfg: LMConfig, seed: int | None = 1
) -> dict:
    """App. A.3.3 / Fig. 9b: swap in an MLP storing a different book -> author map; accuracy on the new facts
    and the relative change of the non-fact cross-entropy."""
    before = lm_eval(model, task, gates=True)
    seed = resolve_seed(seed)  # one integer for the new facts and the new MLP
    g = seeded_generator(10_000 + seed)
    new_task = task.with_facts(torch.randperm(len(task.books), generator=g))
    new_mlp = mlp_for(new_task, E, cfg, seed)  # trained on the CPU, run on the model's device
    old = model.fact.swap(module_on(new_mlp, model_device(model)))
    try:
        after = lm_eval(model, new_task)
    finally:
        model.fact.swap(old)
    return {
        "train_fact_accuracy": before["fact_accuracy"],
        "nonfact_ce_before": before["nonfact_ce"],
        "new_fact_accuracy": after["fact_accuracy"],
        "nonfact_ce_after": after["nonfact_ce"],
        "nonfact_ce_change_pct": 100 * (after["nonfact_ce"] / before["nonfact_ce"] - 1),
        "nonfact_ce_parts": {
            k: [before[f"nonfact_ce_{k}"], after[f"nonfact_ce_{k}"]] for k in ("before_key", "from_key")
        },
        "nonfact_fact_gate": before["nonfact_fact_gate"],
        "new_mlp_capacity": new_mlp.accuracy,
        "n_templates": len(TEMPLATES),
    }
