"""FAVOR+ Triton kernels: the chunked causal product with its normaliser, and the fused decoding step.

Causal FAVOR+ (attention/favor_ops.favor_causal, the torch reference) is y_i = num_i / den_i with
[num_i, den_i] = sum_{j <= i} (phi(q^_i) . phi(k^_j)) [v_j, 1]. `chunk_causal` computes that product in one kernel
(Triton's `chunk_causal_kernel`): per chunk of rows the masked in-chunk product, across chunks the running state
[S, z] = sum_j phi(k^_j) [v_j, 1]^T, the denominator as the value matrix's last column, accumulated in float32
(float64 for float64 inputs). Its backward is the same kernel three times (dq a causal product of (do, [v, 1], k);
dk and dv anti-causal products, the kernel run over the chunks in reverse), so no N x N or N x m x Dv
intermediate is ever stored. The feature maps stay in torch (one GEMM and one softmax or exp each): the key
stabiliser is a maximum over all keys of a (batch, head), which a single causal pass cannot know in advance.

`decode_step` fuses favor_state's one-token step: both feature maps, the running maximum, the decay and the
in-place update of [S, z], and the quotient, in one launch per token with no host read.

Both are `torch.library.triton_op`s (torch >= 2.6), so torch.compile(fullgraph=True) traces them as one op; they
are registered at the first eager call or by `prepare_kernels` (FavorAttention's constructor), not at import.
"""

import functools
import math
from typing import NamedTuple

import torch

from symformer._torch_compat import TRITON_OP, is_compiling
from symformer._validation import fail
from symformer.kernels._dispatch import interpreting, kernel_mode, triton_available

__all__ = [
    "chunk_causal",
    "decode_step",
    "favor_causal_kernel",
    "prepare_kernels",
    "unsupported_causal",
    "unsupported_decode",
]

_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
MAX_DECODE_FEATURES = 2048  # the decoding kernel holds all m features of one head in one block


class _Saved(NamedTuple):
    """What the chunk kernel's backward reads from an autograd ctx: the normaliser's backward calls it directly."""

    saved_tensors: tuple
    reverse: bool
    chunk: int


def _pow2(n: int, low: int, high: int) -> int:
    return max(low, min(high, 1 << max(0, int(n) - 1).bit_length()))


def unsupported_causal(*tensors: torch.Tensor) -> str | None:
    """Why the chunked kernel cannot take these inputs (a reason for use_kernel), or None.

    Args:
        *tensors: the kernel's inputs (query and key features, values).
    """
    if not TRITON_OP:
        return f"torch {torch.__version__} (torch.library.triton_op needs torch >= 2.6)"
    for t in tensors:
        if t.dtype not in _DTYPES:
            return f"dtype {t.dtype}"
    return None


def unsupported_decode(q: torch.Tensor, kvs: torch.Tensor, keep: torch.Tensor | None, grad: bool) -> str | None:
    """Why the decoding kernel cannot take this step (a reason for use_kernel), or None.

    Args:
        q: the new query.
        kvs: the state's [S, z] (favor_state.FavorState.kvs), updated in place by the kernel.
        keep: the new key's padding mask, or None.
        grad: whether autograd records the step.
    """
    reason = unsupported_causal(q, kvs)
    if reason is not None:
        return reason
    if keep is not None:
        return "a key-padding mask"
    if grad:
        return "inputs that require grad (the step updates the state in place)"
    if not kvs.is_contiguous():
        return "a non-contiguous decoding state"
    if kvs.shape[-2] > MAX_DECODE_FEATURES:
        return f"n_features {kvs.shape[-2]} above {MAX_DECODE_FEATURES}"
    return None


@functools.lru_cache(maxsize=None)
def _jit(interpret: bool):
    """The Triton kernels, decorated under the interpreter setting in force (Triton reads it when decorating)."""
    import triton  # optional dependency: only reached after use_kernel said yes

    from symformer.kernels import _favor_triton  # imports triton.language at module level (optional dependency)

    return triton.jit(_favor_triton.chunk_causal_kernel), triton.jit(_favor_triton.decode_step_kernel)


def _launcher(kernel):
    """wrap_triton lets torch.compile trace a launch inside a triton_op (and run it on fake tensors)."""
    from torch.library import wrap_triton  # torch >= 2.6, checked by unsupported_causal

    return wrap_triton(kernel)


def _precision(*tensors: torch.Tensor) -> str:
    """float32 products as torch's CUDA matmul makes them (full float32 unless allow_tf32); 16-bit inputs are
    exact in tf32, so their products lose nothing there; float64 stays float64."""
    if any(t.dtype in (torch.bfloat16, torch.float16) for t in tensors):
        return "tf32"
    if all(t.dtype == torch.float64 for t in tensors) or not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def _launch_chunk(q, k, v, reverse: bool, chunk: int, with_den: bool):
    *batch, n, dk = q.shape
    dv = v.shape[-1]
    acc = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32
    q3, k3, v3 = (t.reshape(-1, n, t.shape[-1]) for t in (q, k, v))
    bh = q3.shape[0]
    bk, bv = _pow2(dk, 16, 64), _pow2(dv, 16, 64)
    nk = -(-dk // bk)
    o = q.new_empty(nk, bh, n, dv, dtype=acc)
    den = q.new_empty(nk, bh, n, dtype=acc) if with_den else q.new_empty(1, 1, dtype=acc)  # unused without DEN
    kernel = _launcher(_jit(interpreting())[0])
    # fmt: off
    kernel[(nk, -(-dv // bv), bh)](
        q3, k3, v3, o, den, n, dk, dv, *q3.stride(), *k3.stride(), *v3.stride(), o.stride(0), o.stride(1),
        o.stride(2), den.stride(0), den.stride(1),
        C=_pow2(chunk, 16, 64), BK=bk, BV=bv, REVERSE=reverse, PRECISION=_precision(q, k, v), DEN=with_den,
    )
    # fmt: on
    o = (o[0] if nk == 1 else o.sum(0)).view(*batch, n, dv)
    return o, (den[0] if nk == 1 else den.sum(0)).view(*batch, n) if with_den else None


def _chunk_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, reverse: bool, chunk: int) -> torch.Tensor:
    return _launch_chunk(q, k, v, reverse, chunk, False)[0]


def _chunk_den_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch_chunk(q, k, v, False, chunk, True)


def _decode_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ws_t: torch.Tensor,
    kvs: torch.Tensor,
    c: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    dh, m = ws_t.shape
    dv = v.shape[-1]
    y = v.new_empty(v.shape)
    kernel = _launcher(_jit(interpreting())[1])
    # fmt: off
    kernel[(kvs.shape[0] * kvs.shape[1],)](
        q.contiguous(), k.contiguous(), v.contiguous(), ws_t.contiguous(), kvs, c, y, dh, m, dv, 0.5 * scale,
        torch.finfo(kvs.dtype).tiny, BD=16, BM=_pow2(m, 16, MAX_DECODE_FEATURES), BV=_pow2(dv, 16, 64),
    )
    # fmt: on
    return y


def _chunk_fake(q, k, v, reverse, chunk):
    acc = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32
    return v.new_empty(*q.shape[:-1], v.shape[-1], dtype=acc)


def _chunk_den_fake(q, k, v, chunk):
    o = _chunk_fake(q, k, v, False, chunk)
    return o, o.new_empty(q.shape[:-1])


def _register(interpreted: bool):
    """Register the two ops (at import: torch.compile cannot trace a registration). Compiled kernels: triton_op,
    which torch.compile traces into (wrap_triton makes the launch a graph node). The interpreter's kernels cannot
    run on compile's fake tensors, so under TRITON_INTERPRET=1 the ops are opaque custom_ops with a shape-only
    fake; `_ops` picks per call."""
    from torch.library import custom_op, triton_op  # torch >= 2.6 (TRITON_OP)

    make, suffix = (custom_op, "_interpreted") if interpreted else (triton_op, "")
    causal = make(f"symformer::favor_chunk_causal{suffix}", _chunk_impl, mutates_args=())

    def setup_context(ctx, inputs, output):
        q, k, v, reverse, chunk = inputs
        ctx.save_for_backward(q, k, v)
        ctx.reverse, ctx.chunk = reverse, chunk

    def backward(ctx, do):
        # o_i = sum_{j <= i} (q_i . k_j) v_j: dq_i = sum_{j <= i} (do_i . v_j) k_j,
        # dk_j = sum_{i >= j} (v_j . do_i) q_i, dv_j = sum_{i >= j} (k_j . q_i) do_i: the anti-causal sums are the
        # kernel over reversed chunks
        q, k, v = ctx.saved_tensors
        r, ch = ctx.reverse, ctx.chunk
        dq = causal(do, v, k, r, ch).to(q.dtype)
        dk = causal(v, do, q, not r, ch).to(k.dtype)
        dv = causal(k, q, do, not r, ch).to(v.dtype)
        return dq, dk, dv, None, None

    causal.register_autograd(backward, setup_context=setup_context)
    with_den = make(f"symformer::favor_chunk_causal_den{suffix}", _chunk_den_impl, mutates_args=())

    def setup_den(ctx, inputs, output):
        q, k, v, chunk = inputs
        ctx.save_for_backward(q, k, v)
        ctx.chunk = chunk

    def backward_den(ctx, do, dden):
        # den_i = sum_{j <= i} q_i . k_j: dq_i += dden_i sum_{j <= i} k_j, dk_j += sum_{i >= j} dden_i q_i (prefix sums)
        q, k, v = ctx.saved_tensors
        dq, dk, dv, _, _ = backward(_Saved((q, k, v), False, ctx.chunk), do)
        dd = dden.unsqueeze(-1)
        dq = dq + (dd * k.to(dd.dtype).cumsum(-2)).to(q.dtype)
        dk = dk + (dd * q.to(dd.dtype)).flip(-2).cumsum(-2).flip(-2).to(k.dtype)
        return dq, dk, dv, None

    with_den.register_autograd(backward_den, setup_context=setup_den)
    decode = make(f"symformer::favor_decode_step{suffix}", _decode_impl, mutates_args=("kvs", "c"))
    if interpreted:
        causal.register_fake(_chunk_fake)
        with_den.register_fake(_chunk_den_fake)
        decode.register_fake(lambda q, k, v, ws_t, kvs, c, scale: v.new_empty(v.shape))
    return causal, decode, with_den


_OPS: dict = {}  # interpreted (bool) -> the registered ops


def _ops():
    """The ops for the interpreter setting in force, registered at the first eager call: registering imports
    torch's Triton tracing (and inductor with it), seconds that `import symformer` must not pay, and that
    torch.compile cannot trace (`prepare_kernels` registers them ahead, FavorAttention's constructor calls it)."""
    flag = interpreting()
    if flag not in _OPS:
        if is_compiling():
            fail(
                "kernel",
                "a FAVOR+ Triton kernel first called inside torch.compile",
                "symformer.kernels.favor.prepare_kernels() called before compiling (FavorAttention's constructor "
                "calls it)",
            )
        _OPS[flag] = _register(flag)
    return _OPS[flag]


def prepare_kernels(kernel: str | None = None) -> bool:
    """Register the FAVOR+ ops now when a kernel may run later (Triton imports, and CUDA or the interpreter is
    there, and `kernel` is not "torch"), so that a compiled model can call them; True when registered.

    Args:
        kernel: None (SYMFORMER_KERNELS), "auto", "triton" or "torch".
    """
    if not TRITON_OP or kernel_mode(kernel) == "torch":
        return False
    if not (torch.cuda.is_available() or interpreting()) or not triton_available():
        return False
    _ops()
    return True


def chunk_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, reverse: bool = False, chunk: int = 64):
    """o_i = sum_{j <= i} (q_i . k_j) v_j (reverse: j >= i) for q, k (..., N, dk), v (..., N, dv), differentiable;
    the output in float32 (float64 for float64 inputs). chunk: rows per chunk, rounded to a power of 2 in [16, 64].

    Args:
        q (..., N, dk): query features.
        k (..., N, dk): key features.
        v (..., N, dv): values.
        reverse (bool): sum over j >= i instead.
        chunk (int): rows per chunk.
    """
    return _ops()[0](q, k, v, bool(reverse), int(chunk))


def favor_causal_kernel(
    qf: torch.Tensor,
    kf: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int = 128,
    denominator_eps: float = 0.0,
    padded: bool = False,
) -> torch.Tensor:
    """attention/favor_ops.favor_causal through `chunk_causal`: the same arguments and the same result up to
    rounding; the output in v's dtype.

    Args:
        qf (B, H, N, m): query features.
        kf (B, H, N, m): key features (padded keys zeroed).
        v (B, H, N, Dv): values.
        chunk_size (int): rows per chunk of the kernel (rounded to a power of 2 in [16, 64]).
        denominator_eps (float): added to the key sum of every query (performer-pytorch's term).
        padded (bool): some keys were zeroed; a query with no kept key gets 0.
    """
    o, den = _ops()[2](qf, kf, v, int(chunk_size))
    den = den.unsqueeze(-1)
    if denominator_eps:  # favor_causal adds eps to every entry of the key sum: q . (z + eps) = q . z + eps sum(q)
        den = den + denominator_eps * qf.sum(-1, keepdim=True).to(den.dtype)
    if padded:
        den = torch.where(den > 0, den, torch.ones_like(den))
    return (o / den).to(v.dtype)


def decode_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ws_t: torch.Tensor,
    kvs: torch.Tensor,
    c: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """favor_state's one-token step, fused: updates kvs ([S, z], (B, H, m, Dv + 1)) and c ((B, H, 1, 1)) in place
    and returns y (B, H, 1, Dv) in v's dtype.

    Args:
        q (B, H, 1, Dh): the new query.
        k (B, H, 1, Dh): the new key.
        v (B, H, 1, Dv): the new value.
        ws_t (Dh, m): sqrt(scale) w^T in the state's dtype.
        kvs (B, H, m, Dv + 1): the state [S, z] scaled by exp(-c), contiguous.
        c (B, H, 1, 1): the running maximum log-feature, contiguous.
        scale (float): the logit scale (|k^|^2 / 2 = scale |k|^2 / 2).
    """
    if math.isnan(scale):
        raise ValueError("scale must be a number")
    return _ops()[1](q, k, v, ws_t, kvs, c, float(scale))
