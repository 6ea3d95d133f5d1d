"""Experiment `hf` as registered: symformer's parts inside Hugging Face Llama-family models, built from configs (no
download).

1. Parity: a model patched with symformer RoPE (half pairing, the model's rope_theta) against the unpatched model,
   float32 and float64; STRING with P = I against RoPE (ESPR T2.7: R = P R_rope P^T).
2. FAVOR+ through AttentionInterface ("symformer_favor") against eager softmax as the feature count m grows (T7.3).
3. Teleportation invariance (teleportation paper Sec. 3, eq. (9)) under a random group element, with GQA, for
   the native RoPE and patched STRING / ESPR.
4. A short character-LM training run on tiny Shakespeare per positional part (RoPE, STRING, ESPR).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from symformer.data import load_char_text
from symformer.experiments.base import RunContext, experiment
from symformer.experiments.hf.checks import (
    POSITIONALS,
    TRAIN_POSITIONALS,
    _claim,
    favor_convergence,
    parity,
    teleport_invariance,
)
from symformer.experiments.hf.plan import HfPlan
from symformer.experiments.plots import pyplot
from symformer.integrations.hf import require_transformers
from symformer.integrations.hf.lm import n_parameters, tiny_llama, train_lm
from symformer.results import Claim, ExperimentResult


def train_runs(ctx: RunContext, plan: HfPlan) -> dict:

    split = load_char_text(
        block=plan.block, data_dir=ctx.data_file("tinyshakespeare.txt").parent, max_chars=plan.max_chars
    )
    out = {}
    for pos in POSITIONALS:
        model = tiny_llama(split.meta["vocab_size"], plan.spec, pos, seed=ctx.seed, **TRAIN_POSITIONALS[pos])
        curve = train_lm(
            model,
            split,
            plan.steps,
            batch_size=plan.batch_size,
            lr=3e-3,
            eval_every=plan.eval_every,
            seed=ctx.seed,
            eval_batches=plan.eval_batches,
        )
        out[pos] = {
            "val_loss": curve.val_loss,
            "steps": curve.steps,
            "seconds": curve.seconds,
            "params": n_parameters(model),
        }
        if ctx.progress:
            print(f"[hf] {pos}: val loss {curve.val_loss[-1]:.3f} ({curve.seconds:.0f}s)", flush=True)
    return {"runs": out, "block": plan.block, "steps": plan.steps, "spec": dataclasses.asdict(plan.spec)}


def _figure(ctx: RunContext, runs: dict) -> str | None:
    try:
        plt = pyplot()
    except ImportError:  # pragma: no cover
        return None
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for pos, r in runs.items():
        ax.plot(r["steps"], r["val_loss"], marker="o", label=pos)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title("tiny Llama on tiny Shakespeare")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ctx.out_dir / "hf_val_loss.png", dpi=120)
    plt.close(fig)
    return "hf_val_loss.png"


def hf_claims(par: dict, fav: dict, tel: dict) -> list[Claim]:
    """T2.4-hf, T2.7-hf, T7.3-hf and Sec.3-hf from the parity, FAVOR+ and invariance checks."""
    setting = (
        "tiny LlamaForCausalLM (d 32, 2 layers, 4 query / 2 key heads, Dh 8), 2 x 48 tokens, 1 seed; the f64 "
        "parity also on the same tiny Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3, Mixtral, Qwen3-MoE, "
        "OLMo, OLMo 2, OLMo 3, OLMoE, Phi-3, GPT-NeoX, Granite, SmolLM3, Seed-OSS, EXAONE 4, StableLM, "
        "StarCoder2, Phi, Arcee, Apertus, Qwen2-MoE, PhiMoE, GraniteMoE, GLM and GLM-4"
    )
    return [
        _claim(
            "T2.4-hf",
            "symformer RoPE in the half pairing with the model's frequencies is HF Llama's RoPE",
            "ESPR T2.4-T2.7 (RoPE: U = I), rotate-half layout",
            f"max |dlogit| f32 {par['f32']:.2e}, f64 "
            f"{par['f64']:.2e}; f64 on each family: "
            + ", ".join(f"{k} {v:.1e}" for k, v in par["f64_by_family"].items()),
            par["f32"] <= 1e-5 and par["f64"] <= 1e-10 and max(par["f64_by_family"].values()) <= 1e-10,
            "thresholds 1e-5 (float32) and 1e-10 (float64); float64 models run HF's cos/sin table and RMSNorm "
            "formulas in float64 (integrations.hf.exact; HF computes both in float32 for every dtype: "
            f"{par['f64_untouched_hf_float32_paths']:.1e} between the untouched float64 models)",
            setting,
            "exact identity (no numbers in the paper)",
        ),
        _claim(
            "T2.7-hf",
            "STRING with Cayley factor P = I equals RoPE",
            "ESPR T2.7, T3.1 (cayley(0) = I)",
            f"max |dlogit| {par['string_identity']:.2e} (P != I control: {par['string_control']:.2e})",
            par["string_identity"] <= 1e-10 and par["string_control"] > 1e-6,
            "float64; the control with init_scale 0.2 must differ",
            setting,
            "exact identity",
        ),
        _claim(
            "T7.3-hf",
            "FAVOR+ approaches softmax attention as the number of features m grows",
            'ESPR T7.3 (unbiased positive features), via AttentionInterface "symformer_favor"',
            ", ".join(f"m={m}: {e:.2e}" for m, e in fav.items()),
            all(a > b for a, b in zip(list(fav.values()), list(fav.values())[1:])),
            "max |logit - eager logit| on 2 x 32 tokens, one fixed feature draw per m (a non-monotone run "
            "would read fails)",
            setting,
            "asymptotic statement, no model",
        ),
        _claim(
            "Sec.3-hf",
            "the output is invariant under the attention symmetry group (GQA: U shared per key head)",
            "teleportation paper Sec. 3, eq. (9) (RoPE: H(d_h)); STRING/ESPR groups are ours",
            ", ".join(f"{k}: {v:.1e}" for k, v in tel.items()),
            max(tel.values()) <= 1e-10,
            "float64, one random element (scale 0.5, head permutations, gated-MLP rescaling) per model, "
            "max relative logit change; Llama with native RoPE, STRING, ESPR, and every other family with its "
            "native RoPE (Qwen3-Next, Qwen3.5, AFMoE: their output gates leave diagonal V / O factors only, "
            "ours). "
            "Qwen3 (per-head q/k norms before the rotation): the Q/K part rescales the norm weights, "
            "constant on each RoPE pair (OLMo: norms over all heads, one scaling per key head); MoE: per-expert "
            "MLP rescaling (ours)",
            setting,
            "MHA without GQA; RoPE only",
        ),
    ]


@experiment(
    "hf",
    "symformer parts in Hugging Face Llama models: parity, FAVOR+, teleport invariance, training",
    data_files=("tinyshakespeare.txt",),
    requires={"transformers": "hf"},
)
def run(ctx: RunContext) -> ExperimentResult:

    tf = require_transformers()
    t0 = time.perf_counter()
    plan = HfPlan.for_run(ctx.quick)
    res = ExperimentResult(
        config={
            "transformers": tf.__version__,
            "model": "LlamaForCausalLM from LlamaConfig, GQA 4 query / 2 key heads, Dh 8",
        }
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: intra-op threads only add synchronisation (as experiments/teleport does)
    try:
        par, fav, tel = parity(ctx.seed), favor_convergence(ctx.seed), teleport_invariance(ctx.seed)
        tr = train_runs(ctx, plan)
    finally:
        torch.set_num_threads(threads)
    res.metrics.update(
        {
            "hf_rope_parity_max_abs_err_f32": par["f32"],
            "hf_rope_parity_max_abs_err_f64": par["f64"],
            "hf_string_identity_parity_max_abs_err": par["string_identity"],
            "hf_teleport_invariance_max_rel_err": max(tel.values()),
            "hf_val_loss": {p: r["val_loss"][-1] for p, r in tr["runs"].items()},
            "hf_rope_parity_f64_untouched_hf_float32_paths": par["f64_untouched_hf_float32_paths"],
            "hf_rope_parity_max_abs_err_f64_by_family": par["f64_by_family"],
            "hf_favor_max_abs_logit_err": {str(m): e for m, e in fav.items()},
            "hf_teleport_invariance_rel_err": tel,
        }
    )
    res.config.update(
        {
            "train": {k: v for k, v in tr.items() if k != "runs"},
            "curves": tr["runs"],
            "string_control_err": par["string_control"],
        }
    )
    res.claims += hf_claims(par, fav, tel)
    fig = _figure(ctx, tr["runs"])
    if fig:
        res.figures.append(fig)
    res.notes.append(
        f"training: {tr['steps']} steps, block {tr['block']}, batch {plan.batch_size}, AdamW 3e-3, "
        f"spec {tr['spec']}, "
        f"{tr['runs']['rope']['params']} parameters; one seed, so val-loss differences between "
        "positional parts are not significance-tested; timings under a shared 2-core CPU"
    )
    res.notes.append(f"wall time {time.perf_counter() - t0:.0f}s")
    return res
