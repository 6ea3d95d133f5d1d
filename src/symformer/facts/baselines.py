"""Baselines (App. A.1.3, B.3.1): naive, NTK (Nichani et al., Alg. 5), gradient-trained MLPs, GD encoder."""

from __future__ import annotations

import math
import os

import torch

from symformer._io import save_atomic
from symformer._rng import generator, seed_torch
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.data.files import DataFileError, torch_load
from symformer.facts.decodability import Decodability, require_vertices
from symformer.facts.dot_ce import dot_product_cross_entropy
from symformer.facts.embeddings import validate_fact_set
from symformer.facts.mlp import FactMLP


def naive_mlp(
    keys: torch.Tensor, values: torch.Tensor, facts: torch.Tensor, info: Decodability | None = None
) -> FactMLP:
    """App. B.3.1: g(x) = W ReLU(K x - b), hidden |K|, Theta(d |K|) parameters. b_j in (beta_j, alpha_j)
    with alpha_j = |k_j|^2, beta_j = max_{i != j} <k_j, k_i>; column j of W = u*_{f(j)} / (alpha_j - b_j)."""
    validate_fact_set(keys, values, facts)
    K = keys.double()
    n, d = K.shape
    gram = K @ K.T
    alpha = gram.diagonal().clone()
    beta = gram.fill_diagonal_(float("-inf")).max(1).values if n > 1 else alpha - 1
    if bool((alpha <= beta).any()):
        bad = (alpha <= beta).nonzero().flatten()[:10].tolist()
        fail(
            "keys",
            f"keys {bad} with <k_j, k_i> >= |k_j|^2 for some i != j",
            "keys that each have the largest inner product with themselves (general position for the naive MLP)",
        )
    b = 0.5 * (alpha + beta)
    U = require_vertices(values, info).U.double()
    mlp = FactMLP(d, n, activation="relu", gated=False, bias=True)
    with torch.no_grad():
        mlp.up.weight.copy_(K)
        mlp.up.bias.copy_(-b)
        mlp.down.weight.copy_((U[facts] / (alpha - b)[:, None]).T)
    return mlp


#: most Hermite features (rows x h) ntk_mlp forms at once
NTK_BLOCK = 1 << 24


def hermite(z: torch.Tensor, k: int) -> torch.Tensor:
    """Normalised probabilists' Hermite polynomial He_k(z) / sqrt(k!) by the three-term recurrence."""
    h0, h1 = torch.ones_like(z), z
    if k == 0:
        return h0
    for n in range(1, k):
        h0, h1 = h1, z * h1 - n * h0
    return h1 / math.sqrt(math.factorial(k))


def ntk_mlp(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    h: int,
    degree: int = 2,
    margin_optimal: bool = False,
    activation: str = "silu",
    seed: int | None = 0,
    info: Decodability | None = None,
) -> FactMLP:
    """Alg. 5 (the gated form of Nichani et al.): g(x) = P (sigma(W_gate x) * (W_up x)),
    W_up = (1/h) (H * (Y P))^T K with Hermite features H = He_k(K W_gate^T); optional Y = U*[f]."""
    validate_fact_set(keys, values, facts)
    check_int("h", h, 1)
    check_int("degree", degree, 0)
    K = keys.double()
    n, d = K.shape
    g = generator("ntk", seed)  # not the data's stream: with manual_seed(seed) W_gate was make_ssfr(seed)'s keys
    W_gate = torch.randn(h, d, generator=g, dtype=torch.float64)
    P = torch.randn(d, h, generator=g, dtype=torch.float64)
    P = P / P.norm(dim=0, keepdim=True)
    Y = (require_vertices(values, info).U.double() if margin_optimal else values.double())[facts]
    # W_up = (1/h) sum_i (H_i * (Y_i P))^T k_i over row blocks of <= 2^24 Hermite features: the whole (F, h)
    # matrix and its temporaries would take ~20 GB at F = 4096, h = 131,072 (the fact-recall NTK search's cap)
    rows = max(1, NTK_BLOCK // h)
    W_up = torch.zeros(h, d, dtype=torch.float64)
    for s in range(0, n, rows):
        Kb = K[s : s + rows]
        W_up.addmm_((hermite(Kb @ W_gate.T, degree) * (Y[s : s + rows] @ P)).T, Kb)
    W_up /= h
    mlp = FactMLP(d, h, activation=activation, gated=True)
    with torch.no_grad():
        mlp.gate.weight.copy_(W_gate)
        mlp.up.weight.copy_(W_up)
        mlp.down.weight.copy_(P)
    return mlp


def train_mlp(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    h: int,
    activation: str = "silu",
    max_epochs: int = 20000,
    lr: float = 1e-3,
    final_lr: float = 1e-6,
    seed: int | None = 0,
    dtype: torch.dtype = torch.float32,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 500,
    bias: bool = True,
    loss_cutoff: float | None = None,
) -> FactMLP:
    """GD MLP (App. A.1.3): SwiGLU (activation "silu") or a plain ReLU MLP (activation "relu", the paper's
    ReLU fact MLPs of Sec. 5) with biases, cross-entropy on g(K) V^T, full-batch Adam, cosine lr -> final_lr
    over max_epochs, stopped at the first epoch that starts with every fact stored (the paper's "early
    stopping"; the fused loss counts stored facts every epoch at no cost). With `checkpoint` (a file path) the
    state is saved there atomically every `checkpoint_every` epochs and a later call continues from it exactly
    (an F = 4096 MLP that never stores runs all 20,000 epochs: ~1 h on one core).

    The authors' protocol (their `mlp_core/mlp_gd.py` and `gd_training.py`, the `gd` method of their capacity
    sweep): activation "linear" (a bilinear gated MLP), bias=False, max_epochs=10000 and loss_cutoff=1e-7, which
    trains every epoch until the loss falls to the cutoff and leaves the accuracy to be read after the last one."""
    validate_fact_set(keys, values, facts)
    check_int("h", h, 1)
    check_choice("activation", activation, ("silu", "relu", "linear"))
    check_int("max_epochs", max_epochs, 1)
    check_float("lr", lr, 0.0, low_open=True)
    check_int("checkpoint_every", checkpoint_every, 1)
    seed_torch(seed)
    d = keys.shape[1]
    gated = activation != "relu"
    mlp = FactMLP(d, h, activation=activation, gated=gated, bias=bias, out_bias=bias, dtype=dtype)
    K, V = keys.to(dtype), values.to(dtype)
    opt = torch.optim.Adam(mlp.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max_epochs, eta_min=final_lr)
    parts = {"mlp": mlp, "opt": opt, "sched": sched}
    start = _load_training(checkpoint, parts)
    for epoch in range(start, max_epochs):
        if checkpoint is not None and epoch > start and epoch % checkpoint_every == 0:
            save_atomic({"epoch": epoch, **{k: v.state_dict() for k, v in parts.items()}}, checkpoint)
        opt.zero_grad()
        loss, stored = dot_product_cross_entropy(mlp.down(mlp.hidden(K)), V, facts, check=False)  # checked above
        if loss_cutoff is None and int(stored) == len(facts):
            break
        loss.backward()
        opt.step()
        sched.step()
        if loss_cutoff is not None and float(loss.detach()) <= loss_cutoff:
            break  # their stop: the loss before this epoch's step at or below the cutoff
    return mlp


def _load_training(path: str | os.PathLike | None, parts: dict) -> int:
    """The epoch to start from: 0, or the one saved in `path` after loading its states into `parts` (a file
    train_mlp wrote; loaded with weights_only=True, so it can hold nothing but tensors and numbers; a file that
    is not one is a one-line DataFileError naming it)."""
    if path is None or not os.path.exists(path):
        return 0
    state = torch_load(path, "a GD fact-MLP training checkpoint")
    if not isinstance(state, dict) or not {"epoch", *parts} <= set(state):
        raise DataFileError(f"{path} is not a GD fact-MLP training checkpoint (no {', '.join(['epoch', *parts])})")
    for k, v in parts.items():
        v.load_state_dict(state[k])
    return int(state["epoch"])


def gd_encoder(
    keys: torch.Tensor,
    codes: torch.Tensor,
    h: int,
    steps: int = 1000,
    lr: float = 1e-2,
    key_noise: float = 1e-7,
    seed: int | None = 0,
    dtype: torch.dtype = torch.float32,
) -> FactMLP:
    """GD encoder (App. A.1.3): gated MLP R^d -> R^m with a dense E (m x h), MSE to the codes with key
    noise 1e-7, Adam lr 1e-2, 1000 steps. Returned with D = 0 (attach a decoder)."""
    check_int("h", h, 1)
    check_int("steps", steps, 1)
    seed_torch(seed)
    n, d = keys.shape
    m = codes.shape[1]
    enc = FactMLP(d, h, activation="silu", gated=True, bias=True, m=m, dense_codes=True, code_bias=True, dtype=dtype)
    with torch.no_grad():
        enc.down.E.normal_(0, 1 / math.sqrt(h))
    params = [p for n_, p in enc.named_parameters() if not n_.endswith(".D")]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.01)
    K, T = keys.to(dtype), codes.to(dtype)
    scale = float(T.pow(2).mean().sqrt().clamp_min(1e-30))
    for _ in range(steps):
        opt.zero_grad()
        out = enc.down.codes(enc.hidden(K + key_noise * torch.randn_like(K)))
        (((out - T) / scale).pow(2).sum(1).mean()).backward()
        opt.step()
        sched.step()
    return enc
