"""The Triton bodies of the FAVOR+ kernels (kernels/favor.py wraps, launches and differentiates them).

Imported only where Triton imports. The functions are left undecorated: kernels/favor.py applies `triton.jit` when
it first launches them, because Triton reads TRITON_INTERPRET when it decorates (a module-level `@triton.jit` would
fix the interpreter choice at import time, before a test could set it).
"""

import triton.language as tl


def chunk_causal_kernel(
    q,
    k,
    v,
    o,
    den,
    n,
    dk,
    dv,
    sq_b,
    sq_n,
    sq_d,
    sk_b,
    sk_n,
    sk_d,
    sv_b,
    sv_n,
    sv_d,
    so_k,
    so_b,
    so_n,
    sd_k,
    sd_b,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    REVERSE: tl.constexpr,
    PRECISION: tl.constexpr,
    DEN: tl.constexpr,
):
    """o[i] = sum_{j <= i} (q_i . k_j) v_j (REVERSE: j >= i) for one (feature block, value block, batch-head):
    chunks of C rows; inside a chunk the masked C x C product, across chunks the running state
    S = sum_j k_j v_j^T (BK x BV), accumulated in float32 (float64 for float64 inputs). o (NK, BH, N, DV) holds
    the partial sums over the NK feature blocks (the caller adds them). DEN: also the normaliser
    den_i = sum_{j <= i} q_i . k_j into den (NK, BH, N), from the in-chunk row sums and the running key sum
    z = sum_j k_j (the programs of the first value block store it)."""
    i_k, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_c = tl.arange(0, C)
    offs_k = i_k * BK + tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mk, mv = offs_k < dk, offs_v < dv
    acc = tl.float64 if q.dtype.element_ty == tl.float64 else tl.float32
    state = tl.zeros([BK, BV], dtype=acc)
    z = tl.zeros([BK], dtype=acc)
    if REVERSE:
        causal = offs_c[:, None] <= offs_c[None, :]
    else:
        causal = offs_c[:, None] >= offs_c[None, :]
    n_chunks = tl.cdiv(n, C)
    for t in range(0, n_chunks):
        if REVERSE:
            c = n_chunks - 1 - t
        else:
            c = t
        rows = c * C + offs_c
        mr = rows < n
        qb = tl.load(q + i_bh * sq_b + rows[:, None] * sq_n + offs_k[None, :] * sq_d, mr[:, None] & mk[None, :], 0.0)
        kb = tl.load(k + i_bh * sk_b + rows[:, None] * sk_n + offs_k[None, :] * sk_d, mr[:, None] & mk[None, :], 0.0)
        vb = tl.load(v + i_bh * sv_b + rows[:, None] * sv_n + offs_v[None, :] * sv_d, mr[:, None] & mv[None, :], 0.0)
        qb, kb, vb = qb.to(acc), kb.to(acc), vb.to(acc)
        s = tl.dot(qb, tl.trans(kb), input_precision=PRECISION)  # (C, C): q_i . k_j inside the chunk
        s = tl.where(causal, s, 0.0)
        ob = tl.dot(s, vb, input_precision=PRECISION) + tl.dot(qb, state, input_precision=PRECISION)
        tl.store(o + i_k * so_k + i_bh * so_b + rows[:, None] * so_n + offs_v[None, :], ob, mr[:, None] & mv[None, :])
        state += tl.dot(tl.trans(kb), vb, input_precision=PRECISION)
        if DEN:
            db = tl.sum(s, axis=1) + tl.sum(qb * z[None, :], axis=1)
            tl.store(den + i_k * sd_k + i_bh * sd_b + rows, db, mr & (offs_c * 0 + i_v == 0))
            z += tl.sum(kb, axis=0)


def decode_step_kernel(
    q,
    k,
    v,
    ws,
    kvs,
    c,
    y,
    dh,
    m,
    dv,
    half_scale,
    tiny,
    BD: tl.constexpr,
    BM: tl.constexpr,
    BV: tl.constexpr,
):
    """One decoded token of one batch-head, favor_state._token_step fused: the query's softmax features and the
    key's log-features from the projection ws (Dh, m), the running maximum c, the decay of [S, z] (m, Dv + 1) and
    its update in place, and y = S^T phi(q) / max(z . phi(q), tiny). Every tensor is contiguous; kvs and c in the
    accumulation dtype."""
    bh = tl.program_id(0)
    acc = kvs.dtype.element_ty
    offs_m = tl.arange(0, BM)
    mm = offs_m < m
    qp = tl.zeros([BM], dtype=acc)
    kp = tl.zeros([BM], dtype=acc)
    ksq = tl.zeros([BD], dtype=acc)
    for d0 in range(0, dh, BD):
        offs_d = d0 + tl.arange(0, BD)
        md = offs_d < dh
        w = tl.load(ws + offs_d[:, None] * m + offs_m[None, :], md[:, None] & mm[None, :], 0.0).to(acc)
        qd = tl.load(q + bh * dh + offs_d, md, 0.0).to(acc)
        kd = tl.load(k + bh * dh + offs_d, md, 0.0).to(acc)
        qp += tl.sum(qd[:, None] * w, axis=0)
        kp += tl.sum(kd[:, None] * w, axis=0)
        ksq += kd * kd
    # phi(q) up to a per-query constant: the softmax over features (cancels in the quotient)
    qp = tl.where(mm, qp, float("-inf"))
    qf = tl.exp(qp - tl.max(qp, axis=0))
    qf = qf / tl.sum(qf, axis=0)
    logf = tl.where(mm, kp - half_scale * tl.sum(ksq, axis=0), float("-inf"))  # log phi(k^) + log sqrt(m)
    c_old = tl.load(c + bh)
    c_new = tl.maximum(c_old, tl.max(logf, axis=0))
    decay = tl.exp(c_old - c_new)  # 0 at the first token (c_old = -inf)
    f = tl.exp(logf - c_new)
    tl.store(c + bh, c_new)
    row = kvs + bh * m * (dv + 1) + offs_m * (dv + 1)
    z = tl.load(row + dv, mm, 0.0) * decay + f
    tl.store(row + dv, z, mm)
    den = tl.maximum(tl.sum(qf * z, axis=0), tiny)
    for v0 in range(0, dv, BV):
        offs_v = v0 + tl.arange(0, BV)
        mv = offs_v < dv
        vb = tl.load(v + bh * dv + offs_v, mv, 0.0).to(acc)
        mask = mm[:, None] & mv[None, :]
        s = tl.load(row[:, None] + offs_v[None, :], mask, 0.0) * decay + f[:, None] * vb[None, :]
        tl.store(row[:, None] + offs_v[None, :], s, mask)
        out = tl.sum(qf[:, None] * s, axis=0) / den
        tl.store(y + bh * dv + offs_v, out.to(y.dtype.element_ty), mv)
