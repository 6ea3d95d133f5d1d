"""Precision checks of patched Hugging Face models in bfloat16 / float16 against the float64 model,
and the anchor: HF Llama's own RoPE cast to 16 bits. Tiny models built from configs; pure functions."""

from __future__ import annotations

import copy

import torch

from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_choice
from symformer.experiments.hf.families import FAMILY_MODELS, QK_NORM_FAMILIES
from symformer.experiments.precision.rotation_checks import EPS, check_dtype
from symformer.integrations import hf
from symformer.integrations.hf import exact_float64
from symformer.integrations.hf._common import attention_modules, qk_norms

HF_PRECISION_FAMILIES = ("llama", "qwen3", "gpt_neox", "deepseek_v2")


def _sharpen(model, factor: float) -> None:
    """Scale what feeds the rotation (the q/k norm weights where the family norms q and k, else the q and k
    projections; MLA: q_proj and kv_a_proj_with_mqa) so the logits are large and position errors show."""

    for attn in attention_modules(model):
        norms = qk_norms(attn)
        if norms is not None and all(getattr(m, "weight", None) is not None for m in norms):
            mods = list(norms)
        else:
            names = ("q_proj", "k_proj", "query_key_value", "kv_a_proj_with_mqa")
            mods = [getattr(attn, a) for a in names if hasattr(attn, a)]
        for m in mods:
            m.weight.mul_(factor)


@torch.no_grad()
def hf_base_model(
    family: str, dtype: torch.dtype, n_tokens: int = 2048, seed: int = 0, sharpness: float = 3.0, attn: str = "sdpa"
):
    """A float32 tiny model of `family` (1 layer, d_model 16, 2 heads of Dh 8, vocab 40) whose weights are exactly
    representable in `dtype` (so the 16-bit models and the float64 one share them), with sharpened attention."""
    import transformers as tf

    check_choice("family", family, tuple(FAMILY_MODELS))
    conf, cls, extra = FAMILY_MODELS[family]
    args = dict(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=max(2 * n_tokens, 128),
        head_dim=8,
        attn_implementation=attn,
        bos_token_id=None,
        eos_token_id=None,
        initializer_range=0.2,
    )
    mla = "kv_lora_rank" in extra  # MLA: as many key heads as heads
    cfg = getattr(tf, conf)(
        **{
            **args,
            **extra,
            "num_hidden_layers": 1,
            "first_k_dense_replace": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2 if mla else 1,
        }
    )
    seed_torch(seed)
    model = getattr(tf, cls)(cfg).float().eval()
    if family in QK_NORM_FAMILIES:
        for attn in attention_modules(model):
            for norm in qk_norms(attn):
                norm.weight.normal_(1.0, 0.5)
    _sharpen(model, sharpness)
    for p in model.parameters():
        p.copy_(p.to(check_dtype(dtype)).float())
    return model


def hf_route_model(base, dtype: torch.dtype, route: str, positional: str | None = None):
    """`base`'s weights in a `dtype` model made by route "config" (`_from_config(cfg, dtype=...)`, as from_pretrained
    builds it) or "cast" (`.to(dtype)` of a float32 copy), patched with `positional` before the cast (None: native)."""

    check_choice("route", route, ("config", "cast"))
    if route == "cast":
        model = copy.deepcopy(base)
        if positional is not None:
            hf.patch_positional(model, positional)
        return model.to(dtype)
    cfg = copy.deepcopy(base.config)
    model = type(base)._from_config(cfg, dtype=dtype).eval()
    model.load_state_dict(base.state_dict())
    return hf.patch_positional(model, positional) if positional is not None else model


@torch.no_grad()
def hf_reference_logits(base, x: torch.Tensor) -> torch.Tensor:
    """The float64 model's logits (exact_float64: HF's float32 tables and norms evaluated in float64)."""

    return exact_float64(copy.deepcopy(base).double())(x).logits


def logit_err(model, x: torch.Tensor, ref: torch.Tensor) -> float:
    """The root-mean-square logit error against the reference over the second half of the tokens (positions n/2 to n,
    where a rounded position shows first). RMS, not the max: the max over ~40k logits of two models that both round
    correctly differs by tens of percent from draw to draw, which a 1.5x goal cannot tell from a real error."""
    with torch.no_grad():  # the model may sit on a GPU; the float64 reference stays where it was computed
        d = model(x.to(model.device)).logits.double().to(ref.device) - ref
    return float(d[:, d.shape[1] // 2 :].pow(2).mean().sqrt())


def hf_tokens(n_tokens: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 40, (1, n_tokens), generator=seeded_generator(seed + 11))


def hf_logit_err_vs_native(
    family: str, dtype: torch.dtype, n_tokens: int = 2048, seed: int = 0, route: str = "config"
) -> dict:
    """Logit errors (`logit_err`) against the float64 model of the "rope"-patched and of the native `dtype` model
    (built as from_pretrained(dtype=...) builds it, or cast with .to()): {"ratio": patched / native (goal <= 1.5),
    "patched_err", "native_err"}."""
    check_choice("family", family, HF_PRECISION_FAMILIES)
    base = hf_base_model(family, dtype, n_tokens, seed)
    x = hf_tokens(n_tokens, seed)
    ref = hf_reference_logits(base, x)
    native = logit_err(hf_route_model(base, dtype, route), x, ref)
    patched = logit_err(hf_route_model(base, dtype, route, "rope"), x, ref)
    return {"ratio": patched / native, "patched_err": patched, "native_err": native}


def hf_native_rope_err_vs_bound(dtype: torch.dtype, n: int = 8192, head_dim: int = 16, seed: int = 0) -> float:
    """The anchor: a Hugging Face Llama rotary embedding cast with `.to(dtype)` (its `inv_freq` rounded to `dtype`,
    cos / sin cast to the query's dtype, as `apply_rotary_pos_emb` uses them) rotating q at positions 0..n-1, error
    against the float64 rotation with the float32 frequencies, over the same bound 2 eps(dtype) max|q|."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=n)
    rot = LlamaRotaryEmbedding(cfg)
    inv64 = rot.inv_freq.double()  # float32 master frequencies, before any cast
    rot = rot.to(dtype)
    q = torch.randn(1, 2, n, head_dim, generator=seeded_generator(seed)).to(dtype)
    pos = torch.arange(n)[None]
    cos, sin = rot(q, pos)
    out = apply_rotary_pos_emb(q, q, cos, sin)[0]
    ang = pos[0].double()[:, None] * inv64[None]
    emb = torch.cat((ang, ang), -1)
    ref = apply_rotary_pos_emb(q.double(), q.double(), emb.cos()[None], emb.sin()[None])[0]
    return float((out.double() - ref).abs().max()) / (2 * EPS[dtype] * float(q.abs().max()))
