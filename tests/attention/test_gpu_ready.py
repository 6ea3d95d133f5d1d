"""Issue 57 for the attention cores: no host sync where values cannot be read (a CPU run under
value_checks("never") makes the reads a GPU run makes), torch.compile(fullgraph=True) of the forward, the backward
and a decoding step with its state, no recompile per decoded token, and the CPU's value checks still in place."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import symformer
from symformer.attention import FavorAttention, PlashAttention, SoftmaxAttention
from symformer.profiling import OpCounter

N, PREFILL = 13, 7


def _qkv(n=N, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64, requires_grad=grad) for _ in range(3)]


def _keep(n=N):
    keep = torch.ones(2, 1, 1, n, dtype=torch.bool)
    keep[0, ..., :3] = False  # left padding of row 0
    return keep


def _make(name):
    if name == "softmax":
        return SoftmaxAttention()
    if name == "favor":
        return FavorAttention(8, n_features=16, chunk_size=4, seed=0).double()
    return PlashAttention(8, n_heads=2, M=4, D_k=8, causal_block=5, mixer_heads=2, seed=0).double().eval()


CORES = ["softmax", "favor", "plash"]
STATEFUL = ["favor", "plash"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _prefilled(core, q, k, v, keep):
    st = core.init_state()
    with torch.no_grad():
        core(
            q[..., :PREFILL, :],
            k[..., :PREFILL, :],
            v[..., :PREFILL, :],
            attn_mask=keep[..., :PREFILL],
            is_causal=True,
            state=st,
        )
    return st


def _token(x, i):
    return x[..., i : i + 1, :]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", CORES)
def test_forward_and_backward_make_no_host_sync(name, causal, masked):
    core, (q, k, v) = _make(name), _qkv(grad=True)
    keep = _keep() if masked else None
    with symformer.value_checks("never"), OpCounter(stacks=True) as c:
        core(q, k, v, attn_mask=keep, is_causal=causal).sum().backward()
    assert c.syncs == 0, c.sync_stacks[:1]
    assert c.shape_syncs == 0


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("name", STATEFUL)
def test_decoding_step_makes_no_host_sync(name, masked):
    core, (q, k, v) = _make(name), _qkv()
    keep = _keep() if masked else torch.ones(1, 1, 1, N, dtype=torch.bool)
    with symformer.value_checks("never"):
        st = _prefilled(core, q, k, v, keep)
        with torch.no_grad(), OpCounter(stacks=True) as c:
            for i in range(PREFILL, N):  # crosses a PLASH block rollover (causal_block 5)
                core(
                    _token(q, i),
                    _token(k, i),
                    _token(v, i),
                    attn_mask=keep[..., i : i + 1] if masked else None,
                    is_causal=True,
                    state=st,
                )
    assert c.syncs == 0, c.sync_stacks[:1]
    assert c.shape_syncs == 0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["softmax", "favor", pytest.param("plash", marks=pytest.mark.slow)])  # plash: ~15 s
def test_forward_and_backward_compile_whole_graph(name, causal):
    """fullgraph=True: a graph break raises; aot_eager also traces the backward. Gradients equal eager's."""
    core, keep = _make(name), _keep()
    q, k, v = _qkv(grad=True)
    fn = torch.compile(
        lambda q, k, v: core(q, k, v, attn_mask=keep, is_causal=causal), fullgraph=True, backend="aot_eager"
    )
    y = fn(q, k, v)
    grads = torch.autograd.grad(y.square().sum(), (q, k, v))
    y0 = core(q, k, v, attn_mask=keep, is_causal=causal)
    grads0 = torch.autograd.grad(y0.square().sum(), (q, k, v))
    assert (y - y0).abs().max() < 1e-12
    assert max((a - b).abs().max() for a, b in zip(grads, grads0)) < 1e-12


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("name", STATEFUL)
def test_compiled_decoding_loop_compiles_once(name, masked):
    """The state passed in and updated: one graph for every token (the counters are tensors, the shapes static;
    PLASH's block rollovers at tokens 10 and 15 take no other branch), equal to the eager full causal forward."""
    n = 19
    core, (q, k, v) = _make(name), _qkv(n=n)
    keep = _keep(n)
    with torch.no_grad():
        full = core(q, k, v, attn_mask=keep if masked else None, is_causal=True)
        st = _prefilled(core, q, k, v, keep if masked else torch.ones(1, 1, 1, n, dtype=torch.bool))
        counter = CompileCounter()
        step = torch.compile(
            lambda q, k, v, m: core(q, k, v, attn_mask=m, is_causal=True, state=st), backend=counter, fullgraph=True
        )
        ys = [
            step(_token(q, i), _token(k, i), _token(v, i), keep[..., i : i + 1] if masked else None)
            for i in range(PREFILL, n)
        ]
    assert counter.frame_count <= 2  # issue 57: at most twice; one in fact
    err = (
        (torch.cat(ys, dim=-2) - full[..., PREFILL:, :])[..., 3:, :]
        if masked
        else torch.cat(ys, -2) - full[..., PREFILL:, :]
    )
    assert err.abs().max() < 1e-12


@pytest.mark.parametrize("name", STATEFUL)
def test_decoding_step_compiles_with_aot_eager(name):
    core, (q, k, v) = _make(name), _qkv()
    keep = _keep()
    st = _prefilled(core, q, k, v, keep)
    ref = _prefilled(core, q, k, v, keep)
    step = torch.compile(
        lambda q, k, v, m: core(q, k, v, attn_mask=m, is_causal=True, state=st), fullgraph=True, backend="aot_eager"
    )
    with torch.no_grad():
        for i in range(PREFILL, N):
            args = (_token(q, i), _token(k, i), _token(v, i), keep[..., i : i + 1])
            y, y0 = step(*args), core(*args[:3], attn_mask=args[3], is_causal=True, state=ref)
            assert (y - y0).abs().max() < 1e-12


@pytest.mark.parametrize("name", STATEFUL)
def test_inductor_decoding_step_equals_eager_float64(name):
    core, (q, k, v) = _make(name), _qkv()
    keep = _keep()
    st, ref = _prefilled(core, q, k, v, keep), _prefilled(core, q, k, v, keep)
    step = torch.compile(lambda q, k, v: core(q, k, v, is_causal=True, state=st), fullgraph=True)
    with torch.no_grad():
        for i in range(PREFILL, N):
            y = step(_token(q, i), _token(k, i), _token(v, i))
            y0 = core(_token(q, i), _token(k, i), _token(v, i), is_causal=True, state=ref)
            assert (y - y0).abs().max() <= 1e-12


@pytest.mark.parametrize("name", STATEFUL)
def test_value_checks_still_read_values_on_the_cpu(name):
    """Default ("auto"): a NaN input is a ValueError naming it, in the forward and the decoding step; "always" does
    the same; "never" reads nothing (the NaN reaches the output, as it would on a GPU)."""
    core, (q, k, v) = _make(name), _qkv()
    k[1, 0, 2, 3] = float("nan")
    for mode in ("auto", "always"):
        with symformer.value_checks(mode):
            with pytest.raises(ValueError, match="^k: "):
                core(q, k, v)
            st = core.init_state()
            with pytest.raises(ValueError, match="^k: "):
                with torch.no_grad():
                    core(q, k, v, is_causal=True, state=st)
    with symformer.value_checks("never"), torch.no_grad():
        assert core(q, k, v).isnan().any()


def test_eager_plash_decoding_runs_the_stage_ii_iii_pass_once_per_block(monkeypatch):
    """In eager mode the host counts the tokens it feeds (no device read), so the block rollover's Stage II-III pass
    runs once per finished block, not at every token as in the compiled graph; both equal the full forward. Fails if
    the eager step takes the every-token torch.where path."""
    from symformer.attention import plash_state

    calls = []
    real = plash_state.summary_kv
    monkeypatch.setattr(plash_state, "summary_kv", lambda *a: calls.append(1) or real(*a))
    n = 19
    core, (q, k, v) = _make("plash"), _qkv(n=n)
    with torch.no_grad():
        full = core(q, k, v, is_causal=True)
        st = _prefilled(core, q, k, v, torch.ones(1, 1, 1, n, dtype=torch.bool))
        calls.clear()
        ys = [core(_token(q, i), _token(k, i), _token(v, i), is_causal=True, state=st) for i in range(PREFILL, n)]
    assert len(calls) == 2  # the blocks finished by tokens 10 and 15 (causal_block 5)
    assert (torch.cat(ys, -2) - full[..., PREFILL:, :]).abs().max() < 1e-12
    with torch.no_grad():
        core(_token(q, 0), _token(k, 0), _token(v, 0), is_causal=True, state=st)  # token 19 ends block 15..19
    assert len(calls) == 3
    with symformer.value_checks("never"), OpCounter() as c, torch.no_grad():  # token 20 opens a block: no pass
        core(_token(q, 1), _token(k, 1), _token(v, 1), is_causal=True, state=st)
    assert c.syncs == 0 and len(calls) == 3
