"""Patched Hugging Face models in bfloat16 / float16 are as accurate as the native ones (issue 40): 2048 tokens, sharp
attention (experiments.precision.hf_checks.hf_base_model scales what feeds the rotation), Llama, Qwen3, GPT-NeoX
(partial rotary) and DeepSeek-V2 (MLA); built as from_pretrained(dtype=...) builds them, loaded from a local save
with dtype=, or cast with .to(); and a cached decode that hands the part exact int64 positions."""

from __future__ import annotations

import copy

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

from symformer.experiments.precision.hf_checks import (
    HF_PRECISION_FAMILIES,
    hf_base_model,
    hf_reference_logits,
    hf_route_model,
    hf_tokens,
    logit_err,
)

transformers_or_skip()
N_TOKENS = 2048
DTYPES = (torch.bfloat16, torch.float16)
_CASES: dict = {}


def _case(family: str, dtype: torch.dtype):
    """(float32 base model with dtype-exact weights, tokens, float64 logits), built once per family and dtype."""
    if (family, dtype) not in _CASES:
        base = hf_base_model(family, dtype, N_TOKENS)
        x = hf_tokens(N_TOKENS)
        _CASES[family, dtype] = base, x, hf_reference_logits(base, x)
    return _CASES[family, dtype]


def _pretrained(base, dtype, positional, folder):
    from symformer.integrations import hf

    model = copy.deepcopy(base)
    if positional is not None:
        hf.patch_positional(model, positional)
    model.save_pretrained(folder)
    return hf.from_pretrained(type(base), folder, dtype=dtype).eval()


@pytest.mark.parametrize("route", ["config", "pretrained", "cast"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", HF_PRECISION_FAMILIES)
def test_patched_as_accurate_as_native(family, dtype, route, device, tmp_path):
    from symformer.integrations import hf

    base, x, ref = _case(family, dtype)
    if route == "pretrained":
        native, patched = (_pretrained(base, dtype, p, tmp_path / str(p)) for p in (None, "rope"))
    else:
        native, patched = hf_route_model(base, dtype, route), hf_route_model(base, dtype, route, "rope")
    native, patched = native.to(device), patched.to(device)
    assert next(patched.parameters()).dtype == dtype
    for part in hf.rotary_parts(patched):
        assert all(p.dtype == torch.float32 for p in (*part.parameters(), *part.buffers()) if p.is_floating_point())
    patched_err, native_err = logit_err(patched, x, ref), logit_err(native, x, ref)
    assert patched_err <= 1.5 * native_err, (patched_err, native_err)


def test_string_from_pretrained_keeps_float32_parameters(tmp_path):
    base, x, ref = _case("llama", torch.bfloat16)
    model = _pretrained(base, torch.bfloat16, "string", tmp_path)
    from symformer.integrations import hf

    for part in hf.rotary_parts(model):
        assert part.skew_param.dtype == torch.float32 and part.rope.beta.dtype == torch.float32
    assert logit_err(model, x, ref) <= 1.5 * logit_err(hf_route_model(base, torch.bfloat16, "config"), x, ref)


def test_patching_a_model_already_cast_takes_float32_frequencies():
    """A model cast to bfloat16 before the patch has a rounded inv_freq (transformers issue 29496): the part takes
    HF's float32 recomputation instead."""
    from symformer.integrations import hf

    base, _, _ = _case("llama", torch.bfloat16)
    exact = base.model.rotary_emb.inv_freq.clone()
    model = copy.deepcopy(base).to(torch.bfloat16)
    assert not torch.equal(model.model.rotary_emb.inv_freq.float(), exact)
    hf.patch_positional(model, "rope")
    for part in hf.rotary_parts(model):
        assert part.beta.dtype == torch.float32 and torch.equal(part.beta[:, 0], exact)


def test_cached_decode_keeps_positions_exact():
    """Decode 32 tokens one at a time with the KV cache after a 2016-token prefill, in bfloat16: the part receives
    the exact int64 positions (bfloat16 would hand it 2016 for 2017), and the decoded logits are as accurate as the
    native model's."""
    from symformer.integrations import hf
    from symformer.integrations.hf.cache import cache_kwargs

    dtype, prefill = torch.bfloat16, N_TOKENS - 32
    base, x, ref = _case("llama", dtype)
    seen = []
    patched = hf_route_model(base, dtype, "config", "rope")
    hf.rotary_parts(patched)[0].register_forward_pre_hook(lambda m, args: seen.append(args[2].clone()))
    errs = []
    for model in (hf_route_model(base, dtype, "config"), patched):
        with torch.no_grad():
            out = model(x[:, :prefill], use_cache=True)
            cache, steps = out.past_key_values, []
            for i in range(prefill, N_TOKENS):
                out = model(x[:, i : i + 1], **cache_kwargs(model, cache), use_cache=True)
                cache = out.past_key_values
                steps.append(out.logits[:, -1].double())
        errs.append(float((torch.stack(steps, 1) - ref[:, prefill:]).pow(2).mean().sqrt()))
    native_err, patched_err = errs
    assert patched_err <= 1.5 * native_err, errs
    assert [int(s.reshape(-1)[-1]) for s in seen[1:]] == list(range(prefill, N_TOKENS))
    assert all(s.dtype == torch.int64 for s in seen)


def test_token_positions_dtypes():
    from symformer.integrations.hf._common import token_positions

    q16, q64 = torch.zeros(1, 1, 3, 8, dtype=torch.bfloat16), torch.zeros(1, 1, 3, 8, dtype=torch.float64)
    ids = torch.tensor([[255, 256, 257]])
    p = token_positions(ids, None, None, q16)
    assert p.dtype == torch.int64 and p[:, 0].tolist() == [255, 256, 257]
    assert token_positions(ids.double(), None, None, q16).dtype == torch.float32
    assert token_positions(ids.double(), None, None, q64).dtype == torch.float64
    assert token_positions(None, torch.arange(2047, 2050), None, q16)[:, 0].tolist() == [2047, 2048, 2049]
