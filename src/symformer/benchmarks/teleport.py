"""`teleport` suite: the cost of one teleport step and the per-epoch overhead of the paper's schedule.

Rows (paper MNIST ViT shape: 6 layers, d 128, 4 heads, MLP 512, batch 128, 16 patch tokens; quick: 2 layers,
d 64): one training step (forward + backward + SGD step); one teleport step with M = 16 candidates whose
gradient norms come in closed form from the existing gradient ("closed form", our default: sampling,
Gram-matrix norms, one forward to check invariance, gradient transform); the same with M brute-force
forward+backward passes ("brute force", the paper's way); the candidate norms alone in both ways. Ratios:
brute/closed-form cost of the norms and of the whole step, a teleport step in units of a training step, and
the per-epoch overhead % = 100 |K| t_teleport / (steps_per_epoch t_step) for the paper's schedule
(|K| = 4 steps within one epoch of 469 steps, MNIST batch 128), in the teleport epoch and averaged over
the 20-epoch run. All rows are measured in this process.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from symformer._rng import seed_torch, seeded_generator
from symformer.benchmarks.base import BenchContext, BenchResult, median_seconds, suite
from symformer.models import TransformerConfig, ViTClassifier
from symformer.teleport import (
    brute_force_norms,
    closed_form_norms,
    symmetry_group,
    teleport_step,
)

STEPS_PER_EPOCH, EPOCHS, K, M = 469, 20, 4, 16  # paper App. F: MNIST, batch 128, 20 epochs, |K| = 4, M = 16


def _setup(quick: bool, pe: str, device: str):

    seed_torch(0)
    d, layers = (64, 2) if quick else (128, 6)
    cfg = TransformerConfig(d_model=d, n_heads=4, n_layers=layers, d_ff=4 * d, positional=pe, coord_dim=2)
    model = ViTClassifier(cfg, 49, 10).to(device)
    x = torch.randn(128, 16, 49, device=device)
    pos = torch.stack(torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij"), -1).reshape(16, 2).to(device)
    y = torch.randint(0, 10, (128,), device=device)
    return model, (lambda: F.cross_entropy(model(x, pos), y))


def _time_pe(pe: str, ctx: BenchContext, mt: float) -> tuple[dict, int, int]:
    """Median seconds of a training step, the candidate norms and whole teleport steps, both ways."""

    model, loss_fn = _setup(ctx.quick, pe, ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)  # lr 0 keeps the point fixed
    G = symmetry_group(model)
    gen = seeded_generator(0)

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        return loss

    last = float(train_step().detach())
    cands = G.sample(M, 0.65, gen)
    t = {
        "train step": median_seconds(train_step, mt, ctx.device),
        "norms closed form": median_seconds(lambda: closed_form_norms(model, G, cands), mt, ctx.device),
        "norms brute force": median_seconds(lambda: brute_force_norms(model, G, cands, loss_fn), mt, ctx.device),
        "teleport step closed form": median_seconds(
            lambda: teleport_step(model, G, loss_fn, 0.65, M, gen, loss_before=last), mt, ctx.device
        ),
        "teleport step brute force": median_seconds(
            lambda: teleport_step(model, G, loss_fn, 0.65, M, gen, loss_before=last, brute_force=True), mt, ctx.device
        ),
    }
    return t, len(G.sites), model.cfg.d_model


@suite("teleport", "Cost of one teleport step (closed form vs brute force, M = 16) and per-epoch overhead")
def run(ctx: BenchContext) -> BenchResult:
    res = BenchResult(config={"M": M, "K": K, "steps_per_epoch": STEPS_PER_EPOCH, "epochs": EPOCHS, "batch": 128})
    mt = 0.2 if ctx.quick else 1.0
    for pe in ("learned", "rope"):
        t, layers, d = _time_pe(pe, ctx, mt)
        for name, sec in t.items():
            res.rows.append(
                {"method": name, "pe": pe, "M": M, "layers": layers, "d_model": d, "batch": 128, "median_s": sec}
            )
        ts = t["train step"]
        res.ratios[f"{pe}: norms brute/closed"] = t["norms brute force"] / t["norms closed form"]
        res.ratios[f"{pe}: teleport step brute/closed"] = (
            t["teleport step brute force"] / t["teleport step closed form"]
        )
        for how in ("closed form", "brute force"):
            tt = t[f"teleport step {how}"]
            res.ratios[f"{pe}: teleport step in train steps ({how})"] = tt / ts
            res.ratios[f"{pe}: overhead % teleport epoch ({how})"] = 100 * K * tt / (STEPS_PER_EPOCH * ts)
            res.ratios[f"{pe}: overhead % per epoch over run ({how})"] = 100 * K * tt / (EPOCHS * STEPS_PER_EPOCH * ts)
    return res
