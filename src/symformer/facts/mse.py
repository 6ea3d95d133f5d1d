"""GD fact MLPs trained with MSE to the value embeddings (fact-storing-mlps.txt App. A.3.2: the LM's fact
expert is trained to minimise sum_i ||MLP(k_i) - v_f(i)||^2 and must store f under argmax decoding)."""

from __future__ import annotations

import torch

from symformer._rng import seed_torch
from symformer._validation import check_float, check_int
from symformer.facts.embeddings import validate_fact_set
from symformer.facts.mlp import FactMLP, fact_accuracy


def train_mse_mlp(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    h: int,
    steps: int = 3000,
    lr: float = 1e-2,
    final_lr: float = 1e-4,
    seed: int | None = 0,
    stop_when_stored: bool = False,
    check_every: int = 100,
    dtype: torch.dtype = torch.float32,
) -> FactMLP:
    """SwiGLU MLP (biases, dense down-projection) by full-batch Adam on the MSE, cosine lr -> final_lr
    (with `stop_when_stored`, stops once every fact decodes; by default runs every step, since outputs
    near v_f(i), not just the argmax, are what the transformer reads). `.accuracy` holds the fraction of facts
    stored (eq. 1)."""
    validate_fact_set(keys, values, facts)
    check_int("h", h, 1)
    check_int("steps", steps, 1)
    check_float("lr", lr, 0.0, low_open=True)
    seed_torch(seed)
    mlp = FactMLP(keys.shape[1], h, activation="silu", gated=True, bias=True, out_bias=True, dtype=dtype)
    K, T = keys.to(dtype), values.to(dtype)[facts]
    V = values.to(dtype)
    opt = torch.optim.Adam(mlp.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=final_lr)
    for step in range(steps):
        opt.zero_grad()
        out = mlp.down(mlp.hidden(K))
        if stop_when_stored and step % check_every == 0 and bool(((out @ V.T).argmax(1) == facts).all()):
            break
        (out - T).pow(2).sum(1).mean().backward()
        opt.step()
        sched.step()
    mlp.method = "gd-mse"
    mlp.accuracy = fact_accuracy(mlp, keys, values, facts)
    return mlp
