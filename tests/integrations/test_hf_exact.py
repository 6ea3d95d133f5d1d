"""symformer.integrations.hf.exact_float64: HF's float32 paths (rotary tables, norms, rotations, the eager softmax)
computed in the input dtype, so that the float64 checks of the other HF tests measure float64 errors."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import FAMILIES, float64_reference, ids, tiny  # noqa: E402
from tests.integrations._hf_models import logits as _logits  # noqa: E402
from tests.integrations._hf_models import patched as _patched  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf._common import attention_modules, partial_rotary_factor  # noqa: E402
from symformer.integrations.hf.families import family_record  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_exact_float64_norms_compute_in_float64(family):
    """HF's RMSNorms (Llama's w * x, Gemma's (1 + w) * x) round to float32; exact_float64's equal the float64
    formula to rounding, and the untouched ones do not."""
    norm = tiny(family, torch.float64).model.norm
    with torch.no_grad():
        norm.weight.copy_(
            torch.randn(norm.weight.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        )
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = norm.weight.detach() + (1.0 if family == "gemma" else 0.0)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    want = w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    with torch.no_grad():
        assert (norm(x) - want).abs().max() > 1e-9  # HF's float32 path
        float64_reference(norm)
        assert (norm(x) - want).abs().max() <= 1e-14


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "olmo3"])
def test_patch_after_exact_float64_starts_from_the_model_tables(family):
    """exact_float64 first, then patch_positional: the parts still start from the model's own frequencies (per
    layer type for Gemma 3 and OLMo 3, whose float64 table keeps HF's `{type}_inv_freq` names), so the ESPR part at
    its commuting init is the native RoPE."""
    x = ids(n=24)
    ref = _logits(float64_reference(tiny(family, torch.float64)), x)
    out = _logits(hf.patch_positional(float64_reference(tiny(family, torch.float64)), "espr"), x)
    assert (out - ref).abs().max().item() <= 1e-10


def test_exact_float64_olmo_layer_norm_computes_in_float64():
    """OLMo's parameter-free LayerNorm runs in float32 in HF; exact_float64's equals float64 layer_norm."""
    norm = tiny("olmo", torch.float64).model.norm
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    want = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    with torch.no_grad():
        assert (norm(x) - want).abs().max() > 1e-9  # HF's float32 path
        float64_reference(norm)
        assert (norm(x) - want).abs().max() <= 1e-14


@pytest.mark.parametrize("family", ["cohere", "cohere2_moe", "ernie4_5", "deepseek_v2"])
def test_exact_float64_rotates_in_float64_and_keeps_hf_forward(family):
    """Cohere's and ERNIE 4.5's apply_rotary_pos_emb (DeepSeek-V2's complex apply_rotary_emb) cast q and k to
    float32: on a float64 model the untouched logits are off by float32 rounding, exact_float64 runs HF's own
    attention forward with the rotation in float64 (patched RoPE then agrees to rounding), and on float32 inputs
    that forward is HF's, bit for bit."""
    x = ids(n=24)
    raw = _logits(tiny(family, torch.float64), x)
    ref = _logits(float64_reference(tiny(family, torch.float64)), x)
    assert (raw - ref).abs().max() > 1e-9
    assert (_logits(float64_reference(_patched(family, "rope", torch.float64)), x) - ref).abs().max() <= 1e-12
    model = tiny(family)
    attn = model.model.layers[0].self_attn
    h = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(2))
    pe = model.model.rotary_emb(h, torch.arange(24)[None])
    with torch.no_grad():
        want = attn(h, position_embeddings=pe, attention_mask=None)[0]
        float64_reference(model)
        assert type(attn).__mro__[1].__name__ == hf.FAMILIES[family]
        assert torch.equal(attn(h, position_embeddings=pe, attention_mask=None)[0], want)
    model = float64_reference(tiny(family, torch.float64))
    assert torch.equal(_logits(float64_reference(model), x), ref)  # idempotent: the class is not wrapped twice


def test_exact_float64_cohere_layer_norms_compute_in_float64():
    """Cohere's LayerNorm (no bias; (d,) on the residual stream, (H, Dh) on q and k) runs in float32 in HF;
    exact_float64's equals the float64 formula w * (x - mean) / sqrt(var + eps)."""
    model = tiny("cohere", torch.float64, use_qk_norm=True)
    gen = torch.Generator().manual_seed(0)
    for norm, shape in ((model.model.norm, (3, 32)), (model.model.layers[0].self_attn.q_norm, (3, 4, 8))):
        with torch.no_grad():
            norm.weight.copy_(torch.randn(norm.weight.shape, generator=gen, dtype=torch.float64))
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        c = x - x.mean(-1, keepdim=True)
        want = norm.weight.detach() * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        with torch.no_grad():
            assert (norm(x) - want).abs().max() > 1e-9  # HF's float32 path
            float64_reference(norm)
            assert (norm(x) - want).abs().max() <= 1e-14


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_float64_leaves_no_norm_in_float32(family):
    """After exact_float64 every norm module of the float64 model computes in float64: an output that float32
    represents exactly everywhere was computed in float32 (VaultGemma's (1 + w) norm was missed that way)."""
    model = float64_reference(tiny(family, torch.float64))
    gen = torch.Generator().manual_seed(0)
    for name, mod in model.named_modules():
        if "Norm" not in type(mod).__name__:
            continue
        w = getattr(mod, "weight", None)
        shape = tuple(w.shape) if isinstance(w, torch.Tensor) else (32,)
        x = torch.randn((3, *shape), dtype=torch.float64, generator=gen)
        with torch.no_grad():  # Qwen3-Next's gated norm also takes the gate
            out = mod(x, torch.randn_like(x)) if "gate" in inspect.signature(mod.forward).parameters else mod(x)
        assert not torch.equal(out, out.float().double()), f"{name} ({type(mod).__name__}) computes in float32"


def _float32_ops(model, x) -> tuple[set, set]:
    """(ops that produced a float32 / half tensor during the forward, those of them inside an attention module, a
    norm or a rotary table), recorded at the dispatcher: what an output check on one module can miss. DSA's
    indexer (DeepSeek-V3.2, GLM-5) counts as outside, like the MoE routers: HF scores its discrete top-k choice of
    keys in float32 (and keeps its weights_proj in float32), and exact_float64 leaves it so."""
    from torch.utils._python_dispatch import TorchDispatchMode

    inside = [0]
    watched = [
        m
        for m in model.modules()
        if m in attention_modules(model)
        or "Norm" in type(m).__name__
        or "Rotary" in type(m).__name__
        or "Table" in type(m).__name__
    ]
    hooks = [
        h
        for m in watched
        for h in (
            m.register_forward_pre_hook(lambda *a: inside.__setitem__(0, inside[0] + 1)),
            m.register_forward_hook(lambda *a: inside.__setitem__(0, inside[0] - 1)),
        )
    ]
    # DSA's indexers, and Qwen3-Next's Gated DeltaNet layers (linear attention, left as they are: HF's chunked delta
    # rule casts to float32 whatever the dtype; their gated norm is computed in float64 all the same)
    indexers = [m for m in model.modules() if type(m).__name__.endswith(("Indexer", "GatedDeltaNet"))]
    out_of_count = (lambda *a: inside.__setitem__(0, inside[0] - 99), lambda *a: inside.__setitem__(0, inside[0] + 99))
    hooks += [
        h
        for m in indexers
        for h in (m.register_forward_pre_hook(out_of_count[0]), m.register_forward_hook(out_of_count[1]))
    ]
    found, found_inside = set(), set()

    class Low(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if any(
                isinstance(o, torch.Tensor) and o.dtype in (torch.float32, torch.float16, torch.bfloat16)
                for o in (out if isinstance(out, (tuple, list)) else [out])
            ):
                (found_inside if inside[0] > 0 else found).add(str(func))
            return out

    try:
        with torch.no_grad(), Low():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return found | found_inside, found_inside


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_float64_forward_computes_nothing_in_float32(family):
    """Every op of the float64 forward (native through exact_float64, and patched with a rotary part) returns a
    float64 tensor, except in HF's MoE routers (their softmax / sigmoid routing weights are float32 whatever the
    dtype; the groups and the rotary parts leave the router's input unchanged) and Gated DeltaNet layers (HF's delta
    rule runs in float32; they are not patched): nothing in an attention module, a
    norm or a rotary table. Before exact_float64 took the eager softmax, Gemma 2 and VaultGemma failed here."""
    x = ids(n=12)
    model = float64_reference(tiny(family, torch.float64))
    # outside the watched modules, float32 may come from MoE routers and from Gated DeltaNet layers (Qwen3-Next,
    # Qwen3.5: HF's delta rule casts to float32; not patched, and not what the float64 checks measure)
    moe = any(hasattr(m, "experts") or type(m).__name__.endswith("GatedDeltaNet") for m in model.modules())
    positional = "espr" if partial_rotary_factor(model.config) >= 1 else "rope"
    for m in (model, float64_reference(_patched(family, positional, torch.float64))):
        anywhere, inside = _float32_ops(m, x)
        assert not inside and (moe or not anywhere), (inside, anywhere)


def test_float32_op_finder_can_fail():
    """Negative control: an untouched float64 Llama (HF's float32 rotary table and RMSNorms) is caught."""
    anywhere, inside = _float32_ops(tiny("llama", torch.float64), ids(n=12))
    assert "aten.rsqrt.default" in inside and inside <= anywhere


@pytest.mark.parametrize("family", [f for f in FAMILIES if family_record(f).softmax_dtype == "float32"])
def test_input_dtype_eager_is_hf_eager_in_float32_and_float64_in_float64(family):
    """exact_float64's eager attention equals the family's own eager_attention_forward to the bit on float32
    inputs (GQA, an additive mask with a fully masked row, Gemma 2's soft-cap where its signature takes one); on
    float64 inputs its probabilities are float64 numbers (HF's: float32)."""
    import inspect

    from symformer.integrations.hf.exact import input_dtype_eager

    model = tiny(family)
    attn = attention_modules(model)[0]
    hf_eager = sys.modules[type(attn).__module__].eager_attention_forward
    gen = torch.Generator().manual_seed(0)
    hk = getattr(attn, "num_key_value_groups", 1)
    q, k, v = (torch.randn(2, 4 // (hk if i else 1), 6, 8, generator=gen) for i in range(3))
    mask = torch.zeros(2, 1, 6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), torch.finfo(q.dtype).min)
    mask[1, :, 0] = torch.finfo(q.dtype).min
    kw = {"scaling": 0.3} | ({"softcap": 2.0} if "softcap" in inspect.signature(hf_eager).parameters else {})
    for a, b in zip(input_dtype_eager(attn, q, k, v, mask, **kw), hf_eager(attn, q, k, v, mask, **kw), strict=True):
        assert torch.equal(a, b)
    out, w = input_dtype_eager(attn, q.double(), k.double(), v.double(), mask.double(), **kw)
    assert w.dtype == torch.float64 and not torch.equal(w, w.float().double())
