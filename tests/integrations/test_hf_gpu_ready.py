"""HF models with symformer cores on the GPU-ready path (issue 57), checked on the CPU: under value_checks("never")
(what a GPU gets) a padded forward, a training step and a decoding step with a StateCache make no host sync and give
the CPU path's outputs; a decoding step compiles as one graph (fullgraph) equal to eager; generate() compiles its
decoding forward (the StateCache is compileable, as StaticCache is) and picks eager's tokens."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402
from torch._dynamo.testing import CompileCounter  # noqa: E402

import symformer  # noqa: E402
from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf.cache import cache_kwargs, state_cache  # noqa: E402
from symformer.profiling import OpCounter  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2},
}


def _model(kind, family="llama", positional=None):
    m = tiny(family, torch.float64, kv_heads=2)
    if positional is not None:
        m = hf.patch_positional(m, positional)
    return hf.configure(m, attention=kind, **OPTIONS[kind]).eval()


def _batch(n=14):
    ids = torch.randint(0, 40, (2, n), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, :3] = 0  # row 1 left-padded by 3
    return ids, mask, (mask.cumsum(-1) - 1).clamp_min(0)


def _run(m, ids, mask, pos):
    """Full forward, a 10-token prefill and one decoded token with a StateCache (logits), then a training step's
    gradients; the host syncs of the decoding step and of the training step."""
    with torch.no_grad():
        full = m(ids, attention_mask=mask, position_ids=pos).logits
        cache = state_cache(m)
        m(ids[:, :10], attention_mask=mask[:, :10], position_ids=pos[:, :10], **cache_kwargs(m, cache))
        with OpCounter(stacks=True) as dec:
            step = m(ids[:, 10:11], attention_mask=mask[:, :11], position_ids=pos[:, 10:11], **cache_kwargs(m, cache))
    m.train()
    m.zero_grad()
    with OpCounter(stacks=True) as train:
        m(ids, attention_mask=mask, labels=ids).loss.backward()
    m.eval()
    grads = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    return [full, step.logits] + grads, dec, train


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_padded_decoding_and_training_make_no_host_sync_and_equal_the_cpu_path(kind):
    """The masks are not classified by reading them (hf.attention, masks section) and the mask builder does not
    test whether the padding hides anything: no sync; the outputs equal those of the checked CPU path."""
    m, (ids, mask, pos) = _model(kind), _batch()
    checked, _, _ = _run(m, ids, mask, pos)
    with symformer.value_checks("never"):
        fast, dec, train = _run(m, ids, mask, pos)
    assert dec.syncs == 0, dec.sync_stacks[:1]
    assert train.syncs == 0, train.sync_stacks[:1]
    assert all((a - b).abs().max() < 1e-12 for a, b in zip(checked, fast, strict=True))
    assert (fast[1][:, -1] - fast[0][:, 10]).abs().max() < 1e-10  # the decoded token's logits: the full forward's


def _compiled_decoding(kind, family, positional, steps=5):
    m, ids = _model(kind, family, positional), torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(2))
    cc = CompileCounter()
    torch._dynamo.reset()
    step = torch.compile(m, backend=cc, fullgraph=True)
    with torch.no_grad(), symformer.value_checks("never"):
        c1, c2 = state_cache(m), state_cache(m)
        m(ids, **cache_kwargs(m, c1))
        x = m(ids, **cache_kwargs(m, c2)).logits[:, -1:].argmax(-1)
        for _ in range(steps):
            got, ref = step(x, **cache_kwargs(m, c1)).logits, m(x, **cache_kwargs(m, c2)).logits
            assert (got - ref).abs().max() < 1e-12
            x = ref[:, -1:].argmax(-1)
    return cc.frame_count


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_compiled_decoding_step_is_one_graph_equal_to_eager(kind):
    """fullgraph=True: no break (the StateLayer's tag on the key tensor is cleared by setattr, which dynamo traces,
    not delattr, which it does not); the context length, a Python int, recompiles once (then it is dynamic)."""
    assert _compiled_decoding(kind, "llama", "string") <= 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["favor", "plash"])
@pytest.mark.parametrize("positional", [None, "rope", "string", "espr"])
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_compiled_decoding_step_of_every_part_and_core(family, positional, kind):
    assert _compiled_decoding(kind, family, positional, steps=8) <= 2


@pytest.mark.parametrize("kind", ["favor", pytest.param("plash", marks=pytest.mark.slow)])  # plash: ~12 s more
def test_generate_compiles_its_decoding_forward_and_picks_eager_tokens(kind):
    """A compileable cache makes generate() compile the decoding forward (transformers' auto-compile; on the CPU
    only with a CompileConfig that allows every device); greedy tokens equal eager's, across PLASH blocks."""
    from transformers import CompileConfig

    m, (ids, mask, _) = _model(kind), _batch()
    assert state_cache(m).is_compileable
    ref = m.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, disable_compile=True)
    config = CompileConfig(backend="eager", fullgraph=True, mode=None)
    config._compile_all_devices = True
    torch._dynamo.reset()
    with symformer.value_checks("never"):
        out = m.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, compile_config=config)
    assert hasattr(m, "_compiled_call") and torch.equal(out, ref)


def test_compiled_training_step_is_one_graph_with_eager_gradients():
    m, (ids, mask, _) = _model("plash", positional="string"), _batch()
    m.train()
    cc = CompileCounter()
    torch._dynamo.reset()
    with symformer.value_checks("never"):
        torch.compile(m, backend=cc, fullgraph=True)(ids, attention_mask=mask, labels=ids).loss.backward()
    got = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    m.zero_grad()
    m(ids, attention_mask=mask, labels=ids).loss.backward()
    ref = [p.grad for p in m.parameters() if p.grad is not None]
    assert cc.frame_count == 1 and all((a - b).abs().max() < 1e-12 for a, b in zip(got, ref, strict=True))


def test_masks_the_cores_cannot_honour_fail_loudly_without_value_reads():
    """Off the value-reading path (a GPU by default) the mask's structure is asserted on the device
    (torch._assert_async, no host sync): a sliding window, a per-head mask or a bias fails the step, never a silent
    wrong answer. On the CPU the device assert raises at once, with the same text as the CPU path's ValueError."""
    from symformer.integrations.hf.attention import mask_structure, split_state_mask
    from symformer.profiling import OpCounter

    tril = torch.ones(3, 3, dtype=torch.bool).tril()
    window = tril & ~torch.ones(3, 3, dtype=torch.bool).tril(-2)  # sliding window of 2
    with symformer.value_checks("never"):
        with pytest.raises(RuntimeError, match="^attention_mask: got a mask that is neither causal nor key padding"):
            mask_structure(window[None, None], 3, 3, True)
        with pytest.raises(RuntimeError, match="^attention_mask: got an additive bias mask"):
            mask_structure(torch.full((1, 1, 3, 3), 0.5), 3, 3, True)
        with pytest.raises(RuntimeError, match="neither causal nor key padding"):  # two new rows on a state
            split_state_mask(
                torch.ones(4, 4, dtype=torch.bool).tril()[None, None, 1:, :] & ~torch.eye(4)[1:].bool(), 3, 4
            )
        keep = torch.tensor([[False, True, True]])
        with OpCounter() as c:  # a valid causal + padding mask passes without a host read
            causal, k = mask_structure((tril & keep[:, None, :])[:, None], 3, 3, True)
        assert causal and c.syncs == 0 and k.tolist() == [[[[False, True, True]]]]
