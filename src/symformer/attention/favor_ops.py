"""FAVOR+'s kernels (ESPR Tier 7): the positive random features (T7.3), their stabilised query and key forms, and the
non-causal (one pass or streamed in row blocks) and causal (chunked prefix sums) attention they give; FavorAttention
(favor.py) validates, dispatches and holds the features. The stabilisers are the module doc of favor.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from symformer._torch_compat import autocast_dtype
from symformer._validation import check_int
from symformer.kernels import use_kernel
from symformer.kernels.favor import favor_causal_kernel, unsupported_causal


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
    kernel: str | None = None,
) -> torch.Tensor:
    """Causal y_i = sum_{j<=i} ... with chunked prefix sums: within a chunk the C x C masked kernel, across
    chunks an exclusive prefix sum of per-chunk phi(K)^T [V, 1]. Memory O(N (C + m Dv / C)), linear in N.
    padded: some keys were zeroed by a key-padding mask (see _quotient). kernel: the Triton switch (use_kernel;
    kernels/favor.py computes the same sums in one fused kernel)."""
    if use_kernel("favor_causal", (qf, kf, v), kernel, unsupported_causal(qf, kf, v)):
        return favor_causal_kernel(qf, kf, v, chunk_size, denominator_eps, padded)
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
