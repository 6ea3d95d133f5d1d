"""The PLASH kernels (kernels/plash.py) against their torch references and the torch path of PlashAttention, on CPU
tensors under TRITON_INTERPRET=1 (Triton reads it when it decorates a kernel: kernels/_plash_triton.build does that at
the first launch in the mode then set, so setting the variable per test is enough)."""

import math

import pytest
import torch

from symformer._torch_compat import TRITON_OP
from symformer.attention import PlashAttention
from symformer.kernels import _plash_triton
from symformer.kernels import plash as kp

pytest.importorskip("triton", reason="the PLASH kernels need Triton (pip install symformer[triton])")
pytestmark = pytest.mark.skipif(not TRITON_OP, reason="the PLASH kernels need torch >= 2.6 (triton_op)")

F64 = torch.float64


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    import triton.language as tl

    if type(tl.zeros).__name__ != "InterpretedFunction":
        pytest.skip("Triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it first)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("SYMFORMER_KERNELS", raising=False)


@pytest.fixture
def launches(monkeypatch):
    """Counts kernel launches (kernel look-ups): the kernel path really ran."""
    seen = []
    real = _plash_triton.build

    def counting(interpret):
        seen.append(interpret)
        return real(interpret)

    monkeypatch.setattr(_plash_triton, "build", counting)
    return seen


def _grads(out, grad, inputs):
    return torch.autograd.grad((out * grad).sum(), inputs, allow_unused=True)


def _close(a, b, tol):
    for x, y in zip(a, b):
        if y is None:
            assert x is None or x.abs().max() == 0
        else:
            torch.testing.assert_close(x, y, atol=tol, rtol=tol)


def _keep(n, length, lead):
    keep = torch.rand(n, length, generator=torch.Generator().manual_seed(1)) > 0.3
    keep[0, :lead] = False  # a left-padded row
    return keep


def test_stage1_forward_and_backward_match_the_reference(launches):
    torch.manual_seed(0)
    n, length, d, m, block = 3, 37, 8, 5, 16  # N not a multiple of the block
    k, v = torch.randn(n, length, d, dtype=F64, requires_grad=True), torch.randn(n, length, 6, dtype=F64)
    v.requires_grad_(True)
    p = torch.randn(m, d, dtype=F64, requires_grad=True)
    keep = _keep(n, length, 9)
    out = kp.stage1_block_sums(k, v, p, 0.7, keep, block)
    ref = kp.stage1_block_sums_reference(k, v, p, 0.7, keep, block)
    assert launches
    _close(out, ref, 1e-12)
    gk, gv = torch.randn_like(ref[0]), torch.randn_like(ref[1])
    got = torch.autograd.grad((out[0] * gk).sum() + (out[1] * gv).sum(), (k, v, p))
    want = torch.autograd.grad((ref[0] * gk).sum() + (ref[1] * gv).sum(), (k, v, p))
    _close(got, want, 1e-12)
    assert got[0][0, :9].abs().max() == 0  # the padded keys added nothing


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_stage1_lower_precision_within_its_rounding(dtype):
    torch.manual_seed(0)
    k, v, p = torch.randn(2, 19, 8, dtype=dtype), torch.randn(2, 19, 8, dtype=dtype), torch.randn(4, 8, dtype=dtype)
    out = kp.stage1_block_sums(k, v, p, 1.0, None, 8)
    ref = kp.stage1_block_sums_reference(k.double(), v.double(), p.double(), 1.0, None, 8)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    for x, y in zip(out, ref):
        assert x.dtype == dtype
        torch.testing.assert_close(x.double(), y, atol=tol * 8, rtol=tol)  # one rounding of sums of 8 terms


@pytest.mark.parametrize("in_block", [True, False])
def test_block_readout_forward_and_backward_match_the_reference(in_block):
    torch.manual_seed(0)
    n, length, d, m, block = 2, 21, 8, 5, 8
    nb = -(-length // block)
    q, k, v = (torch.randn(n, length, d, dtype=F64, requires_grad=True) for _ in range(3))
    k_g, v_g = (torch.randn(n, nb, m, d, dtype=F64, requires_grad=True) for _ in range(2))
    has = torch.tensor([[False, True, True], [False, False, True]])
    keep = _keep(n, length, 10)  # row 0's first block sees no kept key: outputs 0
    args = (q, k, v, k_g, v_g, has, keep, 0.4, block, in_block)
    out, ref = kp.block_readout(*args), kp.block_readout_reference(*args)
    _close([out], [ref], 1e-12)
    grad = torch.randn_like(ref)
    _close(_grads(out, grad, (q, k, v, k_g, v_g)), _grads(ref, grad, (q, k, v, k_g, v_g)), 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_readout_lower_precision_within_its_rounding(dtype):
    torch.manual_seed(0)
    n, length, d, m, block = 2, 21, 8, 5, 8
    q, k, v = (torch.randn(n, length, d).to(dtype) for _ in range(3))
    k_g, v_g = (torch.randn(n, 3, m, d).to(dtype) for _ in range(2))
    has = torch.tensor([[False, True, True], [False, True, True]])
    out = kp.block_readout(q, k, v, k_g, v_g, has, None, 0.4, block)
    ref = kp.block_readout_reference(*(x.double() for x in (q, k, v, k_g, v_g)), has, None, 0.4, block, True)
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)  # float32 inside, one rounding at the end


@pytest.mark.parametrize("per_row", [False, True])
def test_decode_step_matches_the_reference(per_row):
    torch.manual_seed(0)
    n, d, m, c = 3, 8, 5, 6
    q, k, v = (torch.randn(n, d, dtype=F64) for _ in range(3))
    state = (
        torch.randn(n, c + m, 2 * d, dtype=F64),
        torch.zeros(n, c + m, dtype=F64).masked_fill_(torch.rand(n, c + m) > 0.6, float("-inf")),
        torch.randn(n, m, 2 * d, dtype=F64),
        torch.randint(0, 5, (n, 1)),
    )
    pos = torch.tensor([[1], [5], [0]]) if per_row else torch.tensor([2])
    keep = torch.tensor([[True], [False], [True]])
    p = torch.randn(m, d, dtype=F64)
    got, want = [t.clone() for t in state], [t.clone() for t in state]
    out = kp.decode_step(q, k, v, keep, pos, *got, p, 0.7, 0.3)
    ref = kp.decode_step_reference(q, k, v, keep, pos, *want, p, 0.7, 0.3)
    _close([out, *got], [ref, *want], 1e-12)
    assert not torch.equal(got[2], state[2])  # the sums moved (a kept key)


def _pair(**kw):
    kw = {"head_dim": 8, "M": 5, "D_k": 16, "mixer_heads": 2, "causal_block": 8, "seed": 0, **kw}
    fused, ref = PlashAttention(**kw, kernel="triton").double(), PlashAttention(**kw, kernel="torch").double()
    ref.load_state_dict(fused.state_dict())
    return fused, ref


def test_core_causal_with_left_padding_matches_the_torch_path(launches):
    torch.manual_seed(0)
    fused, ref = _pair()
    q, k, v = (torch.randn(2, 2, 19, 8, dtype=F64, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 1, 1, 19, dtype=torch.bool)
    keep[0, ..., :5] = False
    out = fused(q, k, v, attn_mask=keep, is_causal=True)
    want = ref(q, k, v, attn_mask=keep, is_causal=True)
    assert launches
    _close([out], [want], 1e-12)
    grad = torch.randn_like(out)
    inputs = (q, k, v, fused.prototypes)
    _close(_grads(out, grad, inputs), _grads(want, grad, (q, k, v, ref.prototypes)), 1e-11)


def test_core_non_causal_matches_the_torch_path():
    torch.manual_seed(0)
    fused, ref = _pair()
    q, k, v = (torch.randn(1, 2, 13, 8) for _ in range(3))
    with torch.no_grad():
        _close([fused.float()(q, k, v)], [ref.float()(q, k, v)], 1e-5)


def test_decoding_on_the_kernel_equals_the_torch_step_and_the_full_forward():
    torch.manual_seed(0)
    fused, ref = _pair(causal_block=4)
    n = 11
    q, k, v = (torch.randn(1, 2, n, 8, dtype=F64) for _ in range(3))
    keep = torch.ones(1, 1, 1, n, dtype=torch.bool)
    keep[..., :2] = False
    with torch.no_grad():
        full = ref(q, k, v, attn_mask=keep, is_causal=True)
        outs = {}
        for name, core in (("fused", fused), ("torch", ref)):
            st = core.init_state()
            first = (t[..., :3, :] for t in (q, k, v))
            steps = [core(*first, attn_mask=keep[..., :3], is_causal=True, state=st)]
            for i in range(3, n):
                x = (t[..., i : i + 1, :] for t in (q, k, v))
                steps.append(core(*x, attn_mask=keep[..., i : i + 1], is_causal=True, state=st))
            outs[name] = torch.cat(steps, -2)
    _close([outs["fused"]], [outs["torch"]], 1e-12)
    _close([outs["fused"]], [full], 1e-12)


def test_forced_kernel_on_unsupported_input_names_kernel():
    core = PlashAttention(head_dim=8, M=4, D_k=16, mixer_heads=2, causal_block=160, seed=0, kernel="triton")
    q = torch.randn(1, 1, 5, 8)
    with pytest.raises(ValueError, match="kernel.*causal_block=160 above 128"):
        core(q, q, q, is_causal=True)
    core.train()
    core.dropout = 0.1
    with pytest.raises(ValueError, match="kernel.*dropout"):
        core.attend(q[0], q[0, :, :4], q[0, :, :4], None)


def test_default_on_cpu_is_the_torch_path(launches, monkeypatch):
    monkeypatch.delenv("SYMFORMER_KERNELS", raising=False)
    core = PlashAttention(head_dim=8, M=4, D_k=16, mixer_heads=2, seed=0)
    q = torch.randn(1, 1, 5, 8)
    core(q, q, q, is_causal=True)
    assert not launches
    with pytest.raises(ValueError, match="kernel.*'cuda'"):
        PlashAttention(head_dim=8, kernel="cuda")


@pytest.mark.slow
def test_gradcheck_of_the_kernels():
    torch.manual_seed(0)
    k, v = torch.randn(1, 7, 4, dtype=F64, requires_grad=True), torch.randn(1, 7, 4, dtype=F64, requires_grad=True)
    p = torch.randn(3, 4, dtype=F64, requires_grad=True)
    keep = torch.tensor([[False, True, True, False, True, True, True]])
    assert torch.autograd.gradcheck(lambda *x: kp.stage1_block_sums(*x, 0.8, keep, 4), (k, v, p))
    q = torch.randn(1, 7, 4, dtype=F64, requires_grad=True)
    k_g, v_g = (torch.randn(1, 2, 3, 4, dtype=F64, requires_grad=True) for _ in range(2))
    has = torch.tensor([[False, True]])
    fn = lambda *x: kp.block_readout(*x, has, keep, 1 / math.sqrt(4), 4)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, k_g, v_g))


@pytest.mark.slow
def test_core_larger_shapes_float32():
    torch.manual_seed(0)
    fused, ref = _pair(causal_block=32)
    fused, ref = fused.float(), ref.float()
    q, k, v = (torch.randn(2, 2, 200, 8, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        out, want = fused(q, k, v, is_causal=causal), ref(q, k, v, is_causal=causal)
        _close([out], [want], 1e-5)
        grad = torch.randn_like(out)
        _close(_grads(out, grad, (q, k, v)), _grads(want, grad, (q, k, v)), 1e-4)


@pytest.mark.slow
def test_kernels_suite_section_runs_under_the_interpreter(monkeypatch, tmp_path):
    """benchmarks/_kernels_plash.plash_rows end to end at toy sizes (its numbers mean nothing on the interpreter)."""
    from symformer.benchmarks import _kernels_plash as section
    from symformer.benchmarks.base import BenchContext

    monkeypatch.setattr(section, "CORE_NS", (40,))
    monkeypatch.setattr(section, "HEADLINE_N", 40)
    monkeypatch.setattr(section, "DECODE_CONTEXT", 40)
    monkeypatch.setattr(section, "DECODE_BATCH", 1)
    monkeypatch.setattr(section, "COMPILE_BACKEND", "aot_eager")  # inductor's C++ build takes minutes on the CPU
    rows, ratios = section.plash_rows(BenchContext(out_dir=tmp_path, quick=True, device="cpu"))
    assert {"plash_core_frac_matmul_peak_8192", "plash_decode_vs_sdpa_4k"} <= set(ratios)
    assert {r["method"] for r in rows} == {"plash_triton", "plash_torch", "plash_triton_compiled", "sdpa"}


@pytest.mark.slow
def test_core_compiles_fullgraph_on_the_kernels():
    """torch.compile(fullgraph=True) through the kernel ops and their backward (aot_eager traces it): no graph break,
    eager's outputs and gradients. Under the interpreter the ops are opaque custom_ops; on a GPU, triton_ops."""
    torch.manual_seed(0)
    fused, _ = _pair()
    q, k, v = (torch.randn(1, 2, 19, 8, dtype=F64, requires_grad=True) for _ in range(3))
    keep = torch.ones(1, 1, 1, 19, dtype=torch.bool)
    keep[..., :3] = False

    def run(q, k, v):
        return fused(q, k, v, attn_mask=keep, is_causal=True)

    explained = torch._dynamo.explain(run)(q, k, v)
    assert explained.graph_break_count == 0
    assert any("plash_readout" in str(n.target) for g in explained.graphs for n in g.graph.nodes)
    out = torch.compile(run, fullgraph=True, backend="aot_eager")(q, k, v)
    want = run(q, k, v)
    grad = torch.randn_like(out)
    _close([out], [want], 1e-12)
    _close(_grads(out, grad, (q, k, v)), _grads(want, grad, (q, k, v)), 1e-12)


@pytest.mark.slow
def test_decoding_step_compiles_fullgraph_on_the_kernel():
    torch.manual_seed(0)
    fused, ref = _pair(causal_block=4)
    q, k, v = (torch.randn(1, 2, 9, 8, dtype=F64) for _ in range(3))
    with torch.no_grad():
        full = ref(q, k, v, is_causal=True)
        st = fused.init_state()
        outs = [fused(q[..., :2, :], k[..., :2, :], v[..., :2, :], is_causal=True, state=st)]
        step = torch.compile(
            lambda a, b, c: fused(a, b, c, is_causal=True, state=st), fullgraph=True, backend="aot_eager"
        )
        for i in range(2, 9):
            outs.append(step(q[..., i : i + 1, :], k[..., i : i + 1, :], v[..., i : i + 1, :]))
    _close([torch.cat(outs, -2)], [full], 1e-12)
