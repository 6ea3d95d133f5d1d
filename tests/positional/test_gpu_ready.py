"""Issue 57 for the positional parts: no host sync where values cannot be read (counted on the CPU under
value_checks("never"), what an accelerator gets), torch.compile(fullgraph=True) of the forward and backward, the
same values compiled, no recompile per length, the CPU's value checks unchanged, and a sync-free table cache."""

from __future__ import annotations

import pytest
import torch

import symformer
from symformer.positional import ESPR, STRING, CirculantSTRING, PartialRotary, RoPE
from symformer.positional._cache import ValueCache
from symformer.positional.absolute import LearnedPE, SinusoidalPE
from symformer.positional.expm import MAX_SQUARINGS, expm_skew
from symformer.profiling import OpCounter, compiled_graphs

PARTS = {
    "rope_half": lambda: RoPE(8),
    "rope_interleaved": lambda: RoPE(8, pairing="interleaved"),
    "rope_mixed_2d": lambda: RoPE(8, 2, mode="mixed", learnable=True),
    "rope_mixed_per_head": lambda: RoPE(8, 2, mode="mixed", n_heads=2, seed=0),  # rope-vit's RoPE-Mixed
    "rope_interleaved_3d": lambda: RoPE(8, 3, pairing="interleaved", learnable=True),
    "string": lambda: STRING(8, init_scale=0.1, seed=0),
    "string_2d": lambda: STRING(8, 2, init_scale=0.1, seed=0),
    "circulant_string": lambda: CirculantSTRING(8, 2, seed=0),
    "espr": lambda: ESPR(8, seed=0),
    "espr_free": lambda: ESPR(8, commuting_init=False, seed=0),
    "espr_2d": lambda: ESPR(8, 2, d_act=6, commuting_init=False, seed=0),
    "partial_rope": lambda: PartialRotary(RoPE(4), 8),
    "partial_string": lambda: PartialRotary(STRING(4, init_scale=0.1, seed=0), 8),
}


def _syncs(counter: OpCounter) -> int:
    """Host reads, value-sized outputs (unique, nonzero: a sync on a GPU too) and linalg's host error checks."""
    return counter.syncs + getattr(counter, "shape_syncs", 0) + counter.by_op["_linalg_check_errors"]


def _positions(part, n: int, start: int = 0, batch: int | None = None) -> torch.Tensor:
    """Token positions (int64) for C = 1, a float grid for C > 1; (B, N, C) when batch is given."""
    if part.coord_dim == 1:
        pos = torch.arange(start, start + n)[:, None]
    else:
        pos = torch.rand(n, part.coord_dim, generator=torch.Generator().manual_seed(start), dtype=torch.float64) * 4
    return pos if batch is None else pos.expand(batch, *pos.shape).clone()


def _qk(n: int, dh: int = 8, dtype=torch.float64, grad: bool = False):
    g = torch.Generator().manual_seed(n)
    q, k = (torch.randn(2, n, 2, dh, generator=g, dtype=dtype).transpose(1, 2) for _ in range(2))  # HF's layout
    return (q.requires_grad_(), k.requires_grad_()) if grad else (q, k)


@pytest.mark.parametrize("name", PARTS)
def test_no_host_sync_forward_backward_and_decoding(name):
    part = PARTS[name]().double()
    with symformer.value_checks("never"), OpCounter() as c:
        for batch in (None, 2):  # shared (N, C) and batched (B, N, C) positions
            q, k = _qk(5, grad=True)
            a, b = part(q, k, _positions(part, 5, batch=batch))
            ((a * b).sum() + part.penalty()).backward()
        with torch.no_grad():  # decoding: a prompt, then one token at a time (the cache's miss and hit paths)
            part(*_qk(5), _positions(part, 5))
            for step in range(3):
                pos = _positions(part, 1, 5 + step)
                part(*_qk(1), pos)
                part(*_qk(1), pos)
    assert c.ops > 0 and _syncs(c) == 0, c.by_op


def test_absolute_tables_no_host_sync():
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(5)[:, None]
    with symformer.value_checks("never"), OpCounter() as c:
        for pe in (SinusoidalPE(8), LearnedPE(8, max_len=16).double()):
            pe(x, pos.double() if isinstance(pe, SinusoidalPE) else pos).sum().backward()
    assert _syncs(c) == 0, c.by_op


@pytest.mark.parametrize("name", PARTS)
def test_compiles_whole_graph_forward_and_backward(name):
    """fullgraph=True raises at the first graph break; aot_eager also traces the backward graph."""
    part = PARTS[name]().double()
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, p: part(q, k, p), fullgraph=True, backend="aot_eager")
    q, k = _qk(5, grad=True)
    pos = _positions(part, 5)
    a, b = fn(q, k, pos)
    (a * b).sum().backward()
    got = (a, b, q.grad.clone(), *(p.grad.clone() for p in part.parameters() if p.requires_grad))
    q.grad, k.grad = None, None
    part.zero_grad(set_to_none=True)
    a, b = part(q, k, pos)
    (a * b).sum().backward()
    want = (a, b, q.grad, *(p.grad for p in part.parameters() if p.requires_grad))
    assert all((x - y).abs().max() <= 1e-12 for x, y in zip(got, want))


def test_no_recompile_per_length():
    part = RoPE(8).double()
    torch._dynamo.reset()
    before = compiled_graphs()
    fn = torch.compile(lambda q, k, p: part(q, k, p), fullgraph=True, backend="eager")
    with torch.no_grad():
        for n in (5, 6, 7, 9, 12):
            fn(*_qk(n), _positions(part, n))
    assert compiled_graphs() - before <= 2  # the first length, then one graph with a dynamic length


@pytest.mark.parametrize("name", ["rope_half", "espr_free"])
def test_inductor_equals_eager(name):
    part = PARTS[name]().double()
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, p: part(q, k, p), fullgraph=True)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        q, k = _qk(5, dtype=dtype)
        pos = _positions(part, 5)
        with torch.no_grad():
            got, want = fn(q, k, pos), part(q, k, pos)
        assert all(x.dtype == dtype and (x - y).abs().max() <= tol for x, y in zip(got, want)), dtype


@pytest.mark.parametrize("name", PARTS)
def test_value_checks_still_run_on_the_cpu(name):
    part = PARTS[name]().double()
    q, k = _qk(5)
    q = q.clone()
    q[0, 0, 0, 0] = float("nan")
    pos = _positions(part, 5)
    with pytest.raises(ValueError, match="^q: got 'a tensor with NaN or inf entries', expected finite values$"):
        part(q, k, pos)  # "auto": the CPU in eager mode reads values
    with symformer.value_checks("never"):
        part(q, k, pos)  # what an accelerator gets: no read
    torch._dynamo.reset()
    with symformer.value_checks("always"), pytest.raises(ValueError, match="NaN or inf"):
        torch.compile(lambda *a: part(*a), backend="eager")(q, k, pos)  # read even under compile


def test_learned_table_range_check_on_the_cpu_only():
    pe = LearnedPE(8, max_len=4)
    x = torch.randn(1, 5, 8)
    with pytest.raises(ValueError, match=r"^positions: got 'non-integer or out-of-range coordinates'"):
        pe(x, torch.arange(5)[:, None])
    with symformer.value_checks("never"), OpCounter() as c:
        pe(x, torch.arange(4, -1, -1)[:, None] % 4)
    assert _syncs(c) == 0


def test_cache_keys_by_identity_and_version_without_sync():
    cache = ValueCache()
    pos, beta = torch.arange(4.0)[:, None], torch.randn(3)
    with symformer.value_checks("never"), OpCounter() as c:
        cache.store("k", (pos, beta), "table")
        assert cache.lookup("k", (pos, beta)) == "table"
        assert cache.lookup("k", (pos.clone(), beta)) is None  # equal values, another tensor: rebuilt, never wrong
        with torch.no_grad():
            beta.mul_(2)  # an in-place change (an optimizer step) bumps the version
        assert cache.lookup("k", (pos, beta)) is None
        with torch.inference_mode():
            inf_pos = torch.arange(4.0)[:, None]
        cache.store("k", (inf_pos, beta), "x")  # no version counter: not cached
        assert cache.lookup("k", (inf_pos, beta)) is None
    assert _syncs(c) == 0 and c.by_op["equal"] == 0
    cache.store("v", (pos, beta), "by value")  # "auto" on the CPU: by value, a fresh tensor of equal values hits
    assert cache.lookup("v", (pos.clone(), beta.clone())) == "by value"


def test_cache_bypassed_under_compile(monkeypatch):
    import symformer.positional._cache as cache_module

    monkeypatch.setattr(cache_module, "is_compiling", lambda: True)
    cache, pos = ValueCache(), torch.arange(3.0)
    assert cache.store("k", (pos,), "t") == "t" and len(cache) == 0 and cache.lookup("k", (pos,)) is None


@pytest.mark.parametrize("mode", ["auto", "never"])
def test_cached_tables_follow_parameter_changes(mode):
    part = STRING(8, init_scale=0.1, seed=0).double()
    pos = torch.arange(5)[:, None]
    q, k = _qk(5)
    with symformer.value_checks(mode), torch.no_grad():
        before = part(q, k, pos)
        part.skew_param.add_(0.05)
        part.rope.beta.mul_(1.5)
        after = part(q, k, pos)
        fresh = STRING(8, init_scale=0.1, seed=0).double()
        fresh.load_state_dict(part.state_dict())
        want = fresh(q, k, pos)
    assert not torch.allclose(before[0], after[0])
    assert all((a - b).abs().max() <= 1e-14 for a, b in zip(after, want))


def test_folded_string_reads_no_buffer():
    part = STRING(8, init_scale=0.1, seed=0).double()
    q_lin, k_lin = torch.nn.Linear(16, 16).double(), torch.nn.Linear(16, 16).double()
    part.fold_into(q_lin, k_lin)
    with symformer.value_checks("never"), OpCounter() as c:
        part(*_qk(5), torch.arange(5)[:, None])
    assert _syncs(c) == 0 and part.is_folded
    other = STRING(8, init_scale=0.1, seed=0).double()
    other.load_state_dict(part.state_dict())  # the flag travels with the weights it was folded into
    assert other.is_folded and not other.can_fold


@pytest.mark.parametrize("d_act", [6, 8])
def test_espr_spectral_maps_equal_matrix_exp(d_act):
    """The sync-free 1-D path exp(nL) = V diag(e^{-i n lam}) V^H (T0.11) against torch.linalg.matrix_exp per
    position, for integer, negative, fractional and batched positions."""
    fast = ESPR(8, 1, d_act=d_act, commuting_init=False, init_scale=0.4, seed=1).double()
    ref = ESPR(8, 1, d_act=d_act, commuting_init=False, init_scale=0.4, seed=1, exp_method="matrix_exp").double()
    with torch.no_grad():
        fast.skew_param.normal_(0, 0.3, generator=torch.Generator().manual_seed(2))
        ref.load_state_dict(fast.state_dict())
    q = torch.randn(2, 2, 6, 8, dtype=torch.float64)
    for pos in ([0, 1, 2, 5, 3, 1], [-4, 7, 0, -1, 2.5, 30]):
        pos = torch.tensor(pos, dtype=torch.float64)[:, None]
        for p in (pos, torch.stack((pos, pos.flip(0)))):
            with torch.no_grad(), symformer.value_checks("never"), OpCounter() as c:
                got = fast(q, q, p)
            want = ref(q, q, p)
            assert _syncs(c) == 0 and all((a - b).abs().max() <= 1e-12 for a, b in zip(got, want))


def test_expm_static_squarings_equal_host_squarings():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 5, 5, generator=g, dtype=torch.float64)
    a = (a - a.mT) * torch.tensor([0.01, 0.5, 3.0, 40.0, 700.0, 9000.0], dtype=torch.float64)[:, None, None]
    want = torch.linalg.matrix_exp(a)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-3)):
        with symformer.value_checks("never"), OpCounter() as c:
            got = expm_skew(a.to(dtype))
        assert _syncs(c) == 0 and (got.double() - want).abs().max() <= tol
    with symformer.value_checks("never"):
        beyond = expm_skew(torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64) * 6 * 2.0**MAX_SQUARINGS)
    assert beyond.isnan().all()  # past the fixed squaring count: NaN, never a silently wrong rotation


@pytest.mark.parametrize("positional", ["rope", "string", "espr"])
def test_patched_llama_decoding_step_launches(positional):
    """Issue 57 item 4: a patched rotary part adds at most 20% aten ops (about one launch each) to a decoding step
    of a 4-layer Llama, with no host sync in the step nor in a training step."""
    transformers = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache

    from symformer.integrations import hf

    def decode_step(pos):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
        )
        m = transformers.LlamaForCausalLM(cfg).eval()
        m = hf.patch_positional(m, pos) if pos else m
        ids = torch.randint(0, 256, (1, 32))
        with torch.no_grad(), symformer.value_checks("never"):
            cache = DynamicCache(config=m.config)
            m(ids, past_key_values=cache, use_cache=True)
            with OpCounter() as c:
                for t in range(2):
                    m(ids[:, t : t + 1], past_key_values=cache, use_cache=True)
        m.train()
        with symformer.value_checks("never"), OpCounter() as t:
            m(ids[:, :8], labels=ids[:, :8]).loss.backward()
        return c, t

    native, _ = decode_step(None)
    patched, train = decode_step(positional)
    assert _syncs(patched) == 0 and _syncs(train) == 0
    assert patched.ops <= 1.2 * native.ops, (patched.ops, native.ops)


def test_expm_static_path_launches():
    """The static squarings (what an accelerator runs) are launch-bound: forward + backward of a float32 batch takes
    at most 470 aten ops (457 measured; 573 before the Taylor coefficients became one cumulative product and a step
    r @ where(mask, r, I)), and still equals the host-squaring path."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 6, 6, generator=g)
    a = (a - a.mT) * torch.tensor([0.1, 3.0, 50.0, 900.0])[:, None, None]
    host = expm_skew(a)  # "auto" on the CPU: the host-read squaring counts, the same products
    a.requires_grad_()
    with symformer.value_checks("never"), OpCounter() as c:
        got = expm_skew(a)
        got.sum().backward()
    assert c.ops <= 470 and _syncs(c) == 0
    assert (got - host).abs().max() <= 1e-5
    assert (got.double() - torch.linalg.matrix_exp(a.detach().double())).abs().max() <= 2e-3
    ref = a.detach().double().requires_grad_()
    torch.linalg.matrix_exp(ref).sum().backward()
    assert (a.grad.double() - ref.grad).abs().max() <= 1e-3 * ref.grad.abs().max()
