"""Fused PLASH kernels (plash-attention.txt, Alg. 1), each beside its torch reference:

- `stage1_block_sums`: Stage I per block of keys, A^T K and A^T V with A = softmax(K P^T / tau) (eqs. 3-5): the
  non-causal summaries (one sum over the blocks) and the causal variant's per-block sums (their prefix sums);
  forward and backward in Triton.
- `block_readout`: the readout of the causal block form (PlashAttention._causal_blocks): one softmax per query over
  its block's prefix summaries K_g, V_g (eq. 12) and its own block's keys up to itself; without the in-block part
  it is the non-causal readout (every query reads the same M summaries); forward and backward in Triton.
- `decode_step`: one decoding token (plash_state._token): the block slot, the readout over [block; K_g] and the
  running sums in one launch, in place, static shapes, no host read.

Stage II-III (psi, the TensorSketch, the mixer, on M items per row) stays on torch: O(M^2 d + M d^2) per row, not
the O(N M d) of the core. The ops are `torch.library.triton_op`s (torch >= 2.6), so torch.compile(fullgraph=True)
traces them and their backward; on older torch the kernels are unsupported (the torch path runs). Under
TRITON_INTERPRET=1 they run on CPU tensors as custom_ops with shape-only fakes, the kernels launched directly
(wrap_triton takes compiled kernels only), so the tests compile through them on the CPU too.
"""

from __future__ import annotations

import torch

from symformer._torch_compat import TRITON_OP
from symformer.kernels import _plash_triton as _tk
from symformer.kernels._dispatch import interpreting, triton_available

MAX_HEAD_DIM = 128  # the kernels hold (block, head dim) tiles of q, k, v in registers
MAX_PROTOTYPES = 256
MAX_CAUSAL_BLOCK = 128
STAGE1_BLOCK = 256  # keys per program of the non-causal Stage I (partial sums added by torch)
READOUT_BLOCK = 64  # queries per program of the non-causal readout
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _pow2(x: int) -> int:
    return max(16, 1 << (max(1, x) - 1).bit_length())


def unsupported(x: torch.Tensor, head_dim: int, m: int, block: int | None = None) -> str | None:
    """Why the PLASH kernels cannot take inputs like x (head dim, M prototypes, causal block), or None.

    Args:
        x (torch.Tensor): an input of the op (its dtype and device decide).
        head_dim (int): the head size d.
        m (int): the number of prototypes M.
        block (int | None): the causal block c (the causal readout and the decoding step), or None.
    """
    if not TRITON_OP:
        return "torch < 2.6 (no torch.library.triton_op)"
    if x.dtype not in _DTYPES:
        return f"dtype {x.dtype}"
    if x.dtype == torch.float64 and x.device.type == "cuda":
        return "float64 on CUDA"
    if head_dim > MAX_HEAD_DIM:
        return f"head dim {head_dim} above {MAX_HEAD_DIM}"
    if m > MAX_PROTOTYPES:
        return f"M={m} prototypes above {MAX_PROTOTYPES}"
    if block is not None and block > MAX_CAUSAL_BLOCK:
        return f"causal_block={block} above {MAX_CAUSAL_BLOCK}"
    return None


def _warps(rows: int, cols: int) -> int:
    """Warps per program: 8 where a program's (rows, cols) float32 tiles would spill the registers of 4."""
    return 8 if rows * cols > 64 * 64 else 4


def _prec(x: torch.Tensor) -> str:
    """The dot products' precision: torch's float32 matmul ("tf32" only where torch allows it on CUDA)."""
    tf32 = x.device.type == "cuda" and x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return "tf32" if tf32 else "ieee"


def _kernel(name: str):
    interp = interpreting()
    fn = _tk.build(interp)[name]
    if interp:
        return fn
    from torch.library import wrap_triton  # noqa: PLC0415  # torch >= 2.6, as triton_op (checked by `unsupported`)

    return wrap_triton(fn)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x (n, N, d) with a contiguous last axis (the kernels' layout)."""
    return x if x.stride(-1) == 1 else x.contiguous()


# ------------------------------------------------------------------------------------------------ Stage I
def stage1_block_sums_reference(k, v, prototypes, tau: float, keep, block: int):
    """Torch reference of `stage1_block_sums`: (n, nb, M, d) per-block A^T K, A^T V."""
    n, length, _ = k.shape
    nb = -(-length // block)
    pad = nb * block - length
    a = torch.softmax(k @ (prototypes.to(k.dtype).t() / tau), dim=-1)  # (n, N, M), eq. 3
    if keep is not None:
        a = a * keep[..., None].to(a.dtype)
    a = torch.nn.functional.pad(a, (0, 0, 0, pad)).unflatten(1, (nb, block)).transpose(-1, -2)  # (n, nb, M, c)

    def blocks(x):
        return torch.nn.functional.pad(x, (0, 0, 0, pad)).unflatten(1, (nb, block))  # (n, N, d) -> (n, nb, c, d)

    return a @ blocks(k), a @ blocks(v)


def _stage1_meta(k, v, p, block):
    n, length, d = k.shape
    m, dv = p.shape[0], v.shape[-1]
    consts = dict(M=m, D=d, DV=dv, BM=_pow2(m), BD=_pow2(d), BDV=_pow2(dv), BN=min(64, _pow2(block)))
    return n, length, -(-length // block), consts


def _stage1_impl(
    k: torch.Tensor, v: torch.Tensor, p: torch.Tensor, keep: torch.Tensor | None, tau: float, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    n, length, nb, consts = _stage1_meta(k, v, p, block)
    pk = k.new_empty(n, nb, consts["M"], consts["D"])
    pv = v.new_empty(n, nb, consts["M"], consts["DV"])
    _kernel("stage1_fwd")[(n, nb)](
        k, v, p, keep, pk, pv, length, block, 1.0 / tau, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        pk.stride(0), pk.stride(1), pv.stride(0), pv.stride(1), HAS_KEEP=keep is not None,
        F64=k.dtype == torch.float64, PREC=_prec(k), num_warps=_warps(consts["BN"], consts["BD"]), **consts,
    )  # fmt: skip
    return pk, pv


def _stage1_bwd_impl(
    k: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    keep: torch.Tensor | None,
    gk: torch.Tensor,
    gv: torch.Tensor,
    tau: float,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, length, nb, consts = _stage1_meta(k, v, p, block)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    dp = torch.empty(n, nb, consts["M"], consts["D"], dtype=torch.float64 if k.dtype == torch.float64
                     else torch.float32, device=k.device)  # fmt: skip
    _kernel("stage1_bwd")[(n, nb)](
        k, v, p, keep, gk, gv, dk, dv, dp, length, block, 1.0 / tau, k.stride(0), k.stride(1), v.stride(0),
        v.stride(1), gk.stride(0), gk.stride(1), gv.stride(0), gv.stride(1), HAS_KEEP=keep is not None,
        F64=k.dtype == torch.float64, PREC=_prec(k), num_warps=_warps(consts["BN"], consts["BD"]), **consts,
    )  # fmt: skip
    return dk, dv, dp.sum((0, 1)).to(p.dtype)


def _stage1_fake(k, v, p, keep, tau, block):
    n, _, nb, consts = _stage1_meta(k, v, p, block)
    return k.new_empty(n, nb, consts["M"], consts["D"]), v.new_empty(n, nb, consts["M"], consts["DV"])


def _stage1_bwd_fake(k, v, p, keep, gk, gv, tau, block):
    return k.new_empty(k.shape), v.new_empty(v.shape), p.new_empty(p.shape)


def _stage1_setup(ctx, inputs, output):
    k, v, p, keep, tau, block = inputs
    ctx.save_for_backward(k, v, p, keep)
    ctx.tau, ctx.block = tau, block


def stage1_block_sums(k, v, prototypes, tau: float, keep, block: int):
    """Per block of `block` keys, the Stage I sums A^T K and A^T V (eqs. 3-5), fused (one read of the keys).

    Args:
        k (n, N, d): keys; v (n, N, dv): values, k's dtype.
        prototypes (M, d): the prototypes P (taken in k's dtype).
        tau (float): the prototype softmax's temperature.
        keep (n, N) | None: boolean key padding: a padded key's routing row is 0.
        block (int): keys per block.

    Returns:
        pk (n, nb, M, d), pv (n, nb, M, dv): nb = ceil(N / block) blocks; differentiable in k, v and prototypes.
    """
    p = prototypes.to(k.dtype).contiguous()
    keep = None if keep is None else keep.contiguous()
    return _op("stage1")(_rows(k), _rows(v), p, keep, float(tau), int(block))


def compress(k, v, prototypes, tau: float, keep):
    """Non-causal Stage I: K~ (n, M, d), V~ (n, M, dv), the block sums of `stage1_block_sums` added."""
    pk, pv = stage1_block_sums(k, v, prototypes, tau, keep, STAGE1_BLOCK)
    return pk.sum(1), pv.sum(1)


# ------------------------------------------------------------------------------------------------ readout
def block_readout_reference(q, k, v, k_g, v_g, has_sum, keep, scale: float, block: int, in_block: bool):
    """Torch reference of `block_readout` (the arithmetic of PlashAttention._causal_blocks)."""
    n, length, d = q.shape
    nb = -(-length // block)
    pad = nb * block - length

    def blocks(x):
        return torch.nn.functional.pad(x, (0, 0, 0, pad)).unflatten(1, (nb, block))  # (n, N, d) -> (n, nb, c, d)

    qb = blocks(q)
    lg = (qb @ k_g.transpose(-1, -2)) * scale  # (n, nb, c, M)
    lg = lg.masked_fill(~has_sum[:, :, None, None], float("-inf"))
    logits, values = [lg], [v_g]
    if in_block:
        kb, vb = blocks(k), blocks(v)
        see = torch.ones(block, block, dtype=torch.bool, device=q.device).tril()
        see = see & (torch.arange(nb * block, device=q.device) < length).view(nb, 1, block)
        if keep is not None:
            see = see & torch.nn.functional.pad(keep, (0, pad)).unflatten(1, (nb, block))[:, :, None, :]
        logits.append(((qb @ kb.transpose(-1, -2)) * scale).masked_fill(~see, float("-inf")))
        values.append(vb)
    w = torch.softmax(torch.cat(logits, -1), dim=-1).nan_to_num(0.0)
    out = w[..., : k_g.shape[-2]] @ v_g + (w[..., k_g.shape[-2] :] @ values[1] if in_block else 0)
    return out.flatten(1, 2)[:, :length]


def _readout_meta(q, k_g, block):
    n, length, d = q.shape
    m = k_g.shape[-2]
    return n, length, -(-length // block), dict(M=m, D=d, C=block, BC=_pow2(block), BM=_pow2(m), BD=_pow2(d))


def _readout_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_g: torch.Tensor,
    v_g: torch.Tensor,
    has_sum: torch.Tensor,
    keep: torch.Tensor | None,
    scale: float,
    block: int,
    in_block: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    n, length, nb, consts = _readout_meta(q, k_g, block)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(n, length, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32,
                      device=q.device)  # fmt: skip
    _kernel("readout_fwd")[(n, nb)](
        q, k, v, k_g, v_g, keep, has_sum, out, lse, length, scale, q.stride(0), q.stride(1), k_g.stride(0),
        k_g.stride(1), IN_BLOCK=in_block, HAS_KEEP=keep is not None, F64=q.dtype == torch.float64,
        PREC=_prec(q), num_warps=_warps(consts["BC"], consts["BD"]), **consts,
    )  # fmt: skip
    return out, lse


def _readout_bwd_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_g: torch.Tensor,
    v_g: torch.Tensor,
    has_sum: torch.Tensor,
    keep: torch.Tensor | None,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad: torch.Tensor,
    scale: float,
    block: int,
    in_block: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    n, length, nb, consts = _readout_meta(q, k_g, block)
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    alloc = torch.empty if in_block else torch.zeros  # without the in-block part k and v get no gradient
    dk, dv = (alloc(q.shape, dtype=q.dtype, device=q.device) for _ in range(2))
    dkg, dvg = (torch.empty(n, nb, consts["M"], consts["D"], dtype=q.dtype, device=q.device) for _ in range(2))
    _kernel("readout_bwd")[(n, nb)](
        q, k, v, k_g, v_g, keep, has_sum, out, lse, grad, dq, dk, dv, dkg, dvg, length, scale, q.stride(0),
        q.stride(1), k_g.stride(0), k_g.stride(1), IN_BLOCK=in_block, HAS_KEEP=keep is not None,
        F64=q.dtype == torch.float64, PREC=_prec(q), num_warps=_warps(consts["BC"], consts["BD"]), **consts,
    )  # fmt: skip
    return dq, dk, dv, dkg, dvg


def _readout_fake(q, k, v, k_g, v_g, has_sum, keep, scale, block, in_block):
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    return q.new_empty(q.shape), q.new_empty(q.shape[:2], dtype=acc)


def _readout_bwd_fake(q, k, v, k_g, v_g, has_sum, keep, out, lse, grad, scale, block, in_block):
    n, _, nb, consts = _readout_meta(q, k_g, block)
    return (
        *(q.new_empty(q.shape) for _ in range(3)),
        *(q.new_empty(n, nb, consts["M"], consts["D"]) for _ in range(2)),
    )


def _readout_setup(ctx, inputs, output):
    q, k, v, k_g, v_g, has_sum, keep, scale, block, in_block = inputs
    ctx.save_for_backward(q, k, v, k_g, v_g, has_sum, keep, *output)
    ctx.scale, ctx.block, ctx.in_block = scale, block, in_block


def block_readout(q, k, v, k_g, v_g, has_sum, keep, scale: float, block: int, in_block: bool = True):
    """The readout of the causal block form, fused: per block of `block` queries one softmax over the block's
    summaries (K_g, V_g of its prefix, eq. 12) and, with `in_block`, its own keys up to each query (exact).

    Args:
        q, k, v (n, N, d): queries, keys, values (one dtype; k, v read only with `in_block`).
        k_g, v_g (n, nb | 1, M, d): the summaries block b reads (one set for every block when the axis is 1).
        has_sum (n, nb | 1): bool, whether block b reads its summaries (a prefix without a kept key: False).
        keep (n, N) | None: boolean key padding of the in-block keys.
        scale (float): the logit scale.
        block (int): queries per block (the causal block c).
        in_block (bool): include the in-block keys (the causal form); False: the non-causal readout.

    Returns:
        out (n, N, d): a query that sees no key gets 0. Differentiable in q, k, v, k_g, v_g.
    """
    n, length, _ = q.shape
    nb = -(-length // block)
    if k_g.shape[1] == 1:  # every block reads the same summaries: a zero block stride, no copy
        k_g, v_g = k_g.contiguous().expand(-1, nb, -1, -1), v_g.contiguous().expand(-1, nb, -1, -1)
        has_sum = has_sum.expand(-1, nb)
    k_g, v_g = (x if x.stride(-1) == 1 and x.stride(-2) == x.shape[-1] else x.contiguous() for x in (k_g, v_g))
    if v_g.stride() != k_g.stride():
        k_g, v_g = k_g.contiguous(), v_g.contiguous()
    q, k, v = (x.contiguous() for x in (q, k, v))
    keep = None if keep is None else keep.contiguous()
    return _op("readout")(q, k, v, k_g, v_g, has_sum.contiguous(), keep, float(scale), int(block), bool(in_block))[0]


def attend(q, k_g, v_g, scale: float):
    """The non-causal readout softmax(Q K_g^T * scale) V_g (eq. 12) of q (n, N, d) over k_g, v_g (n, M, d)."""
    has = torch.ones(q.shape[0], 1, dtype=torch.bool, device=q.device)
    return block_readout(q, q, q, k_g[:, None], v_g[:, None], has, None, scale, READOUT_BLOCK, in_block=False)


# ------------------------------------------------------------------------------------------------ decoding
def decode_step_reference(q, k, v, keep, pos, kv, bias, pkv, count, prototypes, tau: float, scale: float):
    """Torch reference of `decode_step` (the arithmetic of plash_state._token), in place on kv, bias, pkv, count."""
    n, d = q.shape
    slot = pos.reshape(-1, 1).expand(n, 1)
    kept = torch.ones(n, 1, dtype=torch.bool, device=q.device) if keep is None else keep.view(n, 1)
    kv.scatter_(1, slot.unsqueeze(-1).expand(-1, -1, kv.shape[-1]), torch.cat((k, v), -1).unsqueeze(1))
    bias.scatter_(1, slot, torch.zeros_like(bias[:, :1]).masked_fill_(~kept, float("-inf")))
    w = torch.softmax(torch.baddbmm(bias.unsqueeze(1), q.unsqueeze(1), kv[..., :d].transpose(-1, -2), alpha=scale), -1)
    out = (w.nan_to_num(0.0) @ kv[..., d:]).squeeze(1)
    a = torch.softmax(k @ (prototypes.to(k.dtype).t() / tau), dim=-1) * kept
    pkv.add_(a.unsqueeze(-1) * torch.cat((k, v), -1).unsqueeze(1))
    count.add_(kept)
    return out


def _decode_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None,
    pos: torch.Tensor,
    kv: torch.Tensor,
    bias: torch.Tensor,
    pkv: torch.Tensor,
    count: torch.Tensor,
    p: torch.Tensor,
    tau: float,
    scale: float,
) -> torch.Tensor:
    n, d = q.shape
    m = p.shape[0]
    c = kv.shape[1] - m
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    _kernel("decode_step")[(n,)](
        q, k, v, keep, pos, kv, bias, pkv, count, p, out, 1.0 / tau, scale, 1 if pos.numel() > 1 else 0,
        C=c, M=m, D=d, BR=_pow2(c + m), BM=_pow2(m), BD=_pow2(d), HAS_KEEP=keep is not None,
        F64=q.dtype == torch.float64, num_warps=_warps(_pow2(c + m), _pow2(d)),
    )  # fmt: skip
    return out


def _decode_fake(q, k, v, keep, pos, kv, bias, pkv, count, p, tau, scale):
    return q.new_empty(q.shape)


_IMPLS = (
    ("stage1", _stage1_impl, _stage1_fake, ()),
    ("stage1_bwd", _stage1_bwd_impl, _stage1_bwd_fake, ()),
    ("readout", _readout_impl, _readout_fake, ()),
    ("readout_bwd", _readout_bwd_impl, _readout_bwd_fake, ()),
    ("decode", _decode_impl, _decode_fake, ("kv", "bias", "pkv", "count")),
)


def _register(interpreted: bool) -> dict:
    """The ops, registered at import (torch.compile cannot trace a registration). Compiled kernels: triton_ops, which
    torch.compile traces into (wrap_triton makes each launch a graph node). The interpreter's kernels cannot run on
    compile's fake tensors, so under TRITON_INTERPRET=1 the ops are opaque custom_ops with shape-only fakes; `_op`
    picks per call."""
    from torch.library import custom_op, triton_op  # torch >= 2.6 (TRITON_OP)

    make, suffix = (custom_op, "_interpreted") if interpreted else (triton_op, "")
    ops = {name: make(f"symformer::plash_{name}{suffix}", fn, mutates_args=mut) for name, fn, _, mut in _IMPLS}
    if interpreted:
        for name, _, fake, _ in _IMPLS:
            ops[name].register_fake(fake)

    def stage1_backward(ctx, gk, gv):
        k, v, p, keep = ctx.saved_tensors
        dk, dv, dp = ops["stage1_bwd"](k, v, p, keep, gk.contiguous(), gv.contiguous(), ctx.tau, ctx.block)
        return dk, dv, dp, None, None, None

    def readout_backward(ctx, grad, _lse_grad):
        q, k, v, k_g, v_g, has_sum, keep, out, lse = ctx.saved_tensors
        dq, dk, dv, dkg, dvg = ops["readout_bwd"](
            q, k, v, k_g, v_g, has_sum, keep, out, lse, grad.contiguous(), ctx.scale, ctx.block, ctx.in_block
        )
        return dq, dk, dv, dkg, dvg, None, None, None, None, None

    ops["stage1"].register_autograd(stage1_backward, setup_context=_stage1_setup)
    ops["readout"].register_autograd(readout_backward, setup_context=_readout_setup)
    return ops


# the interpreter's ops always (cheap); the triton_ops only where CUDA and Triton are present: registering one reads
# its source for kernels, which imports torch._inductor and Triton (seconds), and only a CUDA tensor ever takes them
_OPS = {True: _register(True)} if TRITON_OP else {}
if TRITON_OP and torch.cuda.is_available() and triton_available():
    _OPS[False] = _register(False)


def _op(name: str):
    return _OPS[interpreting()][name]


def decode_step(q, k, v, keep, pos, kv, bias, pkv, count, prototypes, tau: float, scale: float):
    """One decoding token per row, fused and in place (plash_state._token without its rollover): [k | v] into the
    block slot `pos`, its bias row opened (closed for a padded key), the readout over [block; K_g], and its routing
    column A^T [k | v] added to the running sums pkv, `count` advanced by the kept keys. No host read.

    Args:
        q, k, v (n, d): the new token's query, key, value per folded row.
        keep (n, 1) | None: boolean key padding of the new key.
        pos (1,) | (n, 1): int64 slot of the token in the block (shared or per row).
        kv (n, c + M, 2 d), bias (n, c + M), pkv (n, M, 2 d), count (n, 1): the PlashState tensors.
        prototypes (M, d): the prototypes; tau (float): their temperature; scale (float): the logit scale.

    Returns:
        out (n, d): the readout (0 for a row that sees no kept key).
    """
    keep = None if keep is None else keep.contiguous()
    p = prototypes.to(q.dtype).contiguous()
    return _op("decode")(*(x.contiguous() for x in (q, k, v)), keep, pos.contiguous(), kv, bias, pkv, count, p,
                   float(tau), float(scale))  # fmt: skip


# ------------------------------------------------------------------------------------------------ the core's paths
def causal_blocks(core, q, k, v, scale: float, keep):
    """PlashAttention._causal_blocks on the kernels: the per-block Stage I sums in one launch, their prefix sums and
    Stage II-III (core.prefix_summaries, torch) on the nb - 1 prefixes, then the in-block and prefix-summary readout
    in one launch. q, k, v (n, N, d) with blocks aligned to position 0; keep (n, N) | None."""
    n, length, d = q.shape
    c, m = core.causal_block, core.M
    nb = -(-length // c)
    has = torch.zeros(n, nb, dtype=torch.bool, device=q.device)  # block 0 reads no summary
    if nb == 1:
        k_g = v_g = q.new_zeros(n, 1, m, d)
    else:
        done = (nb - 1) * c
        kk = None if keep is None else keep[:, :done]
        pk, pv = stage1_block_sums(k[:, :done], v[:, :done], core.prototypes, core.tau, kk, c)
        k_g, v_g = core.prefix_summaries(pk.cumsum(1).flatten(0, 1), pv.cumsum(1).flatten(0, 1))
        zero = k_g.new_zeros(n, 1, m, d)  # (n (nb - 1), M, d) -> (n, nb, M, d), block 0's unread summaries first
        k_g, v_g = (torch.cat((zero, x.unflatten(0, (n, nb - 1))), 1) for x in (k_g, v_g))
        if keep is None:
            has[:, 1:] = True
        else:  # a prefix without a kept key has no summary to read
            has[:, 1:] = kk.unflatten(1, (nb - 1, c)).any(-1).cumsum(1) > 0
    return block_readout(q, k, v, k_g, v_g, has, keep, scale, c, in_block=True)
