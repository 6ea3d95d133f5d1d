"""CausalLM on the GPU-ready path (issue 57), checked on the CPU: a decoding step with its states makes no host sync
under value_checks("never") (what a GPU gets), compiles with fullgraph=True, equals eager, and decoding many tokens
with a compiled step and static states (StaticKVCache, a tensor `start`) compiles once; a training step compiles
whole (forward, backward through AOT autograd)."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import symformer
from symformer.models import CausalLM, TransformerConfig
from symformer.models.layers import KVCache, StaticKVCache
from symformer.profiling import OpCounter

CORES = {
    "softmax": {},
    "favor": {"n_features": 16, "chunk_size": 4},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2},
}


def _lm(attention="softmax", positional="rope", dtype=torch.float64):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, attention=attention, positional=positional, attention_kwargs=CORES[attention]
    )
    return CausalLM(cfg, 48).to(dtype).eval()


def _ids(b=2, n=13, seed=1):
    return torch.randint(0, 48, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def never():
    with symformer.value_checks("never"):
        yield


@pytest.mark.parametrize("attention", list(CORES))
def test_static_states_and_a_tensor_start_decode_like_the_full_forward(attention):
    """init_states(max_len=) (softmax: a StaticKVCache) and a 0-d tensor start give the full forward's logits."""
    lm, ids = _lm(attention), _ids(n=20)
    with torch.no_grad():
        full = lm(ids)
        states = lm.init_states(max_len=24)
        rows = [lm.step(ids[:, :13], states, torch.tensor(0))]
        rows += [lm.step(ids[:, t : t + 1], states, torch.tensor(t)) for t in range(13, 20)]
    assert (torch.cat(rows, dim=1) - full).abs().max() < 1e-10
    if attention == "softmax":
        assert all(isinstance(s, StaticKVCache) for s in states) and states[0].k.shape[-2] == 24
        assert int(states[0].length) == 20 and states[0].nbytes() == 2 * 2 * 4 * 24 * 8 * 8
        assert all(isinstance(s, KVCache) for s in lm.init_states())


def test_static_kv_cache_and_start_bad_input():
    lm, ids = _lm(), _ids()
    states = lm.init_states(max_len=14)
    with torch.no_grad():
        lm.step(ids, states, 0)
        with pytest.raises(ValueError, match=r"^state: got 'a StaticKVCache of 14 tokens holding 13, 2 more'"):
            lm.step(ids[:, :2], states, 13)
        with pytest.raises(ValueError, match="^start: .*a 0-d integer tensor"):
            lm.step(ids[:, :1], lm.init_states(), torch.tensor([1]))
        with pytest.raises(ValueError, match="^start: .*a 0-d integer tensor"):
            lm.step(ids[:, :1], lm.init_states(), torch.tensor(1.0))
        with pytest.raises(ValueError, match="^start: got -1, expected an integer >= 0"):
            lm.step(ids[:, :1], lm.init_states(), -1)
    with pytest.raises(ValueError, match="^max_len: got 0, expected an integer >= 1"):
        lm.init_states(max_len=0)


@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
@pytest.mark.parametrize("attention", list(CORES))
def test_decoding_step_and_training_step_make_no_host_sync(attention, positional, never):
    lm, ids = _lm(attention, positional, torch.float32), _ids()
    with torch.no_grad():
        states = lm.init_states(max_len=16)
        lm.step(ids, states, torch.tensor(0))
        with OpCounter(stacks=True) as c:
            lm.step(ids[:, :1], states, torch.tensor(13))
    assert c.syncs == 0, c.sync_stacks[:1]
    lm.train()
    with OpCounter(stacks=True) as t:
        lm.loss(ids, ids).backward()
    assert t.syncs == 0, t.sync_stacks[:1]


@pytest.mark.parametrize("attention", list(CORES))
def test_compiled_decoding_compiles_once_and_equals_eager(attention, never):
    """Compiled steps (fullgraph, static states, tensor start): one frame, logits equal eager's."""
    lm, ids = _lm(attention), _ids(b=1, n=8)
    cc = CompileCounter()
    step = torch.compile(lm.step, backend=cc, fullgraph=True)
    torch._dynamo.reset()
    with torch.no_grad():
        st, ref_st = lm.init_states(max_len=20), lm.init_states(max_len=20)
        x = lm.step(ids, st, 0)[:, -1:].argmax(-1)
        lm.step(ids, ref_st, 0)
        for t in range(8, 20):
            got, ref = step(x, st, torch.tensor(t)), lm.step(x, ref_st, torch.tensor(t))
            assert (got - ref).abs().max() < 1e-12
            x = ref[:, -1].argmax(-1, keepdim=True)
    assert cc.frame_count == 1


def test_compiled_training_step_is_one_graph_with_eager_gradients(never):
    lm, ids = _lm("favor"), _ids()
    lm.train()
    torch._dynamo.reset()
    cc = CompileCounter()
    loss = torch.compile(lm.loss, backend=cc, fullgraph=True)(ids, ids)
    loss.backward()
    got = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
    lm.zero_grad()
    lm.loss(ids, ids).backward()
    assert cc.frame_count == 1 and got.keys() == {n for n, p in lm.named_parameters() if p.grad is not None}
    assert all((got[n] - p.grad).abs().max() < 1e-12 for n, p in lm.named_parameters() if p.grad is not None)


def test_256_compiled_decoding_steps_compile_once(never):
    lm, ids = _lm("softmax"), _ids(b=1, n=4)
    cc = CompileCounter()
    step = torch.compile(lm.step, backend=cc, fullgraph=True)
    torch._dynamo.reset()
    with torch.no_grad():
        st = lm.init_states(max_len=260)
        x = lm.step(ids, st, 0)[:, -1:].argmax(-1)
        for t in range(4, 260):
            x = step(x, st, torch.tensor(t))[:, -1].argmax(-1, keepdim=True)
    assert cc.frame_count == 1


# softmax in the fast suite; FAVOR+ and PLASH (about 20 and 55 s of inductor compiles on two cores) with --runslow,
# their decoding steps' inductor parity is in the fast suite at the core (tests/attention/test_gpu_ready.py)
@pytest.mark.parametrize(
    "attention",
    ["softmax", pytest.param("favor", marks=pytest.mark.slow), pytest.param("plash", marks=pytest.mark.slow)],
)
def test_inductor_decoding_and_training_equal_eager_in_float64(attention, never):
    lm, ids = _lm(attention, "string"), _ids(b=1, n=8)
    torch._dynamo.reset()
    step = torch.compile(lm.step, fullgraph=True)
    with torch.no_grad():
        st, ref_st = lm.init_states(max_len=16), lm.init_states(max_len=16)
        lm.step(ids, st, 0), lm.step(ids, ref_st, 0)
        for t in range(8, 12):
            x = ids[:, t - 8 : t - 7].contiguous()
            assert (step(x, st, torch.tensor(t)) - lm.step(x, ref_st, torch.tensor(t))).abs().max() < 1e-12
    lm.train()
    loss = torch.compile(lm.loss, fullgraph=True)(ids, ids)
    assert (loss - lm.loss(ids, ids)).abs() < 1e-12


@pytest.mark.parametrize("attention", list(CORES))
def test_generate_with_a_compiled_step_picks_the_eager_tokens(attention, never):
    lm, ids = _lm(attention), _ids(n=6)
    torch._dynamo.reset()
    assert torch.equal(lm.generate(ids, 9, top_k=1, compile="eager"), lm.generate(ids, 9, top_k=1))
    a = lm.generate(ids, 5, temperature=0.7, generator=torch.Generator().manual_seed(3), compile="eager")
    assert torch.equal(a, lm.generate(ids, 5, temperature=0.7, generator=torch.Generator().manual_seed(3)))
    with pytest.raises(ValueError, match="^compile: got 'no-such-backend', expected one of "):
        lm.generate(ids, 2, compile="no-such-backend")
