"""Training and evaluation loops for the fact-recall transformer on SSFR (App. A.2.2)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from symformer._io import save_atomic
from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_device, check_float, check_int, fail
from symformer.facts.lm.model import FactRecallConfig, FactRecallTransformer, SphereNorm
from symformer.facts.lm.ssfr import SSFRTask
from symformer.facts.mlp import capped_batch
from symformer.facts.slot import check_fact_mlp, swap_fact_mlp
from symformer.train.checkpoint import load_loop_state, restore_loop_state


@dataclass
class SSFRTrainConfig:
    steps: int = 2000
    batch_size: int = 256
    lr: float = 2e-4  # App. A.2.2: AdamW, lr 2e-4 (4.8M sequences or until convergence)
    weight_decay: float = 0.0
    seed: int | None = 0
    stop_accuracy: float = 1.0  # stop early once a whole-task evaluation reaches this
    eval_every: int = 250


def model_device(model: FactRecallTransformer) -> torch.device:
    """Where `model` runs: the SSFR and LM batches are drawn on the CPU (seeded generators) and moved there."""
    return model.emb.device


def module_on(module: nn.Module, device: torch.device | str) -> nn.Module:
    """`module` itself where it is on `device` already (the CPU path is unchanged), else a copy moved there: a fact
    MLP built on the CPU is swapped into a model on another device without moving the caller's MLP."""
    p = next(module.parameters(), None)
    if p is None or p.device == torch.device(device):
        return module
    return copy.deepcopy(module).to(device)


def build_recall_model(
    task: SSFRTask, mlp: nn.Module, seed: int | None = 0, train_junk: bool = True, device: str = "cpu", **switches
) -> FactRecallTransformer:
    """The Sec. 5.1 transformer on the task's embeddings with `mlp` in its slot, on `device`. App. A.2.2 freezes
    the key and value embeddings; the junk rows are trained (`train_junk`, as the text leaves only those frozen).
    The weights are drawn on the CPU and then moved, so every device starts from the same model."""
    check_device(device)
    seed_torch(seed)
    cfg = FactRecallConfig(vocab_size=task.vocab_size, d_model=task.d, **switches)
    junk = torch.arange(task.vocab_size) >= task.n_keys + task.n_values
    model = FactRecallTransformer(cfg, task.embeddings, trainable_tokens=junk if train_junk else None).to(device)
    swap_fact_mlp(model, module_on(mlp, device))
    return model


def value_logits(model: FactRecallTransformer, task: SSFRTask, tok: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits of the value tokens at the last position. Reading: a fact MLP stores f only among the values
    (eq. 1), so the prediction is decoded among the value tokens (the paper does not say)."""
    return model(tok, mask, last_only=True)[:, task.value_slice]


@torch.no_grad()
def ssfr_accuracy(model: FactRecallTransformer, task: SSFRTask, batch: int = 2048) -> float:
    """Accuracy over every sequence of SSFR[f] (all keys x all junk pairs), argmax over the values, in
    batches capped by the fact MLP's width (`capped_batch`)."""
    batch = capped_batch(model.fact.mlp, batch)
    keys, pairs = task.all_pairs()
    hits, dev = 0, model_device(model)
    for s in range(0, len(keys), batch):
        tok, mask, tgt = (t.to(dev) for t in task.batch(keys[s : s + batch], pairs[s : s + batch]))
        hits += int((value_logits(model, task, tok, mask).argmax(-1) == tgt).sum())
    return hits / len(keys)


def train_ssfr(
    model: FactRecallTransformer, task: SSFRTask, cfg: SSFRTrainConfig, checkpoint: str | os.PathLike | None = None
) -> dict:
    """AdamW on next-value cross-entropy at the last position; the fact MLP and embeddings stay frozen.
    With `checkpoint` (a file path) the state is saved there atomically at every evaluation and a later call
    continues from it exactly, so a killed long run (thousands of steps at F = 4096) resumes instead of restarting."""
    check_int("steps", cfg.steps, 1)
    check_int("batch_size", cfg.batch_size, 1)
    check_float("lr", cfg.lr, 0.0, low_open=True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    g = seeded_generator(cfg.seed)
    acc, done, loss, dev = float("nan"), 0, float("nan"), model_device(model)
    st = load_loop_state(checkpoint, "an SSFR training checkpoint", ("step", "acc", "loss"))  # weights_only
    if st is not None:
        restore_loop_state(st, model, opt, g)
        done, acc, loss = int(st["step"]), float(st["acc"]), float(st["loss"])
    step = done
    for step in range(done + 1, cfg.steps + 1):
        tok, mask, tgt = (t.to(dev) for t in task.sample(cfg.batch_size, g))  # drawn on the CPU, as recorded
        out = F.cross_entropy(value_logits(model, task, tok, mask), tgt)
        opt.zero_grad()
        out.backward()
        opt.step()
        loss = float(out.detach())
        if step % cfg.eval_every == 0 or step == cfg.steps:
            acc = ssfr_accuracy(model, task)
            if acc >= cfg.stop_accuracy:
                break
            if checkpoint is not None:
                save_atomic(
                    {
                        "step": step,
                        "acc": acc,
                        "loss": loss,
                        "model": model.state_dict(),
                        "opt": opt.state_dict(),
                        "generator": g.get_state(),
                    },
                    checkpoint,
                )
    return {"steps": step, "train_accuracy": acc, "final_loss": loss, "sequences": step * cfg.batch_size}


def fact_adaptive_accuracy(model: FactRecallTransformer, task_new: SSFRTask, mlp_new: nn.Module) -> float:
    """Sec. 5.1: swap in an MLP storing f' and measure accuracy on SSFR[f'] (the model is not changed); the MLP
    runs on the model's device (a copy where it was built elsewhere)."""
    old = model.fact.swap(module_on(mlp_new, model_device(model)))
    try:
        return ssfr_accuracy(model, task_new)
    finally:
        model.fact.swap(old)


def lipschitz_estimate(
    mlp: nn.Module, keys: torch.Tensor, values: torch.Tensor, n: int = 100, seed: int | None = 0
) -> float:
    """Eq. (8): max over n random keys k_i of sigma_1(J(k_i)), J = d V^T MLP(norm(x)) / dx at x = k_i, with the
    frozen pre-MLP norm (projection to the sphere, App. A.2.5: 100 samples), on the MLP's device (the recall
    experiment's MLPs are built, and so measured, on the CPU)."""
    norm = SphereNorm()
    dev = next(mlp.parameters()).device
    V = values.to(device=dev, dtype=mlp.dtype)
    g = seeded_generator(seed)
    idx = torch.randperm(keys.shape[0], generator=g)[:n]

    X = keys[idx].to(device=dev, dtype=mlp.dtype).clone().requires_grad_(True)
    with torch.enable_grad():
        out = mlp(norm(X))  # (n, d); key i only moves row i
        # row j of every key's Jacobian d MLP(norm(x))/dx at once: d backward passes over the batch
        rows = [torch.autograd.grad(out[:, j].sum(), X, retain_graph=True)[0] for j in range(out.shape[1])]
    J = V @ torch.stack(rows, 1)  # (n, |V|, d) = V^T dMLP/dx per key
    best = float(torch.linalg.matrix_norm(J.detach(), ord=2).max())
    return best


def _decode(model: FactRecallTransformer, task: SSFRTask, mlp: nn.Module, u: torch.Tensor, batch: int) -> torch.Tensor:
    """Value predictions of `mlp` on MLP inputs u (N, d), read out as the model does (tied values, argmax)."""
    old = model.fact.swap(module_on(mlp, u.device))
    try:
        step = capped_batch(mlp, batch)
        return torch.cat(
            [model.logits(model.fact(u[s : s + step]))[:, task.value_slice].argmax(-1) for s in range(0, len(u), step)]
        )
    finally:
        model.fact.swap(old)


@torch.no_grad()
def swap_diagnostics(
    model: FactRecallTransformer,
    task: SSFRTask,
    task_new: SSFRTask,
    mlp_new: nn.Module,
    batch: int = 2048,
    seed: int | None = 0,
) -> dict:
    """Where a swap (Sec. 5.1) loses accuracy, over every sequence of SSFR[f'] (`task_new`; `task` holds the f the
    model was trained with, its MLP in the slot). With the four changes the MLP reads u = norm(sum_j a_j x_j), the
    read-out position's attention-weighted mix of embeddings. Returns key_attention (mean a_j on the key token),
    key_cosine (mean cosine of u with the key's MLP embedding), and the accuracy of the model's MLP on f and of
    mlp_new on f' on those inputs (own_on_inputs = own recall, new_on_inputs = fact-adaptive accuracy) and on
    inputs whose off-key part u - (u.k)k moved to another sequence by a fixed shuffle (same size, no longer matched
    to the key: own_on_shuffled, new_on_shuffled). An own MLP that loses accuracy under the shuffle where the new
    one does not was read through off-key inputs adapted to it key by key."""
    if not isinstance(model, FactRecallTransformer):
        fail("model", type(model).__name__, "a FactRecallTransformer", TypeError)
    for name, t in (("task", task), ("task_new", task_new)):
        if not isinstance(t, SSFRTask):
            fail(name, type(t).__name__, "an SSFRTask", TypeError)
    if task_new.n_keys != task.n_keys or not torch.equal(task_new.embeddings, task.embeddings):
        fail(
            "task_new",
            f"a task with {task_new.n_keys} keys and other embeddings",
            f"task with other facts (task.with_facts(f'): the same {task.n_keys} keys, values and junk)",
        )
    check_fact_mlp(mlp_new, model.cfg.d_model, "mlp_new")
    cfg = model.cfg
    if cfg.residual or cfg.moe or not cfg.identity_vo or not cfg.frozen_norm:
        fail(
            "model",
            "a FactRecallTransformer with residuals, an MoE, or trainable V / O or norm",
            "the four changes of Sec. 5.1 (the MLP reads norm(sum_j a_j x_j))",
        )
    keys, pairs = task_new.all_pairs()
    u, a_key, dev = [], [], model_device(model)
    for s in range(0, len(keys), batch):
        tok, mask, _ = (t.to(dev) for t in task_new.batch(keys[s : s + batch], pairs[s : s + batch]))
        a_key.append((model.attention_weights(tok, mask) * ((tok < task_new.n_keys) & mask)).sum(-1))
        u.append(model.mlp_norm(model.attend(F.embedding(tok, model.embedding_table()), mask, True)[:, -1]))
    u, a_key = torch.cat(u), torch.cat(a_key)
    k = task_new.mlp_embeddings()[0][keys].to(device=dev, dtype=u.dtype)
    c = (u * k).sum(-1, keepdim=True)
    perm = torch.randperm(len(u), generator=seeded_generator(seed)).to(dev)
    shuffled = c * k + (u - c * k)[perm]
    shuffled = shuffled / shuffled.norm(dim=-1, keepdim=True)
    out = {"key_attention": float(a_key.mean()), "key_cosine": float(c.mean())}
    for name, mlp, facts in (("own", model.fact.mlp, task.facts), ("new", mlp_new, task_new.facts)):
        for tag, inp in (("inputs", u), ("shuffled", shuffled)):
            hit = _decode(model, task, mlp, inp, batch) == facts[keys].to(dev)
            out[f"{name}_on_{tag}"] = float(hit.float().mean())
    return out
