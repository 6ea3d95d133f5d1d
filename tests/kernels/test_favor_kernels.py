"""The FAVOR+ Triton kernels (kernels/favor.py) against their torch references, on CPU tensors under the Triton
interpreter (TRITON_INTERPRET=1).

Triton decorates its own library functions (tl.sum, tl.cdiv, ...) when triton.language is first imported, under the
TRITON_INTERPRET in force then, and the interpreter cannot call compiled ones: the kernels run only in a process that
imported Triton with it set. Where this module is the first to import Triton (and no GPU is there, whose compiled
kernels the interpreter would break) it does so with the variable set for that import only; where Triton was
imported before (a whole-suite run) one test reruns this file in a subprocess with the variable set. Each test sets
the variable while it runs (use_kernel then lets a forced kernel take CPU tensors).

Shapes are small (the interpreter runs every program in Python); N is never a multiple of the chunk, and the feature
dim 20 spans two feature blocks of 16, so the partial sums over blocks are exercised.
"""

import os
import subprocess
import sys

import pytest
import torch


def _interpreter_ready() -> bool:
    """Whether Triton's library was decorated for the interpreter in this process (importing it so if still can)."""
    if "triton" not in sys.modules and not torch.cuda.is_available():
        before = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            import triton.language  # noqa: F401  # optional dependency, imported under the interpreter
        except ImportError:
            return False
        finally:
            if before is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = before
    lang = sys.modules.get("triton.language")
    return lang is not None and type(lang.standard.cdiv).__name__ == "InterpretedFunction"


IN_PROCESS = _interpreter_ready()  # before anything below imports Triton

from symformer._torch_compat import TRITON_OP  # noqa: E402
from symformer.attention import FavorAttention  # noqa: E402
from symformer.attention.favor_ops import favor_causal  # noqa: E402
from symformer.kernels import triton_available  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not triton_available(), reason="triton does not import (pip install symformer[triton])"),
    pytest.mark.skipif(not TRITON_OP, reason="torch.library.triton_op needs torch >= 2.6"),
]

B, H, N, D, M, CHUNK = 1, 2, 40, 8, 20, 16


@pytest.mark.skipif(IN_PROCESS, reason="the tests of this file run in this process")
def test_in_a_subprocess(request):
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", __file__]
    if request.config.getoption("--runslow"):
        cmd.append("--runslow")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch, request):
    if "cuda" in request.keywords:  # compiled kernels on a GPU: never under the interpreter
        if IN_PROCESS:
            pytest.skip("this process runs Triton's interpreter")
        monkeypatch.delenv("SYMFORMER_KERNELS", raising=False)
        return
    if not IN_PROCESS and request.node.name != "test_in_a_subprocess":
        pytest.skip("Triton was imported without the interpreter: test_in_a_subprocess runs this test")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("SYMFORMER_KERNELS", raising=False)


def _qkv(dtype=torch.float64, n=N, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(0.5 * torch.randn(B, H, n, D, generator=g, dtype=torch.float64)).to(dtype) for _ in range(3)]


def _core(kernel, **kw):
    return FavorAttention(D, n_features=M, chunk_size=CHUNK, seed=0, kernel=kernel, **kw).double()


def _masked(q, k, v, reverse=False):
    s = q @ k.transpose(-1, -2)
    return (s.triu() if reverse else s.tril()) @ v


def test_chunk_causal_is_the_masked_product_in_float64():
    from symformer.kernels.favor import chunk_causal

    g = torch.Generator().manual_seed(1)
    q, k = (torch.rand(B, H, N, M, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, H, N, 9, generator=g, dtype=torch.float64)
    for reverse in (False, True):
        ref = _masked(q, k, v, reverse)
        assert (chunk_causal(q, k, v, reverse, CHUNK) - ref).abs().max() < 1e-13 * ref.abs().max()
    # negative control: the causal and the anti-causal sums differ
    assert (chunk_causal(q, k, v, False, CHUNK) - _masked(q, k, v, True)).abs().max() > 1.0


@pytest.mark.parametrize("dtype", [torch.float64, pytest.param(torch.float32, marks=pytest.mark.slow)])
def test_causal_forward_and_backward_match_the_torch_path(dtype):
    ref, ker = _core("torch"), _core("triton")
    x = [t.requires_grad_() for t in _qkv(dtype)]
    x64 = [t.detach().double().requires_grad_() for t in x]
    want = ref(*x64, is_causal=True)
    got = ker(*x, is_causal=True)
    assert got.dtype == dtype
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    assert (got.double() - want).abs().max() < tol * want.abs().max()
    g = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, x64, g)
    got_grads = torch.autograd.grad(got, x, g.to(dtype))
    for a, b in zip(got_grads, want_grads):
        assert (a.double() - b).abs().max() < 10 * tol * b.abs().max()


def test_eps_terms_and_key_padding_match_the_torch_path():
    q, k, v = _qkv()
    keep = torch.ones(B, 1, 1, N, dtype=torch.bool)
    keep[..., :3] = False  # left padding: the first queries see no kept key (output 0)
    keep[..., 17] = False
    for kw in ({"kernel_eps": 1e-4, "denominator_eps": 1e-6}, {}):
        want = _core("torch", **kw)(q, k, v, attn_mask=keep, is_causal=True)
        got = _core("triton", **kw)(q, k, v, attn_mask=keep, is_causal=True)
        assert (got - want).abs().max() < 1e-13
        assert (got[..., :3, :] == 0).all() if not kw else True


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow)])
def test_16bit_features_against_a_float64_reference(dtype):
    """16-bit features and values straight into the kernel: float32 accumulation, a float32 product (the tf32
    products of a GPU round the in-chunk scores and the state to 11 bits: the bound allows for that)."""
    g = torch.Generator().manual_seed(2)
    qf, kf = (torch.rand(B, H, N, M, generator=g).to(dtype) for _ in range(2))
    v = torch.randn(B, H, N, D, generator=g).to(dtype)
    got = favor_causal(qf, kf, v, CHUNK, kernel="triton")
    want = favor_causal(qf.double(), kf.double(), v.double(), CHUNK, kernel="torch")
    assert got.dtype == dtype
    rounding = torch.finfo(dtype).eps
    assert (got.double() - want).abs().max() < 2 * rounding * want.abs().max()
    # the module casts 16-bit inputs up, so its kernel path runs in float32
    q, k, vv = _qkv(dtype)
    core32 = FavorAttention(D, n_features=M, chunk_size=CHUNK, seed=0, kernel="triton")
    out = core32(q, k, vv, is_causal=True)
    ref = _core("torch")(q.double(), k.double(), vv.double(), is_causal=True)
    assert out.dtype == dtype and (out.double() - ref).abs().max() < 2 * rounding * ref.abs().max()


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "dtype", [torch.float64, pytest.param(torch.float32, marks=SLOW), pytest.param(torch.float16, marks=SLOW)]
)
def test_decode_steps_match_favor_state_and_the_full_forward(dtype):
    ref, ker = _core("torch"), _core("triton")
    q, k, v = _qkv(dtype, n=7)
    st_ref, st_ker = ref.init_state(), ker.init_state()
    steps = []
    with torch.no_grad():
        for i in range(7):
            one = [t[..., i : i + 1, :] for t in (q, k, v)]
            want = ref(*one, is_causal=True, state=st_ref)
            got = ker(*one, is_causal=True, state=st_ker)
            assert got.dtype == dtype
            steps.append(got)
            tol = 1e-14 if dtype == torch.float64 else 1e-5
            assert (got.double() - want.double()).abs().max() < tol + 2 * torch.finfo(dtype).eps
    assert int(st_ker.length) == 7 and st_ker.kvs.dtype == st_ref.kvs.dtype
    assert (st_ker.kvs - st_ref.kvs).abs().max() < 1e-5 * st_ref.kvs.abs().max()
    assert (st_ker.c - st_ref.c).abs().max() < tol  # the running maximum of the same log-features
    full = ref(q.double(), k.double(), v.double(), is_causal=True)
    assert (torch.cat(steps, dim=-2).double() - full).abs().max() < 1e-12 + 4 * torch.finfo(dtype).eps


def test_prefill_then_kernel_decoding_continues_the_sequence():
    ker = _core("triton")
    q, k, v = _qkv(n=20)
    st = ker.init_state()
    with torch.no_grad():
        head = ker(q[..., :17, :], k[..., :17, :], v[..., :17, :], is_causal=True, state=st)  # torch chunk steps
        tail = [ker(*(t[..., i : i + 1, :] for t in (q, k, v)), is_causal=True, state=st) for i in range(17, 20)]
    full = _core("torch")(q, k, v, is_causal=True)
    assert (torch.cat([head, *tail], dim=-2) - full).abs().max() < 1e-13


def test_forced_kernel_on_unsupported_input_names_kernel():
    ker = _core("triton")
    q, k, v = _qkv(n=1)
    with pytest.raises(ValueError, match="kernel.*key-padding mask"):
        with torch.no_grad():
            ker(q, k, v, attn_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool), is_causal=True, state=ker.init_state())
    with pytest.raises(ValueError, match="kernel.*require grad"):
        ker(q, k, v.requires_grad_(), is_causal=True, state=ker.init_state())
    with pytest.raises(ValueError, match="kernel.*'cuda'"):
        FavorAttention(D, kernel="cuda")


def test_auto_and_torch_never_launch_on_cpu(monkeypatch):
    from symformer.kernels import favor as kfavor

    def boom(*args):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(kfavor, "_launch_chunk", boom)
    q, k, v = _qkv()
    for kernel in ("auto", "torch", None):
        _core(kernel)(q, k, v, is_causal=True)
    with pytest.raises(AssertionError, match="the kernel ran"):  # negative control: a forced kernel reaches it
        _core("triton")(q, k, v, is_causal=True)


def test_ops_register_only_where_a_kernel_can_run(monkeypatch):
    from symformer.kernels.favor import prepare_kernels

    assert prepare_kernels("triton") and not prepare_kernels("torch")
    monkeypatch.delenv("TRITON_INTERPRET")
    assert prepare_kernels("triton") == torch.cuda.is_available()  # CPU tensors need the interpreter


def test_kernel_paths_trace_without_graph_breaks():
    ker = _core("triton")
    q, k, v = _qkv()
    assert torch._dynamo.explain(lambda q, k, v: ker(q, k, v, is_causal=True))(q, k, v).graph_break_count == 0
    st = ker.init_state()
    with torch.no_grad():
        one = [t[..., :1, :] for t in (q, k, v)]
        ker(*one, is_causal=True, state=st)  # the state takes its shapes
        step = torch._dynamo.explain(lambda q, k, v: ker(q, k, v, is_causal=True, state=st))
        assert step(*one).graph_break_count == 0


@pytest.mark.slow
def test_kernel_paths_compile_fullgraph():
    ker = _core("triton")
    q, k, v = (t.requires_grad_() for t in _qkv())

    def causal(q, k, v):
        return ker(q, k, v, is_causal=True)

    compiled = torch.compile(causal, fullgraph=True, backend="aot_eager")
    got = compiled(q, k, v)
    want = causal(q, k, v)
    assert (got - want).abs().max() < 1e-14
    gq, gk, gv = torch.autograd.grad(got.sum(), (q, k, v))
    wq, wk, wv = torch.autograd.grad(want.sum(), (q, k, v))
    assert max((a - b).abs().max() for a, b in ((gq, wq), (gk, wk), (gv, wv))) < 1e-12

    st_c, st_e = ker.init_state(), ker.init_state()

    def step(q, k, v, st):
        return ker(q, k, v, is_causal=True, state=st)

    cstep = torch.compile(step, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        for i in range(3):
            one = [t.detach()[..., i : i + 1, :] for t in (q, k, v)]
            assert (cstep(*one, st_c) - step(*one, st_e)).abs().max() < 1e-14
    assert torch.equal(st_c.kvs, st_e.kvs) and int(st_c.length) == 3


def test_bench_rows_run_at_toy_sizes(monkeypatch):
    """The kernels suite's FAVOR+ methods (GPU only) at toy sizes on the interpreter: every callable runs; the suite
    itself refuses a CPU context."""
    from symformer.benchmarks import _kernels_favor as bench
    from symformer.benchmarks.base import BenchContext

    with pytest.raises(ValueError, match="device.*cuda"):
        bench.favor_rows(BenchContext(out_dir=None, device="cpu"))
    for name, value in (("N", 20), ("H", 1), ("DH", 8), ("M", 16), ("CONTEXT", 5)):
        monkeypatch.setattr(bench, name, value)
    monkeypatch.setattr(bench, "fla_available", lambda: False)  # FLA's kernels need a GPU driver
    monkeypatch.setattr(bench, "_flash", lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    methods = {**bench._causal_methods("cpu", 0), **bench._decode_methods("cpu", 0)}
    assert {"favor_layer_kernel", "favor_features_kernel", "favor_decode_triton", "sdpa_decode"} <= set(methods)
    times = bench._median_interleaved(methods, rounds=1, inner=1, device="cpu")
    assert all(t > 0 for t in times.values())


@pytest.mark.cuda
def test_cuda_kernels_match_the_torch_path():
    """On a GPU: the compiled kernels against the torch path (float64 reference), forward, backward, bf16 inputs,
    decoding, and the whole layer compiled by inductor with fullgraph=True."""
    opts = dict(head_dim=64, n_features=256, chunk_size=128, seed=0)
    ref, ker = FavorAttention(**opts, kernel="torch").cuda(), FavorAttention(**opts, kernel="triton").cuda()
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (0.5 * torch.randn(2, 4, 1000, 64, generator=g, device="cuda") for _ in range(3))
    x = [t.clone().requires_grad_() for t in (q, k, v)]
    x64 = [t.double().requires_grad_() for t in (q, k, v)]
    want, got = ref.double()(*x64, is_causal=True), ker(*x, is_causal=True)
    assert (got.double() - want).abs().max() < 1e-4 * want.abs().max()
    gw, gg = torch.autograd.grad(want.sum(), x64), torch.autograd.grad(got.sum(), x)
    assert all((a.double() - b).abs().max() < 1e-3 * b.abs().max() for a, b in zip(gg, gw))
    bf = ker(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert bf.dtype == torch.bfloat16 and (bf.double() - want).abs().max() < 0.05 * want.abs().max()
    compiled = torch.compile(lambda q, k, v: ker(q, k, v, is_causal=True), fullgraph=True)
    assert (compiled(q, k, v) - ker(q, k, v, is_causal=True)).abs().max() < 1e-5 * want.abs().max()
    st_ref, st_ker = ref.float().init_state(), ker.init_state()
    with torch.no_grad():
        for i in range(8):
            one = [t[..., i : i + 1, :] for t in (q, k, v)]
            a, b = ref(*one, is_causal=True, state=st_ref), ker(*one, is_causal=True, state=st_ker)
            assert (a - b).abs().max() < 1e-5 * a.abs().max().clamp_min(1e-6)


@pytest.mark.slow
def test_chunk_causal_gradcheck():
    from symformer.kernels.favor import chunk_causal, favor_causal_kernel

    g = torch.Generator().manual_seed(3)
    q, k = (torch.rand(1, 1, 9, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 1, 9, 2, generator=g, dtype=torch.float64, requires_grad=True)
    for reverse in (False, True):
        assert torch.autograd.gradcheck(lambda a, b, c, r=reverse: chunk_causal(a, b, c, r, 4), (q, k, v))
    # the normalised form: the product and its denominator from one kernel, then the quotient
    assert torch.autograd.gradcheck(lambda a, b, c: favor_causal_kernel(a, b, c, 4), (q, k, v))


@pytest.mark.slow
def test_larger_shapes_match_the_torch_path():
    core = dict(head_dim=32, n_features=96, chunk_size=64, seed=0)
    ref, ker = FavorAttention(**core, kernel="torch"), FavorAttention(**core, kernel="triton")
    g = torch.Generator().manual_seed(4)
    q, k, v = (0.3 * torch.randn(2, 2, 300, 32, generator=g) for _ in range(3))
    want = ref(q.double(), k.double(), v.double(), is_causal=True)
    assert (ker(q, k, v, is_causal=True).double() - want).abs().max() < 1e-5 * want.abs().max()
