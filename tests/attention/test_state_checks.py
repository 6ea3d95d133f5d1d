"""Decoding states checked against their use (issue 58, item 4): every mismatch of batch, heads, head dim, dtype,
device, another layer's or kind's state, a `start` that is not the states' length and too few states is a
ValueError naming the argument, what was given and what was expected. Metadata checks run in every mode; the
`start` check reads a tensor counter only where value checks run."""

import pytest
import torch

import symformer
from symformer.attention import FavorAttention, PlashAttention
from symformer.models.layers import KVCache, StaticKVCache
from symformer.models.lm import CausalLM
from symformer.models.transformer import TransformerConfig


def _qkv(b=1, h=2, n=5, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in range(3)]


def _favor(seed=0):
    return FavorAttention(8, n_features=16, chunk_size=4, seed=seed).double()


def _plash(seed=0):
    return PlashAttention(8, n_heads=2, M=4, D_k=8, causal_block=3, mixer_heads=2, seed=seed).double().eval()


def _filled(core, **kw):
    st = core.init_state()
    core(*_qkv(**kw), is_causal=True, state=st)
    return st


CORES = [pytest.param(_favor, "FAVOR\\+", id="favor"), pytest.param(_plash, "PLASH", id="plash")]


@pytest.mark.parametrize("make, name", CORES)
@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(b=3), "batch 3"),  # a batch-1 state broadcast silently over batch 3 before
        (dict(h=4), "4 heads"),
        (dict(d=4), None),  # the core's own head-dim check, or the state's
    ],
)
def test_state_shape_mismatch(make, name, kw, expected):
    core = make()
    st = _filled(core)
    if kw.get("d") == 4:
        q, k, v = _qkv(n=1, d=4)
        with pytest.raises(ValueError, match="^(state|q): got"):
            core(q, k, v, is_causal=True, state=st)
        return
    with pytest.raises(ValueError, match=f"^state: got 'a {name} state of batch 1, 2 heads.*expected .*{expected}"):
        core(*_qkv(n=1, **kw), is_causal=True, state=st)


@pytest.mark.parametrize("make, name", CORES)
def test_state_dtype_mismatch(make, name):
    core = make()
    st = _filled(core)
    if name == "PLASH":  # PLASH computes in its parameters' dtype; FAVOR+ accumulates in q's (float32 here)
        core.float()
    with pytest.raises(ValueError, match=f"^state: got 'a {name} state in torch.float64 on cpu'.*torch.float32"):
        core(*_qkv(n=1, dtype=torch.float32), is_causal=True, state=st)


@pytest.mark.parametrize("make, name", CORES)
def test_state_device_mismatch(make, name):
    """A state whose tensors are on another device (meta stands in for an accelerator here)."""
    core = make()
    st = _filled(core)
    if name == "FAVOR\\+":
        st.kvs, st.c = st.kvs.to("meta"), st.c.to("meta")
    else:
        st.kv = st.kv.to("meta")
    with pytest.raises(ValueError, match="^state: got .* on meta"):
        core(*_qkv(n=1), is_causal=True, state=st)


@pytest.mark.parametrize("make, name", CORES)
def test_another_layers_state(make, name):
    first = make(seed=0)  # alive while the second runs, as two layers of one model are (a freed core's id may recur)
    st = _filled(first)
    with pytest.raises(ValueError, match="^state: got .*another layer or model"):
        make(seed=0)(*_qkv(n=1), is_causal=True, state=st)


def test_kv_cache_mismatch():
    for cache in (KVCache(), StaticKVCache(16)):
        k, v = _qkv(n=3)[:2]
        cache.append(k, v)
        with pytest.raises(ValueError, match="^state: got .*batch 1.*expected batch 3"):
            cache.append(*_qkv(b=3, n=1)[:2])
        with pytest.raises(ValueError, match="^state: got .*float64.*expected .*float32"):
            cache.append(*_qkv(n=1, dtype=torch.float32)[:2])


def _lm(attention):
    cfg = TransformerConfig(
        d_model=16,
        n_heads=2,
        n_layers=2,
        d_ff=32,
        attention=attention,
        positional="rope",
        coord_dim=1,
        norm="rms",
        mlp="swiglu",
        attention_kwargs={
            "favor": {"n_features": 8},
            "plash": {"M": 4, "D_k": 8, "causal_block": 3, "mixer_heads": 2},
        }.get(attention, {}),
    )
    torch.manual_seed(0)
    return CausalLM(cfg, 11).double().eval()


@pytest.mark.parametrize("attention", ["favor", "plash", "softmax"])
def test_causal_lm_step_states(attention):
    lm = _lm(attention)
    ids = torch.randint(0, 11, (1, 6), generator=torch.Generator().manual_seed(0))
    states = lm.init_states()
    lm.step(ids[:, :5], states, 0)
    with pytest.raises(ValueError, match="^start: got 2, expected 5, the number of tokens the states hold"):
        lm.step(ids[:, 5:], states, 2)
    with pytest.raises(ValueError, match="^start: got 2, expected 5"):
        lm.step(ids[:, 5:], states, torch.tensor(2))
    with pytest.raises(ValueError, match="^states: got '1 states', expected 2, one per layer"):
        lm.step(ids[:, 5:], states[:1], 5)
    with pytest.raises(ValueError, match="^state: got 'a .*batch 1.*expected batch 3"):
        lm.step(ids[:, 5:].expand(3, 1), states, 5)
    other = _lm("softmax" if attention != "softmax" else "favor").init_states()
    with pytest.raises(ValueError, match="^state: got 'a (KVCache|FavorState)'"):
        lm.step(ids[:, :5], other, 0)
    assert lm.step(ids[:, 5:], states, 5).shape == (1, 1, 11)  # the refused calls changed nothing


@pytest.mark.parametrize("attention", ["favor", "plash"])
def test_start_check_reads_no_value_off_the_value_path(attention):
    """Under value_checks("never") (what a GPU runs) the tensor counter is not read: a wrong start is not seen,
    and the step makes no host read; with value checks on, it is refused."""
    lm = _lm(attention)
    ids = torch.randint(0, 11, (1, 6), generator=torch.Generator().manual_seed(0))
    states = lm.init_states()
    lm.step(ids[:, :5], states, 0)
    with symformer.value_checks("never"):
        lm.step(ids[:, 5:], states, torch.tensor(5))
    with pytest.raises(ValueError, match="^start: got 5, expected 6"):
        lm.step(ids[:, 5:], states, torch.tensor(5))
