"""FAVOR+: softmax attention estimated with positive random features (ESPR Tier 7).

With q^ = sqrt(scale) q and k^ = sqrt(scale) k the logit is the plain dot product
alpha_ij = q^_i . k^_j (T7.2; scale = 1/sqrt(d_act) for ESPR, so sqrt(scale) = d_act^(-1/4)).
The positive feature phi_w(x) = exp(w.x - |x|^2/2) / sqrt(m) with w ~ N(0, I) gives
E[phi_w(x) phi_w(y)] = exp(x.y) / m (T7.3), hence with m features
exp(alpha_ij) ~= phi(q^_i) . phi(k^_j), and the attention output
y_i = sum_j phi(q^_i).phi(k^_j) v_j / sum_j phi(q^_i).phi(k^_j)
costs O(N m D) instead of O(N^2 D).

Stabiliser. We subtract a constant c_i from the log-features of query i and one constant c from the
log-features of all keys of a (batch, head) before exponentiating. The kernel estimate of every pair
(i, j) is then multiplied by exp(-c_i - c), a factor common to the numerator and the denominator of
y_i, so the normalised attention is unchanged exactly -- the stabiliser introduces no bias. A
constant that varied with the key j would not cancel; that is why the key stabiliser is a max over
all keys and features, never a per-key max. For the same reason the query term -|q^_i|^2/2 is a
per-query constant and is dropped altogether (it only matters when kernel_eps > 0).

performer-pytorch adds kernel_eps = 1e-4 to every feature after stabilising, and its causal form adds
1e-6 to the running key sum; both shift the estimate (by an amount that depends on the stabiliser),
so ours default to 0. Set kernel_eps=1e-4 (and denominator_eps=1e-6 for causal) to reproduce
performer-pytorch's FastAttention exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from symformer._rng import check_seed, resolve_seed
from symformer._rng import generator as purpose_generator
from symformer._torch_compat import autocast_dtype
from symformer._validation import (
    all_finite,
    check_attention_inputs,
    check_float,
    check_int,
    check_tensor,
    fail,
    reads_values,
)
from symformer.attention.decoding import DecodingCore
from symformer.attention.favor_state import FavorState, check_features, favor_step
from symformer.attention.softmax import (
    draw_dtype,
    float32_compute,
    key_padding_mask,
    needs_float32,
)

__all__ = [
    "FavorAttention",
    "draw_features",
    "haar_orthogonal",
    "positive_features",
    "favor_noncausal",
    "favor_noncausal_streamed",
    "favor_causal",
]


def _gaussian(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def haar_orthogonal(d: int, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    """Haar-random orthogonal float64 matrices: (d, d), or (n, d, d) when n is given (columns orthonormal).
    The sign fix makes the QR factor exactly Haar-distributed (Mezzadri 2007); without it LAPACK's Q is
    biased in its signs and the rows would not be marginally uniform on the sphere, which would bias T7.3."""
    check_int("d", d, 1)
    qm, r = torch.linalg.qr(_gaussian((d, d) if n is None else (check_int("n", n, 1), d, d), generator))
    signs = torch.where(torch.diagonal(r, dim1=-2, dim2=-1) >= 0, 1.0, -1.0).to(qm.dtype)
    return qm * signs.unsqueeze(-2)  # signs (..., d) -> (..., 1, d): one per column


def _haar_block(d: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-random orthogonal d x d matrix with orthonormal rows."""
    return haar_orthogonal(d, generator).T  # (d, d): orthonormal columns -> rows


def draw_features(
    n_features: int, dim: int, orthogonal: bool = True, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(n_features, dim) float64 matrix W whose rows are marginally N(0, I_dim) (T7.1).

    orthogonal=True: blocks of `dim` mutually orthogonal directions, each row rescaled by the norm of an
    independent Gaussian vector, so every row is still exactly N(0, I) (unbiasedness is preserved) while
    rows of a block are orthogonal (the variance-reducing ORF construction of FAVOR+). generator None: torch's
    global generator, as nn.Linear draws (the one seeding rule, _rng)."""
    check_int("n_features", n_features, 1)
    check_int("dim", dim, 1)
    g = generator
    if not orthogonal:
        return _gaussian((n_features, dim), g)
    blocks = [_haar_block(dim, g) for _ in range(-(-n_features // dim))]
    directions = torch.cat(blocks)[:n_features]
    norms = _gaussian((n_features, dim), g).norm(dim=-1, keepdim=True)
    return directions * norms


def positive_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """phi_w(x) = exp(w.x - |x|^2/2) / sqrt(m) for x (..., d), w (m, d): the unstabilised map of T7.1
    (reference for tests; the attention uses the stabilised form below)."""
    # (..., d) @ (d, m) -> (..., m)
    return torch.exp(x @ w.T - 0.5 * x.pow(2).sum(-1, keepdim=True)) / math.sqrt(w.shape[0])


def _project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w^T for x (..., N, d), w (m, d) as ONE GEMM over all rows: matmul of a non-contiguous x (the
    (B, H, N, Dh) heads view of a (B, N, H, Dh) projection) would expand w into a batched GEMM of thin
    N x d x m products; copying x (d << m) costs less. matmul folds a contiguous x into one mm and returns
    a tensor autograd does not track as a view: the callers' in-place sub_/exp_ on an explicit .view() of
    the mm output made autograd record CopySlices, which copies and zero-fills feature-sized gradients."""
    return torch.matmul(x.contiguous(), w.T)  # (..., N, d) @ (d, m) -> (..., N, m)


def _half_sq_norm(x: torch.Tensor, scale: float) -> torch.Tensor:
    """|x^|^2 / 2 with x^ = sqrt(scale) x (one fused pass); scale = -s gives exactly -(|x^|^2 / 2) at s."""
    return (0.5 * scale) * torch.linalg.vector_norm(x, dim=-1, keepdim=True).square()


def _query_features(q: torch.Tensor, w: torch.Tensor, scale: float, kernel_eps: float) -> torch.Tensor:
    """Stabilised features of q^ = sqrt(scale) q (T7.2); the factor sqrt(scale) is folded into w.

    Without eps any positive per-query factor cancels (module doc), so phi(q^_i) is taken up to the factor
    exp(|q^_i|^2/2 + max_l q^_i.w_l) sqrt(m): exp(q^_i.w_l - max_l q^_i.w_l), largest entry 1 in every row.
    Computed in place on the GEMM output: on CPU a fresh N x m tensor costs more (page faults) than the exp."""
    proj = _project(q, w * math.sqrt(scale))
    if kernel_eps == 0:
        return _softmax_query_features(proj)
    stab = proj.detach().amax(dim=-1, keepdim=True)
    # performer-pytorch: m^-1/2 (exp(q^.w - |q^|^2/2 - max_l q^.w_l) + eps), max detached
    log_ratio = -0.5 * math.log(w.shape[0])
    return torch.exp(proj - _half_sq_norm(q, scale) - (stab - log_ratio)) + kernel_eps * math.exp(log_ratio)


def _key_features(
    k: torch.Tensor,
    w: torch.Tensor,
    scale: float,
    kernel_eps: float,
    denominator_eps: float = 0.0,
    norm_scale: float | None = None,
    feature_major: bool = False,
) -> torch.Tensor:
    """Stabilised features exp(k^.w - |k^|^2/2 - c) / sqrt(m) of k^ = sqrt(scale) k, up to the factor
    sqrt(m) exp(-c) common to all keys of a (batch, head); a factor varying with the key would not cancel.
    c = max over keys and features of the log-feature, so the largest feature is 1 and none overflows.
    Without eps the softmax form (one more common factor) is used; denominator_eps is added to the key sum,
    so it sees the features' scale, and then the max form is kept. norm_scale: the scale of |k^|^2 / 2 when
    w already carries sqrt(scale) (scale = 1 then). feature_major: the softmax form is stored (..., m, N) and
    returned as its transposed (..., N, m) view, for callers that multiply by phi(K)^T: the gradient then
    arrives contiguous, where the (N, m) layout made the backward copy it to undo the flatten."""
    ws = w * math.sqrt(scale) if scale != 1.0 else w
    norm_scale = scale if norm_scale is None else norm_scale
    if kernel_eps == 0 and denominator_eps == 0 and not _half_precision(k):
        return _softmax_key_features(k, ws, norm_scale, feature_major)
    half_sq = _half_sq_norm(k, norm_scale)
    proj = _project(k, ws)
    if kernel_eps == 0:
        # c from the row maxima (no pass over the N x m block besides amax); subtract |k^|^2/2 + c in one go
        c = (proj.detach().amax(dim=-1, keepdim=True) - half_sq.detach()).amax(dim=-2, keepdim=True)
        return proj.add_(-(half_sq + c)).exp_()  # adding the negated (N, 1) term: no feature-sized neg in backward
    # performer-pytorch: the constant is max_{j,l} k^_j.w_l (detached), then eps is added
    log_ratio = -0.5 * math.log(w.shape[0])
    stab = proj.detach().amax(dim=(-1, -2), keepdim=True)
    return torch.exp(proj - half_sq - (stab - log_ratio)) + kernel_eps * math.exp(log_ratio)


def _half_precision(t: torch.Tensor) -> bool:
    """float16 here or under autocast: the softmax key form divides by a sum over all N x m entries, so its
    entries sit near 1 / (N m), below float16's normal range (6e-5) at N m > 16k; the max form keeps the
    largest at 1. (bfloat16 has float32's exponent range.)"""
    if t.dtype == torch.float16:
        return True
    return autocast_dtype(t.device.type) == torch.float16


def _softmax_query_features(proj: torch.Tensor) -> torch.Tensor:
    """softmax_l(q^_i.w_l) = exp(q^_i.w_l - max_l) / Z_i: phi(q^_i) times a positive per-query constant, which
    cancels between numerator and denominator (module doc). One fused op (and one fused backward) in place of
    amax, subtract and exp; entries lie in (0, 1] and each row's largest is at least 1/m, so none overflows."""
    return torch.softmax(proj, dim=-1)


def _softmax_key_features(k: torch.Tensor, ws: torch.Tensor, scale: float, feature_major: bool = False) -> torch.Tensor:
    """phi(k^_j) for all keys of a (batch, head) times ONE positive constant: the log-features
    k^.w_l - |k^|^2/2 come from one GEMM of [k, |k^|^2/2] with [ws, -1] (ws = sqrt(scale) w), and a softmax
    over the flattened (N, m) block subtracts their maximum and divides by their sum, both common to every
    key, so the factor cancels (module doc); a per-key constant would not, hence never a softmax over m alone."""
    ones = ws.new_ones(ws.shape[0], 1)
    kx, wx = torch.cat((k, _half_sq_norm(k, scale)), dim=-1), torch.cat((ws, -ones), dim=-1)
    # (..., m, N), else (..., N, m)
    logf = torch.matmul(wx, kx.transpose(-1, -2)) if feature_major else _project(kx, wx)
    f = torch.softmax(logf.flatten(-2), dim=-1).view_as(logf)  # over the N m entries of (..., N m)
    return f.transpose(-1, -2) if feature_major else f  # (..., m, N) -> (..., N, m) view


def _with_ones(v: torch.Tensor) -> torch.Tensor:
    """[v, 1]: one matmul then gives numerator and denominator together."""
    return torch.cat((v, v.new_ones(1).expand(*v.shape[:-1], 1)), dim=-1)  # (..., N, Dv) -> (..., N, Dv + 1)


def _needs_grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def favor_noncausal(qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor, denominator_eps: float = 0.0) -> torch.Tensor:
    """y_i = phi(q_i) (phi(K)^T V) / phi(q_i).(phi(K)^T 1): O(N m Dv) time, O(m Dv) extra memory."""
    kv = kf.transpose(-1, -2) @ v  # (B, H, m, Dv)
    ksum = kf.sum(dim=-2, keepdim=True).transpose(-1, -2)  # (B, H, m, 1)
    if denominator_eps:
        ksum = ksum + denominator_eps
    out = qf @ kv
    den = qf @ ksum
    return out / den if _needs_grad(qf, kf, v) else out.div_(den)


def _block_rows(x: torch.Tensor, m: int) -> int:
    """Rows per streamed block, so one block of features is ~4 MB: fresh N x m tensors are large enough for
    glibc to mmap them, and faulting in their pages costs more than the exp itself; blocks below the
    threshold are recycled by the allocator and stay in cache between the GEMM, the exp and the next GEMM.
    The ~4 MB is per intra-op thread: each block's ops (~12 per key block, ~5 per query block) are parallel
    regions, and with more threads a fixed block gives every thread half the work for the same fork/join
    cost."""
    # measured on a loaded 2-core machine, where every join waits on a descheduled thread: 1024-row blocks at
    # N = 8192 ran 2.2x performer-pytorch and 2048-row blocks 1.2x (one thread: 0.37 and 0.39)
    per_thread = 1 << 20
    return max(64, per_thread * max(1, torch.get_num_threads()) // (max(1, math.prod(x.shape[:-2])) * m))


def favor_noncausal_streamed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    scale: float,
    keep: torch.Tensor | None = None,
    denominator_eps: float = 0.0,
    block_rows: int | None = None,
) -> torch.Tensor:
    """Non-causal FAVOR+ (kernel_eps = 0) in row blocks: memory O(rows m + m Dv) besides q, k, v and the output.

    Keys: the per-(batch, head) stabiliser c is a running maximum; when it grows, the accumulated
    phi(K)^T V and phi(K)^T 1 are multiplied by exp(c_old - c_new), so every key ends up scaled by the same
    exp(-c_final), which cancels in the normalised attention (module doc): exact, not an approximation."""
    ws = (w * math.sqrt(scale)).T  # (m, Dh) -> (Dh, m)
    grad = _needs_grad(q, k, v)
    if grad and block_rows is None:
        # Under autograd every block's features are saved for the backward anyway, so blocks save no memory and
        # only add the running-max rescaling and a concatenation (costly at short N, e.g. N ~ 100 in forecasting)
        return _favor_one_block(q, k, v, ws, scale, keep, denominator_eps)
    rows = block_rows or _block_rows(k, w.shape[0])
    kv = ksum = c = None
    wx = torch.cat((ws.T, -ws.new_ones(ws.shape[1], 1)), dim=-1)  # [sqrt(scale) w, -1]
    for s in range(0, k.shape[-2], rows):
        kb = k[..., s : s + rows, :]
        # log phi(k^_j) + log sqrt(m) = [k, |k^|^2/2] . [sqrt(scale) w, -1]: one GEMM (the cat is the copy the
        # strided heads view needed anyway), no separate pass subtracting the norms
        logf = _project(torch.cat((kb, _half_sq_norm(kb, scale)), dim=-1), wx)
        c_new = logf.detach().amax(dim=(-1, -2), keepdim=True)
        c_new = c_new if c is None else torch.maximum(c, c_new)
        f = logf.sub_(c_new).exp_()
        if keep is not None:
            f = f * keep[..., s : s + rows, :]
        # (B, H, m, Dv), (B, H, 1, m)
        kvb, sb = f.transpose(-1, -2) @ v[..., s : s + rows, :], f.sum(dim=-2, keepdim=True)
        if c is None:
            kv, ksum = kvb, sb
        else:
            r = torch.exp(c - c_new)
            kv, ksum = kv * r + kvb, ksum * r + sb
        c = c_new
    # (B, H, 1, m) -> (B, H, m, 1)
    ksum = ksum.transpose(-1, -2) + denominator_eps if denominator_eps else ksum.transpose(-1, -2)
    kvs = torch.cat((kv, ksum), dim=-1)  # [phi(K)^T V, phi(K)^T 1]: one GEMM per query block gives both
    # without autograd each block's quotient goes straight into the output (no concatenation pass over it)
    out = None if grad else q.new_empty(*torch.broadcast_shapes(q.shape[:-2], kvs.shape[:-2]), q.shape[-2], v.shape[-1])
    outs = []
    for s in range(0, q.shape[-2], rows):
        o = _softmax_query_features(_project(q[..., s : s + rows, :], ws.T)) @ kvs  # per-query constant: cancels
        if grad:
            outs.append(o[..., :-1] / o[..., -1:])
        else:
            torch.div(o[..., :-1], o[..., -1:], out=out[..., s : s + rows, :])
    if out is not None:
        return out
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


def _favor_one_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ws: torch.Tensor,
    scale: float,
    keep: torch.Tensor | None,
    denominator_eps: float,
) -> torch.Tensor:
    """The training form of favor_noncausal_streamed (same estimator, same stabilisers): one block, and the
    numerator and denominator from one GEMM per side, phi(K)^T [V, 1] then phi(Q) [phi(K)^T V, phi(K)^T 1],
    so the backward accumulates no separate feature-sized gradients of a key sum and a second query GEMM."""
    f = _key_features(k, ws.T, 1.0, 0.0, denominator_eps, scale, feature_major=True)  # one constant per (batch, head)
    if keep is not None:
        f = f * keep
    kvs = f.transpose(-1, -2) @ _with_ones(v)  # (B, H, m, Dv + 1): [phi(K)^T V, phi(K)^T 1]
    if denominator_eps:
        kvs = torch.cat((kvs[..., :-1], kvs[..., -1:] + denominator_eps), dim=-1)
    out = _softmax_query_features(_project(q, ws.T)) @ kvs  # per-query constant: cancels
    return out[..., :-1] / out[..., -1:]


def _quotient(out: torch.Tensor, padded: bool) -> torch.Tensor:
    """[numerator, denominator] -> numerator / denominator; with key padding a query before the first kept key has
    denominator 0 and gets the output 0 (never read, but finite, so later layers stay finite)."""
    den = out[..., -1:]
    if padded:
        den = torch.where(den > 0, den, torch.ones_like(den))
    return out[..., :-1] / den


def favor_causal(
    qf: torch.Tensor,
    kf: torch.Tensor,
    v: torch.Tensor,
    chunk_size: int = 128,
    denominator_eps: float = 0.0,
    padded: bool = False,
) -> torch.Tensor:
    """Causal y_i = sum_{j<=i} ... with chunked prefix sums: within a chunk the C x C masked kernel, across
    chunks an exclusive prefix sum of per-chunk phi(K)^T [V, 1]. Memory O(N (C + m Dv / C)), linear in N.
    padded: some keys were zeroed by a key-padding mask (see _quotient)."""
    b, h, n, m = qf.shape
    c = min(chunk_size, n)
    pad = (-n) % c
    vv = _with_ones(v)
    if c == n and not denominator_eps:  # one chunk: no earlier chunk, so no prefix sums phi(K)^T [V, 1] to form
        return _quotient((qf @ kf.transpose(-1, -2)).tril() @ vv, padded)  # (B, H, N, N) @ (B, H, N, Dv + 1)
    if pad:  # zero key features on padding rows contribute nothing; padded query rows are dropped
        qf, kf, vv = (F.pad(t, (0, 0, 0, pad)) for t in (qf, kf, vv))
    nc = (n + pad) // c
    qc, kc, vc = (t.reshape(b, h, nc, c, t.shape[-1]) for t in (qf, kf, vv))  # (B, H, nc C, .) -> (B, H, nc, C, .)
    kv = kc.transpose(-1, -2) @ vc  # (B, H, nc, m, Dv + 1) per-chunk sums
    prev = torch.cumsum(kv, dim=2) - kv  # exclusive prefix over chunks
    if denominator_eps:
        prev = prev + F.pad(torch.full_like(prev[..., :1], denominator_eps), (prev.shape[-1] - 1, 0))
    local = (qc @ kc.transpose(-1, -2)).tril()  # (B, H, nc, C, C) keys j <= i inside the chunk
    # (B, H, nc, C, Dv + 1) -> (B, H, N, Dv + 1)
    return _quotient((qc @ prev + local @ vc).reshape(b, h, nc * c, -1)[:, :, :n], padded)


def _check_finite_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Finiteness is tested on the output: a NaN/inf in q, k or v always reaches it (an inf entry times a
    Gaussian feature gives +-inf projections; after the max is subtracted, inf - inf is NaN). Validating all
    three inputs up front would cost as much as one FAVOR+ GEMM, so the inputs are scanned only when the output
    is not finite, to name the argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not all_finite(t):
            fail(name, "a tensor with NaN or inf entries", "finite values")
    fail("q, k", "finite inputs whose random-feature estimate overflows", "inputs of moderate magnitude")


class FavorAttention(DecodingCore):
    """FAVOR+ attention core with the SDPA call shape: `forward(q, k, v, attn_mask=None, is_causal=False,
    scale=None, state=None)`, q and k (B, H, Nq|Nk, head_dim), v (B, H, Nk, Dv) -> (B, H, Nq, Dv); every head
    uses the same features.

    The estimator (Performer's FAVOR+, ESPR Tier 7, module docstring): softmax(scale q k^T) v estimated with m
    positive random features, `scale` default 1/sqrt(head_dim); `is_causal=True` by prefix sums over keys, as
    in Performer. The stabilisers (one constant per query, one per (batch, head) for the keys) cancel exactly.

    head_dim: size of q and k. n_features: m (FAVOR+ default 256 for head_dim 64-128). orthogonal:
    block-orthogonal features (ORF, rows still exactly N(0, I)). seed: the features are drawn from it (draw i of
    seed s from `_rng.generator("favor.draw<i>", s)`; None: s is drawn from torch's global generator, as nn.Linear
    draws its weights, so torch.manual_seed governs it); they are a fixed buffer between explicit `redraw()` /
    `reseed()` / `set_features()` calls, saved in the state_dict with the seed and the number of draws: the training
    schedule of redraws is train.callbacks.FeatureRedraw (performer-pytorch's ProjectionUpdater), not a counter in
    forward. chunk_size: chunk length of the causal
    prefix sums. block_rows: rows per block of the streamed non-causal form (None: ~4 MB of features per block).
    kernel_eps / denominator_eps: performer-pytorch's additive terms, 0 by default (module docstring).
    dropout: must be 0 (FAVOR+ forms no attention weights to drop).

    Ours, not the paper's:
    * attn_mask: only a boolean key-padding mask (True = keep) broadcastable to (B, H, 1, Nk) is honoured, by
      zeroing the masked keys' features; a query that sees no kept key gets the output 0; any other mask is a
      ValueError.
    * decoding: `init_state()` and `forward(..., is_causal=True, state=st)` / `step` continue a causal sequence
      at a constant cost per token (favor_state); the features must stay fixed while a state lives (a redraw
      makes the next step raise).
    * precision: 16-bit inputs (or autocast) are computed in float32 and returned in their dtype; the features
      are a float32 master, kept by `.to(torch.bfloat16)` / `.half()` and by a 16-bit default dtype.

    Args:
        head_dim (int): size of q and k.
        n_features (int): m, the random features.
        orthogonal (bool): block-orthogonal features (ORF).
        chunk_size (int): chunk length of the causal prefix sums.
        kernel_eps (float): performer-pytorch's term added to every feature (0: none).
        denominator_eps (float): performer-pytorch's term added to the causal key sum (0: none).
        seed (int | None): the seed of the feature draws.
        block_rows (int | None): rows per block of the streamed non-causal form.
        dropout (float): must be 0.0.

    Examples:
        >>> import torch
        >>> from symformer.attention import FavorAttention, NaiveAttention
        >>> _ = torch.manual_seed(0)
        >>> core = FavorAttention(head_dim=8, n_features=64, seed=0)
        >>> q, k, v = (0.3 * torch.randn(1, 2, 10, 8) for _ in range(3))  # (B, H, N, Dh)
        >>> out = core(q, k, v, is_causal=True)
        >>> out.shape
        torch.Size([1, 2, 10, 8])
        >>> torch.allclose(out[..., 0, :], v[..., 0, :], atol=1e-6)  # the first query reads the first key only
        True
        >>> st = core.init_state()  # decoding token by token equals the full causal forward
        >>> steps = [core(q[..., i : i + 1, :], k[..., i : i + 1, :], v[..., i : i + 1, :], is_causal=True, state=st)
        ...          for i in range(10)]
        >>> torch.allclose(torch.cat(steps, dim=-2), out, atol=1e-5)
        True
        >>> big = FavorAttention(head_dim=8, n_features=1024, seed=0)  # more features: closer to softmax attention
        >>> float((big(q, k, v) - NaiveAttention()(q, k, v)).abs().max()) < 0.02
        True
    """

    supports_causal = True
    builds_lazily = True  # fixed random features, nothing to train: a host may build it on first use

    def __init__(
        self,
        head_dim: int,
        n_features: int = 256,
        orthogonal: bool = True,
        chunk_size: int = 128,
        kernel_eps: float = 0.0,
        denominator_eps: float = 0.0,
        seed: int | None = None,
        block_rows: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        # explicit, not silently dropped: FAVOR+ never forms the attention matrix, so there is no attention
        # weight to drop (Performer has none either); use the host layer's output/residual dropout instead
        if check_float("dropout", dropout, 0.0, 1.0, high_open=True) != 0.0:
            fail(
                "dropout",
                dropout,
                "0.0: FAVOR+ has no attention matrix to apply dropout to (set the "
                "attention's dropout to 0; residual and feed-forward dropout still apply)",
            )
        self.head_dim = check_int("head_dim", head_dim, 1)
        self.n_features = check_int("n_features", n_features, 1)
        self.orthogonal = bool(orthogonal)
        self.chunk_size = check_int("chunk_size", chunk_size, 1)
        self.block_rows = None if block_rows is None else check_int("block_rows", block_rows, 1)
        self.kernel_eps = check_float("kernel_eps", kernel_eps, 0.0)
        self.denominator_eps = check_float("denominator_eps", denominator_eps, 0.0)
        seed = resolve_seed(seed)
        # fixed features are a buffer (a state_dict reproduces the module); seed and the number of draws are
        # buffers too, so redraws after load_state_dict continue the same deterministic sequence
        # the draw runs on the CPU (its generator's device) whatever device the constructor is called under, then
        # moves there: from_pretrained builds models on the meta device, where no value can be drawn or read
        home = torch.empty(()).device
        dtype = draw_dtype()  # the float32 master under a 16-bit default (_apply keeps it)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.long, device=home))
        self.register_buffer("draws", torch.zeros((), dtype=torch.long, device=home))
        self.register_buffer("features", self._draw(0, seed).to(device=home, dtype=dtype))
        # how often the features changed (redraw, reseed, set_features, load, move): a decoding state bound to an
        # older epoch raises (favor_state.check_features); a Python int, so compiled steps guard on it for free
        self._features_epoch = 0

    def _draw(self, index: int, seed: int | None = None) -> torch.Tensor:
        """Draw `index` of the feature sequence of `seed` (default the module's): a stream of its own per draw, so
        no two (seed, draw) pairs share one (seed * 1_000_003 + index did when index reached 1_000_003)."""
        seed = int(self.seed) if seed is None else seed
        with torch.device("cpu"):
            g = purpose_generator(f"favor.draw{index}", seed)
            return draw_features(self.n_features, self.head_dim, self.orthogonal, g)

    @torch.no_grad()
    def redraw(self) -> None:
        """Draw fresh features (deterministic given seed and the number of earlier draws)."""
        self.draws += 1
        self.features.copy_(self._draw(int(self.draws)))
        self._features_epoch += 1

    @torch.no_grad()
    def reseed(self, seed: int) -> None:
        """Restart the feature sequence from `seed` (per-layer draws: train/callbacks.FeatureRedraw gives every
        layer its own seed, as performer-pytorch draws one projection per layer).

        Args:
            seed (int): the start of the feature sequence.
        """
        if check_seed(seed) is None:
            fail("seed", seed, "an integer (the start of the feature sequence)", TypeError)
        self.seed.fill_(seed)
        self.draws.zero_()
        self.features.copy_(self._draw(0))
        self._features_epoch += 1

    @torch.no_grad()
    def set_features(self, w: torch.Tensor) -> None:
        """Use a given (n_features, head_dim) projection, e.g. performer-pytorch's `projection_matrix`.

        Args:
            w (n_features, head_dim): the feature directions, rows marginally N(0, I) for an unbiased estimate.
        """
        check_tensor("w", w, 2)
        if tuple(w.shape) != tuple(self.features.shape):
            fail("w", f"shape {tuple(w.shape)}", f"shape {tuple(self.features.shape)} (n_features, head_dim)")
        self.features.copy_(w)
        self._features_epoch += 1

    def _key_keep(self, attn_mask: torch.Tensor | None, k: torch.Tensor) -> torch.Tensor | None:
        """(B|1, H|1, Nk, 1) float keep-mask from a boolean key-padding mask, else ValueError."""
        keep = key_padding_mask(attn_mask, k, "random features")
        return None if keep is None else keep.to(k.dtype)

    def init_state(self, batch: int | None = None, max_len: int | None = None) -> FavorState:
        """An empty causal decoding state (favor_state module doc; the contract: attention.decoding); fill it with
        `forward(..., is_causal=True, state=)` or `step` (prefill and decoding). batch, max_len: accepted and
        checked (positive ints or None), not needed: the state's tensors take their final shapes at its first step
        (batch, heads, value dim, dtype and device come from those tokens) and no shape depends on the context
        length, so a compiled or graph-captured step sees static shapes either way."""
        for name, size in (("batch", batch), ("max_len", max_len)):
            if size is not None:
                check_int(name, size, 1)
        if self.kernel_eps or self.denominator_eps:
            fail(
                "kernel_eps / denominator_eps",
                (self.kernel_eps, self.denominator_eps),
                "0 for a decoding state: "
                "performer-pytorch's eps terms are added at the scale of the global stabiliser, which a running "
                "state cannot reproduce",
            )
        return FavorState()

    def step(self, q, k, v, state: FavorState, attn_mask=None, scale=None) -> torch.Tensor:
        """Causal FAVOR+ over L new tokens given the state of the earlier ones: q, k (B, H, L, Dh), v (B, H, L, Dv)
        -> (B, H, L, Dv), equal to the last L rows of the full causal forward over all tokens; `state` is updated.
        attn_mask: a boolean key-padding mask of the new keys, broadcastable to (B, H, 1, L). Per new token
        O(m (Dh + Dv)) time whatever the context; the state is O(m Dv) per head (favor_state module doc)."""
        if not isinstance(state, FavorState):
            fail("state", type(state).__name__, "a FavorState from FavorAttention.init_state()", TypeError)
        check_attention_inputs(q, k, v, finite_kv=False, finite_q=False)
        if q.shape[-1] != self.head_dim or q.shape[-2] != k.shape[-2]:
            fail(
                "q",
                f"shape {tuple(q.shape)} with {k.shape[-2]} keys",
                f"head dim {self.head_dim} and one query per new key",
            )
        check_features(state, self.features, self._features_epoch)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)
        keep = self._key_keep(attn_mask, k)
        with torch.autocast(q.device.type, enabled=False):
            y = favor_step(q, k, v, self.features, scale, None if keep is None else keep > 0, state, self.chunk_size)
        if reads_values(y) and not all_finite(y):  # a host read: CPU in eager mode, or value_checks("always")
            _check_finite_inputs(q, k, v)
        return y

    def _apply(self, fn, recurse=True):
        """`.to(torch.bfloat16)` / `.half()` keep the features a float32 master (16 bits would round the random
        directions themselves); the computation casts the inputs up (forward)."""
        master = self.features
        out = super()._apply(fn, recurse)
        if self.features.dtype in (torch.float16, torch.bfloat16):
            self.features = master.to(device=self.features.device, dtype=torch.float32)
        if self.features is not master:  # moved or cast: a live decoding state holds the old buffer
            self._features_epoch += 1
        return out

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None, state: FavorState | None = None):
        """SDPA's call; with `state` (causal only) the queries continue the sequence the state holds (`step`).

        Args:
            q (B, H, Nq, Dh): queries, Dh = head_dim; 16-bit inputs are computed in float32.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dv): values, q's dtype.
            attn_mask (B, H, 1, Nk): a boolean key-padding mask (True = keep), broadcastable; any other mask is a
                ValueError.
            is_causal (bool): prefix sums over the keys (Nq = Nk).
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).
            state (FavorState | None): a decoding state from `init_state()` (is_causal=True), updated in place.

        Returns:
            out (B, H, Nq, Dv): the FAVOR+ estimate of softmax attention, in q's dtype.
        """
        if state is not None:
            if not is_causal:
                fail("is_causal", is_causal, "True with a decoding state")
            return self.step(q, k, v, state, attn_mask, scale)
        if needs_float32(q, k, v):  # 16-bit inputs or autocast: exponential features and sums in float32
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale)
        check_attention_inputs(q, k, v, finite_kv=False, finite_q=False)  # finiteness: the output is tested
        if q.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]}", f"the head_dim {self.head_dim} the features were drawn for")
        if is_causal and q.shape[-2] != k.shape[-2]:
            fail("is_causal", f"True with {q.shape[-2]} queries and {k.shape[-2]} keys", "equal query and key lengths")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)
        keep = self._key_keep(attn_mask, k)
        w = self.features.to(q.dtype)
        # T7.2: q^ = sqrt(scale) q, k^ = sqrt(scale) k, so q^.k^ is the logit exactly
        if not is_causal and self.kernel_eps == 0:
            y = favor_noncausal_streamed(q, k, v, w, scale, keep, self.denominator_eps, self.block_rows)
        else:
            qf = _query_features(q, w, scale, self.kernel_eps)
            one_chunk = is_causal and k.shape[-2] <= self.chunk_size  # favor_causal then multiplies by phi(K)^T
            kf = _key_features(k, w, scale, self.kernel_eps, self.denominator_eps, feature_major=one_chunk)
            if keep is not None:
                kf = kf * keep
            if is_causal:
                y = favor_causal(qf, kf, v, self.chunk_size, self.denominator_eps, keep is not None)
            else:
                y = favor_noncausal(qf, kf, v, self.denominator_eps)
        # a cheap test on the output where reading it is free (_validation.reads_values); the culprit is named only
        # when it fails
        if reads_values(y) and not all_finite(y):
            _check_finite_inputs(q, k, v)
        return y

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._features_epoch += 1  # the features were copied in place: live decoding states are stale

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, n_features={self.n_features}, orthogonal={self.orthogonal}"
