"""The char-LM part of experiment `favor`: softmax against FAVOR+ in the same small causal LM, with learning
curves at two training budgets. This is our claim, after Performer's "comparable accuracy" (Choromanski et al.
2021); the ESPR derivation's Tier 7 (T7.1-T7.5) says nothing about training."""

from __future__ import annotations

import time

import torch

from symformer._rng import seed_torch
from symformer.data import load_char_text
from symformer.experiments.favor.plan import BPC_GAP, N_FEATURES, REDRAW_EVERY, FavorPlan
from symformer.experiments.plots import pyplot
from symformer.models import CausalLM, TransformerConfig
from symformer.results import Claim, ExperimentResult, verdict
from symformer.runner.devices import tensor_data_on
from symformer.train import LanguageModeling, TrainConfig, Trainer
from symformer.train.callbacks import FeatureRedraw, LearningCurve


def train_lm(plan: FavorPlan, attention: str, epochs: int, data_dir=None, device: str = "cpu") -> dict:
    """One char LM with `attention`, trained for `epochs` on `device`: final validation bpc and its curve."""
    data = load_char_text(block=64, data_dir=data_dir, max_chars=plan.lm_max_chars, stride=32)
    kw = {"n_features": N_FEATURES} if attention == "favor" else {}
    cfg = TransformerConfig(
        d_model=64, n_heads=4, n_layers=2, positional="rope", attention=attention, attention_kwargs=kw
    )
    seed_torch(plan.seed)
    model = CausalLM(cfg, data.meta["vocab_size"]).to(device)
    tcfg = TrainConfig(epochs=epochs, batch_size=32, lr=3e-3, warmup_steps=30, seed=plan.seed, eval_batch_size=128)
    val_sub = tensor_data_on(data.val.subset(torch.linspace(0, len(data.val) - 1, 256).long()), device)
    trainer_steps = epochs * (len(data.train) // 32)
    curve = LearningCurve(val_sub, max(trainer_steps // 8, 1))
    cbs = [curve] + ([FeatureRedraw(model, REDRAW_EVERY, plan.seed)] if attention == "favor" else [])
    t0 = time.perf_counter()
    train, val = tensor_data_on(data.train, device), tensor_data_on(data.val, device)
    final = Trainer(model, LanguageModeling(), train, val, tcfg, callbacks=cbs).fit()
    return {
        "val_bpc": final["val_bpc"],
        "seconds": time.perf_counter() - t0,
        "steps": trainer_steps,
        "curve": [(s, m["bpc"]) for s, m in curve.points],
    }


def plot_curves(path, runs: dict) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for (att, ep), r in sorted(runs.items()):
        xs, ys = zip(*r["curve"])
        ax.plot(
            xs,
            ys,
            ("-" if att == "softmax" else "--") + ("o" if ep == min(e for _, e in runs) else "s"),
            label=f"{att}, {ep} epoch(s)",
            ms=3,
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation bpc (256 windows)")
    ax.set_title("char LM: softmax vs FAVOR+ at two budgets")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def lm_claim(gaps: dict[int, float], plan: FavorPlan) -> Claim:
    """`gaps`: favor bpc - softmax bpc at each budget (epochs)."""
    small, large = plan.lm_epochs
    return Claim(
        "LM (ours)",
        "a FAVOR+ char LM trains to validation bpc close to softmax attention (our claim)",
        "Performer (Choromanski et al. 2021): 'comparable accuracy'; not an ESPR statement (Tier 7 = T7.1-T7.5)",
        ", ".join(f"{e} epoch(s): gap {g:+.3f} bpc" for e, g in gaps.items()),
        verdict(gaps[large] <= BPC_GAP),
        f"threshold (ours): favor bpc <= softmax bpc + {BPC_GAP} at the larger budget; learning curves in "
        "favor_lm_curves.png and lm_curves",
        f"ours: d_model 64, 4 heads, 2 layers, RoPE, block 64, m = {N_FEATURES} features drawn per layer and "
        f"redrawn every {REDRAW_EVERY} steps, 1 seed, budgets {small} and {large} epochs"
        + (" of 200k characters" if plan.quick else " of tiny Shakespeare"),
        "Performer (Sec. 4): protein sequence and ImageNet64 models, far larger than ours",
    )


def lm_part(plan: FavorPlan, data_dir, out_dir, device: str = "cpu") -> ExperimentResult:
    """Softmax and FAVOR+ char LMs at both budgets, trained on `device`."""
    small, large = plan.lm_epochs
    runs = {(a, e): train_lm(plan, a, e, data_dir, device) for e in (small, large) for a in ("softmax", "favor")}
    metrics = {
        "lm_val_bpc": {a: runs[(a, large)]["val_bpc"] for a in ("softmax", "favor")},
        "lm_train_seconds": {a: runs[(a, large)]["seconds"] for a in ("softmax", "favor")},
        "lm_curves": {f"{a} {e} epochs": r["curve"] for (a, e), r in runs.items()},
        "lm_val_bpc_by_budget": {f"{a} {e} epochs": r["val_bpc"] for (a, e), r in runs.items()},
    }
    gaps = {e: runs[("favor", e)]["val_bpc"] - runs[("softmax", e)]["val_bpc"] for e in (small, large)}
    plot_curves(out_dir / "favor_lm_curves.png", runs)
    config = {
        "d_model": 64,
        "n_heads": 4,
        "n_layers": 2,
        "block": 64,
        "stride": 32,
        "n_features": N_FEATURES,
        "redraw_every": REDRAW_EVERY,
        "max_chars": plan.lm_max_chars,
        "epochs": [small, large],
    }
    return ExperimentResult(
        metrics=metrics, claims=[lm_claim(gaps, plan)], config={"lm": config}, figures=["favor_lm_curves.png"]
    )
