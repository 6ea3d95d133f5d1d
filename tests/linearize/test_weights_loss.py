"""Hedgehog's stage-1 loss (linearize.transfer.weights_loss, LinearizeConfig(stage1_loss="attention_ce")): the
learned FAVOR+ core's explicit weights apply as its causal forward does (float64, both feature maps, long sequences,
16-bit inputs against a float64 reference), the teachers' recorded weights are their softmax weights, the loss is
bounded below by the teachers' entropy and stage 1 lowers it, and bad input is a ValueError naming the argument."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()
pytest.importorskip("peft")

from tests.integrations._hf_models import tiny  # noqa: E402
from tests.linearize._common import OPTIONS, random_split  # noqa: E402

from symformer.linearize import (  # noqa: E402
    LearnedFavorAttention,
    LinearizeConfig,
    capture,
    linearize,
    student_of,
    weights_loss,
)
from symformer.models import CausalLM, TransformerConfig  # noqa: E402


def _core(feature_map: str, dtype=torch.float64, seed=0) -> LearnedFavorAttention:
    core = LearnedFavorAttention(head_dim=8, n_heads=2, n_features=32, chunk_size=64, seed=0, feature_map=feature_map)
    core = core.to(dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # away from the identity, so the maps matter
        core.q_map.add_(0.3 * torch.randn(core.q_map.shape, generator=g, dtype=torch.float64).to(dtype))
        core.k_map.add_(0.3 * torch.randn(core.k_map.shape, generator=g, dtype=torch.float64).to(dtype))
    return core


def _qkv(n: int, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))


@pytest.mark.parametrize("feature_map", ["favor", "hedgehog"])
def test_explicit_weights_apply_as_the_causal_forward(feature_map):
    core = _core(feature_map)
    q, k, v = _qkv(2048)
    a = core.attention_weights(q, k)
    assert torch.equal(a, a.tril())
    assert (a.sum(-1) - 1).abs().max() <= 1e-12
    assert (a @ v - core(q, k, v, is_causal=True)).abs().max() <= 1e-11


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("feature_map", ["favor", "hedgehog"])
def test_16bit_weights_match_the_float64_reference(dtype, feature_map):
    q, k, _ = _qkv(2048, dtype)
    core = _core(feature_map, dtype)
    low = core.attention_weights(q, k)
    assert low.dtype == torch.float32  # accumulated in float32
    ref = _core(feature_map)
    with torch.no_grad():  # the same rounded maps and inputs, in float64
        ref.q_map.copy_(core.q_map.double()), ref.k_map.copy_(core.k_map.double())
    ref = ref.attention_weights(q.double(), k.double())
    assert (low.double() - ref).abs().max() <= 1e-5 * ref.abs().max() + 1e-7


def test_explicit_weights_gradcheck():
    core = _core("hedgehog")
    q, k, _ = (t.requires_grad_() for t in _qkv(6))
    assert torch.autograd.gradcheck(lambda q, k: core.attention_weights(q, k), (q, k))


def _entropy(records) -> float:
    return float(sum(-(w * w.clamp_min(torch.finfo(w.dtype).tiny).log()).sum(-1).mean() for _, _, w in records))


def test_hf_teacher_weights_are_causal_softmax_rows_and_its_implementation_is_restored():
    teacher, data = tiny("llama", torch.float64, seed=0), random_split()
    impl = teacher.config._attn_implementation
    with torch.no_grad(), capture(teacher, weights=True) as rec:
        teacher(input_ids=data.train.x[:4], use_cache=False)
    with torch.no_grad(), capture(teacher) as plain:
        teacher(input_ids=data.train.x[:4], use_cache=False)
    assert teacher.config._attn_implementation == impl
    for (_, out, w), (_, ref) in zip(rec, plain, strict=True):  # HF's eager softmax runs in float32, whatever
        assert torch.equal(w, w.tril()) and (w.sum(-1) - 1).abs().max() <= 1e-6  # the model's dtype
        assert (out - ref).abs().max() <= 1e-6  # eager's output is the model's own, to float32's rounding


def test_causallm_teacher_weights_apply_as_its_softmax_core():
    torch.manual_seed(0)
    teacher = CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=2), 20).double().eval()
    seen = []
    core = teacher.encoder.blocks[0].attn.core
    h = core.register_forward_hook(lambda m, a, kw, y: seen.append((a[2], y)), with_kwargs=True)
    with torch.no_grad(), capture(teacher, weights=True) as rec:
        teacher(random_split(vocab=20).train.x[:3])
    h.remove()
    (v, y), w = seen[0], rec[0][2]
    assert (w @ v.repeat_interleave(w.shape[1] // v.shape[1], dim=1) - y).abs().max() <= 1e-12


def _config(**kw):
    base = dict(stage1_tokens=4 * 12 * 8, stage2_tokens=4 * 12, batch_size=4, eval_every=4, eval_batches=1, lr1=1e-2)
    options = {**OPTIONS["favor"], "feature_map": "hedgehog"}
    return LinearizeConfig("favor", "rope", core_options=options, stage1_loss="attention_ce", **{**base, **kw})


@pytest.mark.parametrize("own", [False, True], ids=["hf", "causallm"])
def test_stage1_lowers_the_weights_loss_toward_the_teachers_entropy(own):
    torch.manual_seed(0)
    teacher = (
        CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=1), 40).eval() if own else tiny("llama", seed=0)
    )
    data, cfg = random_split(), _config(lr1=3e-2, stage1_tokens=4 * 12 * 16)

    def losses(student):
        with torch.no_grad(), capture(teacher, weights=True) as rec:
            x = data.train.x[:8]
            teacher(x) if own else teacher(input_ids=x, use_cache=False)
            return float(weights_loss(student, rec)), _entropy(rec)

    before, floor = losses(student_of(teacher, cfg))
    after, _ = losses(linearize(teacher, data, cfg, out=None).model)
    assert floor <= after + 1e-6  # cross-entropy >= entropy (Gibbs)
    assert after - floor < 0.8 * (before - floor), (before, after, floor)  # the KL fell


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="stage1_loss"):
        LinearizeConfig("favor", stage1_loss="kl")
    with pytest.raises(ValueError, match="stage1_loss"):
        LinearizeConfig("plash", stage1_loss="attention_ce")
    with pytest.raises(ValueError, match="kernel_eps"):
        LearnedFavorAttention(head_dim=4, n_features=8, kernel_eps=1e-4).attention_weights(*_qkv(3)[:2])
    teacher, data = tiny("llama", seed=0), random_split()
    plash = student_of(teacher, LinearizeConfig("plash", core_options=OPTIONS["plash"]))
    with torch.no_grad(), capture(teacher, weights=True) as rec:
        teacher(input_ids=data.train.x[:2], use_cache=False)
        with pytest.raises(ValueError, match="stage1_loss"):
            weights_loss(plash, rec)
    with torch.no_grad(), capture(teacher) as plain:  # without weights=True
        teacher(input_ids=data.train.x[:2], use_cache=False)
        with pytest.raises(ValueError, match="records"):
            weights_loss(student_of(teacher, _config()), plain)
