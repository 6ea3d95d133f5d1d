"""Parts 1-3 of experiment `hf` (float32 / float64 on the CPU): parity with the unpatched model, FAVOR+ against
eager softmax as m grows, and teleportation invariance."""

from __future__ import annotations

import dataclasses

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer.experiments.hf.families import FAMILY_MODELS, POST_NORM_FAMILIES, QK_NORM_FAMILIES
from symformer.integrations import hf
from symformer.integrations.hf import exact_float64
from symformer.integrations.hf._common import attention_modules, post_qk_norms, qk_norms
from symformer.results import Claim, verdict

# the parts trained in part 4, named on purpose (not every registered part): the papers' comparison of RoPE, STRING
# (RoPE in a learned basis, ESPR T2.7: R = P R_rope P^T) and ESPR (generators that need not commute, T1.1)
POSITIONALS = ("rope", "string", "espr")
TRAIN_POSITIONALS = {"rope": {}, "string": {"init_scale": 0.0}, "espr": {}}


def _claim(cid, statement, paper, measured, ok, evidence, setting, paper_setting) -> Claim:
    """A Claim with setting / paper_setting fields where results.Claim has them, else in the evidence text."""
    names = {f.name for f in dataclasses.fields(Claim)}
    if {"setting", "paper_setting"} <= names:
        return Claim(
            cid, statement, paper, measured, verdict(ok), evidence, setting=setting, paper_setting=paper_setting
        )
    return Claim(
        cid,
        statement,
        paper,
        measured,
        verdict(ok),
        f"{evidence} Setting (ours): {setting}. Paper setting: {paper_setting}.",
    )


def _tiny(dtype, positional=None, seed=0, attn="eager", init=0.2, family="llama", **opts):
    """d_model 32, 4 query heads of Dh 8 over 2 key heads (GQA), 2 layers, vocab 40, of a FAMILY_MODELS family
    (the q/k norm weights of QK_NORM_FAMILIES are drawn around 1: HF starts them at exactly 1)."""
    import transformers as tf

    conf, cls, extra = FAMILY_MODELS[family]
    args = dict(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        head_dim=8,
        attention_bias=True,
        attn_implementation=attn,
        bos_token_id=None,
        eos_token_id=None,
        initializer_range=init,
    )  # 0.2: weights large enough that attention moves logits
    cfg = getattr(tf, conf)(**{**args, **extra})  # the family's own settings win (MLA: key heads = heads)
    seed_torch(seed)
    model = getattr(tf, cls)(cfg).to(dtype).eval()
    if family in QK_NORM_FAMILIES or family in POST_NORM_FAMILIES:
        with torch.no_grad():
            for attn in attention_modules(model):  # LFM2: the attention layers only (its others are convolutions)
                norms = qk_norms(attn) if family in QK_NORM_FAMILIES else post_qk_norms(attn)
                for norm in norms:
                    norm.weight.normal_(1.0, 0.5)
    return model if positional is None else hf.patch_positional(model, positional, **opts)


@torch.no_grad()
def _logits(model, x):
    return model(x).logits


def parity(seed: int, n: int = 48) -> dict:
    """Max |logit difference|, patched vs native; float64 through exact_float64 (HF's table and RMSNorms are float32
    for every dtype: hf.exact's docstring), with the untouched float64 model's number kept for the record."""

    x = torch.randint(0, 40, (2, n), generator=seeded_generator(seed))
    out = {
        "f32": float(
            (_logits(_tiny(torch.float32, "rope", seed), x) - _logits(_tiny(torch.float32, None, seed), x)).abs().max()
        )
    }
    out["f64_untouched_hf_float32_paths"] = float(
        (_logits(_tiny(torch.float64, "rope", seed), x) - _logits(_tiny(torch.float64, None, seed), x)).abs().max()
    )
    ref = _logits(exact_float64(_tiny(torch.float64, None, seed)), x)
    out["f64"] = float((_logits(exact_float64(_tiny(torch.float64, "rope", seed)), x) - ref).abs().max())
    out["string_identity"] = float(
        (_logits(exact_float64(_tiny(torch.float64, "string", seed, init_scale=0.0)), x) - ref).abs().max()
    )
    out["string_control"] = float(
        (_logits(exact_float64(_tiny(torch.float64, "string", seed, init_scale=0.2)), x) - ref).abs().max()
    )
    out["f64_by_family"] = {}
    for fam in FAMILY_MODELS:  # the same check on every supported family
        ref = _logits(exact_float64(_tiny(torch.float64, None, seed, family=fam)), x)
        got = _logits(exact_float64(_tiny(torch.float64, "rope", seed, family=fam)), x)
        out["f64_by_family"][fam] = float((got - ref).abs().max())
    return out


def favor_convergence(seed: int, features=(64, 1024, 16384), init: float = 0.05) -> dict:
    """Weights at init std 0.05 keep |q^|, |k^| moderate: FAVOR+'s variance grows like exp(|q^|^2 + |k^|^2) (T7.4)."""

    x = torch.randint(0, 40, (2, 32), generator=seeded_generator(seed))
    ref = _logits(_tiny(torch.float64, None, seed, init=init), x)
    out = {}
    for m in features:
        # seed + 1: layer l draws its features with 1000 (seed + 1) + l, never the generator of the inputs x
        model = hf.configure(_tiny(torch.float64, None, seed, init=init), "favor", n_features=m, seed=seed + 1)
        out[m] = float((_logits(model, x) - ref).abs().max())
    return out


def teleport_invariance(seed: int) -> dict:

    x = torch.randint(0, 40, (2, 24), generator=seeded_generator(seed))
    out = {}
    cases = [
        ("native_rope", None, {}),
        ("string", "string", {"init_scale": 0.3}),
        ("espr", "espr", {"init_scale": 0.05}),
    ]
    cases += [(f"{fam}_native_rope", None, {"family": fam}) for fam in FAMILY_MODELS if fam != "llama"]
    for name, pos, opts in cases:
        model = exact_float64(_tiny(torch.float64, pos, seed, **opts))
        ref = _logits(model, x)
        group = hf.symmetry_group(model, ffn=True)
        group.apply(model, group.random(seeded_generator(seed + 1)))
        out[name] = float((_logits(model, x) - ref).abs().max() / ref.abs().max())
    return out
