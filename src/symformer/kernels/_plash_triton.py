"""Triton kernel bodies of the PLASH kernels (kernels/plash.py launches them; plash-attention.txt, Alg. 1).

Plain functions here, decorated by `build()` when a kernel first runs: Triton reads TRITON_INTERPRET when it
decorates, so the decoration happens after the caller chose the interpreter or the GPU, and importing symformer never
imports Triton. Every kernel computes in float32 (float64 for float64 inputs) whatever the stored dtype, with the
dot products in `PREC` ("ieee": torch's float32 matmul; "tf32" where torch allows TF32), and assumes the last axis
of every tensor contiguous (the launchers make it so).

- `stage1_fwd` / `stage1_bwd`: per block of `BLOCK` keys, A^T K and A^T V with A = softmax(K P^T / tau) (eqs. 3-5),
  a padded key's routing row zeroed; one program per (row, block), the keys streamed in tiles of BN.
- `readout_fwd` / `readout_bwd`: per block of BC queries, one softmax over the block's M summary keys (K_g, V_g of
  its prefix, eq. 12) and, when `IN_BLOCK`, its own keys up to each query (the causal block form of
  PlashAttention._causal_blocks); the backward recomputes the weights from the saved log-sum-exp.
- `decode_step`: one token per row: its [k | v] into the block slot, the readout over [block; K_g], its routing
  column into the running sums (plash_state._token).
"""

from __future__ import annotations

import functools

tl = None  # triton.language, bound by build(): the bodies below read it as a global when Triton compiles them


def stage1_fwd(K, V, P, KEEP, PK, PV, N, BLOCK, inv_tau, skn, skt, svn, svt, spn, spb, sqn, sqb,
               M: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr,
               BDV: tl.constexpr, BN: tl.constexpr, HAS_KEEP: tl.constexpr, F64: tl.constexpr,
               PREC: tl.constexpr):  # fmt: skip
    row, blk = tl.program_id(0), tl.program_id(1)
    cdt = tl.float64 if F64 else tl.float32
    om, od, odv, on = tl.arange(0, BM), tl.arange(0, BD), tl.arange(0, BDV), tl.arange(0, BN)
    p = tl.load(P + om[:, None] * D + od[None, :], mask=(om[:, None] < M) & (od[None, :] < D), other=0.0).to(cdt)
    acc_k = tl.zeros((BM, BD), dtype=cdt)
    acc_v = tl.zeros((BM, BDV), dtype=cdt)
    start = blk * BLOCK
    for t in range(0, BLOCK, BN):
        tok = start + t + on
        valid = (t + on < BLOCK) & (tok < N)
        k = tl.load(K + row * skn + tok[:, None] * skt + od[None, :], mask=valid[:, None] & (od[None, :] < D),
                    other=0.0).to(cdt)  # fmt: skip
        v = tl.load(V + row * svn + tok[:, None] * svt + odv[None, :], mask=valid[:, None] & (odv[None, :] < DV),
                    other=0.0).to(cdt)  # fmt: skip
        s = tl.dot(k, tl.trans(p), input_precision=PREC) * inv_tau  # (BN, BM) prototype logits, eq. 3
        s = tl.where(om[None, :] < M, s, float("-inf"))
        e = tl.exp(s - tl.max(s, 1)[:, None])
        a = e / tl.sum(e, 1)[:, None]  # softmax over the M prototypes
        a = tl.where(valid[:, None], a, 0.0)
        if HAS_KEEP:
            kp = tl.load(KEEP + row * N + tok, mask=valid, other=0)
            a = tl.where(kp[:, None] != 0, a, 0.0)
        at = tl.trans(a)
        acc_k += tl.dot(at, k, input_precision=PREC)  # A^T K (eqs. 3-5)
        acc_v += tl.dot(at, v, input_precision=PREC)  # A^T V
    out = row * spn + blk * spb + om[:, None] * D + od[None, :]
    tl.store(PK + out, acc_k.to(PK.dtype.element_ty), mask=(om[:, None] < M) & (od[None, :] < D))
    out_v = row * sqn + blk * sqb + om[:, None] * DV + odv[None, :]
    tl.store(PV + out_v, acc_v.to(PV.dtype.element_ty), mask=(om[:, None] < M) & (odv[None, :] < DV))


def stage1_bwd(K, V, P, KEEP, DPK, DPV, DK, DV_, DP, N, BLOCK, inv_tau, skn, skt, svn, svt, spn, spb, sqn, sqb,
               M: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr,
               BDV: tl.constexpr, BN: tl.constexpr, HAS_KEEP: tl.constexpr, F64: tl.constexpr,
               PREC: tl.constexpr):  # fmt: skip
    """dK, dV (n, N, d) and this block's share of dP (n, nb, M, d) from dPK, dPV (n, nb, M, d); K, V (n, N, d)
    laid out as the forward's, dK / dV contiguous."""
    row, blk = tl.program_id(0), tl.program_id(1)
    nb = tl.num_programs(1)
    cdt = tl.float64 if F64 else tl.float32
    om, od, odv, on = tl.arange(0, BM), tl.arange(0, BD), tl.arange(0, BDV), tl.arange(0, BN)
    mk, mv = (om[:, None] < M) & (od[None, :] < D), (om[:, None] < M) & (odv[None, :] < DV)
    p = tl.load(P + om[:, None] * D + od[None, :], mask=mk, other=0.0).to(cdt)
    gk = tl.load(DPK + row * spn + blk * spb + om[:, None] * D + od[None, :], mask=mk, other=0.0).to(cdt)
    gv = tl.load(DPV + row * sqn + blk * sqb + om[:, None] * DV + odv[None, :], mask=mv, other=0.0).to(cdt)
    acc_p = tl.zeros((BM, BD), dtype=cdt)
    start = blk * BLOCK
    for t in range(0, BLOCK, BN):
        tok = start + t + on
        valid = (t + on < BLOCK) & (tok < N)
        mkt, mvt = valid[:, None] & (od[None, :] < D), valid[:, None] & (odv[None, :] < DV)
        k = tl.load(K + row * skn + tok[:, None] * skt + od[None, :], mask=mkt, other=0.0).to(cdt)
        v = tl.load(V + row * svn + tok[:, None] * svt + odv[None, :], mask=mvt, other=0.0).to(cdt)
        s = tl.dot(k, tl.trans(p), input_precision=PREC) * inv_tau
        s = tl.where(om[None, :] < M, s, float("-inf"))
        e = tl.exp(s - tl.max(s, 1)[:, None])
        a = e / tl.sum(e, 1)[:, None]
        live = valid
        if HAS_KEEP:
            kp = tl.load(KEEP + row * N + tok, mask=valid, other=0)
            live = live & (kp != 0)
        a = tl.where(live[:, None], a, 0.0)  # the routing rows that entered the sums
        da = tl.dot(k, tl.trans(gk), input_precision=PREC) + tl.dot(v, tl.trans(gv), input_precision=PREC)
        ds = a * (da - tl.sum(a * da, 1)[:, None]) * inv_tau  # softmax backward, through 1 / tau
        dk = tl.dot(a, gk, input_precision=PREC) + tl.dot(ds, p, input_precision=PREC)
        dv = tl.dot(a, gv, input_precision=PREC)
        tl.store(DK + row * N * D + tok[:, None] * D + od[None, :], dk.to(DK.dtype.element_ty), mask=mkt)
        tl.store(DV_ + row * N * DV + tok[:, None] * DV + odv[None, :], dv.to(DV_.dtype.element_ty), mask=mvt)
        acc_p += tl.dot(tl.trans(ds), k, input_precision=PREC)
    tl.store(DP + (row * nb + blk) * M * D + om[:, None] * D + od[None, :], acc_p.to(DP.dtype.element_ty), mask=mk)


def readout_fwd(Q, K, V, KG, VG, KEEP, HAS_SUM, O, LSE, N, scale, sqn, sqt, sgn, sgb,
                M: tl.constexpr, D: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BM: tl.constexpr,
                BD: tl.constexpr,
                IN_BLOCK: tl.constexpr, HAS_KEEP: tl.constexpr, F64: tl.constexpr,
                PREC: tl.constexpr):  # fmt: skip
    """O (n, N, d) and the log-sum-exp LSE (n, N) of block `blk` (C queries, padded to BC): one softmax over the
    summary keys KG[row, blk] (M rows, read where HAS_SUM[row, blk]) and, with IN_BLOCK, the block's own keys up to
    each query (kept ones). A query that sees no key gets 0 and LSE -inf. Q, K, V share strides; KG, VG too."""
    row, blk = tl.program_id(0), tl.program_id(1)
    nbk = tl.num_programs(1)
    cdt = tl.float64 if F64 else tl.float32
    oc, om, od = tl.arange(0, BC), tl.arange(0, BM), tl.arange(0, BD)
    tok = blk * C + oc
    valid = (oc < C) & (tok < N)
    mq = valid[:, None] & (od[None, :] < D)
    q = tl.load(Q + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
    mg = (om[:, None] < M) & (od[None, :] < D)
    kg = tl.load(KG + row * sgn + blk * sgb + om[:, None] * D + od[None, :], mask=mg, other=0.0).to(cdt)
    vg = tl.load(VG + row * sgn + blk * sgb + om[:, None] * D + od[None, :], mask=mg, other=0.0).to(cdt)
    has = tl.load(HAS_SUM + row * nbk + blk) != 0
    ls = tl.dot(q, tl.trans(kg), input_precision=PREC) * scale  # (BC, BM) summary logits
    ls = tl.where((om[None, :] < M) & has, ls, float("-inf"))
    mx = tl.max(ls, 1)
    if IN_BLOCK:
        k = tl.load(K + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
        v = tl.load(V + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
        see = (oc[None, :] <= oc[:, None]) & valid[None, :]
        if HAS_KEEP:
            kp = tl.load(KEEP + row * N + tok, mask=valid, other=0)
            see = see & (kp[None, :] != 0)
        li = tl.where(see, tl.dot(q, tl.trans(k), input_precision=PREC) * scale, float("-inf"))  # (BC, BC)
        mx = tl.maximum(mx, tl.max(li, 1))
    safe = tl.where(mx == float("-inf"), 0.0, mx)
    ps = tl.exp(ls - safe[:, None])
    den = tl.sum(ps, 1)
    acc = tl.dot(ps, vg, input_precision=PREC)
    if IN_BLOCK:
        pi = tl.exp(li - safe[:, None])
        den += tl.sum(pi, 1)
        acc += tl.dot(pi, v, input_precision=PREC)
    out = tl.where(den[:, None] > 0, acc / tl.where(den > 0, den, 1.0)[:, None], 0.0)
    tl.store(O + row * N * D + tok[:, None] * D + od[None, :], out.to(O.dtype.element_ty), mask=mq)
    lse = tl.where(den > 0, safe + tl.log(tl.where(den > 0, den, 1.0)), float("-inf"))
    tl.store(LSE + row * N + tok, lse, mask=valid)


def readout_bwd(Q, K, V, KG, VG, KEEP, HAS_SUM, O, LSE, DO, DQ, DK, DV, DKG, DVG, N, scale, sqn, sqt, sgn, sgb,
                M: tl.constexpr, D: tl.constexpr, C: tl.constexpr, BC: tl.constexpr, BM: tl.constexpr,
                BD: tl.constexpr,
                IN_BLOCK: tl.constexpr, HAS_KEEP: tl.constexpr, F64: tl.constexpr,
                PREC: tl.constexpr):  # fmt: skip
    """Gradients of readout_fwd: dQ, dK, dV (n, N, d) and dKG, dVG (n, nb, M, d) for this block's summaries. O,
    DO, DQ, DK, DV contiguous (n, N, d); DKG, DVG contiguous (n, nb, M, d)."""
    row, blk = tl.program_id(0), tl.program_id(1)
    nbk = tl.num_programs(1)
    cdt = tl.float64 if F64 else tl.float32
    oc, om, od = tl.arange(0, BC), tl.arange(0, BM), tl.arange(0, BD)
    tok = blk * C + oc
    valid = (oc < C) & (tok < N)
    mq = valid[:, None] & (od[None, :] < D)
    q = tl.load(Q + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
    dense = row * N * D + tok[:, None] * D + od[None, :]
    o = tl.load(O + dense, mask=mq, other=0.0).to(cdt)
    do = tl.load(DO + dense, mask=mq, other=0.0).to(cdt)
    lse = tl.load(LSE + row * N + tok, mask=valid, other=float("-inf")).to(cdt)
    lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a query that saw no key: every weight exp(-inf) = 0
    delta = tl.sum(do * o, 1)  # rowsum(dO * O): the softmax backward's shift
    mg = (om[:, None] < M) & (od[None, :] < D)
    goff = row * sgn + blk * sgb + om[:, None] * D + od[None, :]
    kg = tl.load(KG + goff, mask=mg, other=0.0).to(cdt)
    vg = tl.load(VG + goff, mask=mg, other=0.0).to(cdt)
    has = tl.load(HAS_SUM + row * nbk + blk) != 0
    ls = tl.where((om[None, :] < M) & has, tl.dot(q, tl.trans(kg), input_precision=PREC) * scale, float("-inf"))
    ps = tl.exp(ls - lse[:, None])
    dps = tl.dot(do, tl.trans(vg), input_precision=PREC)
    dss = ps * (dps - delta[:, None]) * scale
    dq = tl.dot(dss, kg, input_precision=PREC)
    doff = (row * nbk + blk) * M * D + om[:, None] * D + od[None, :]
    tl.store(DKG + doff, tl.dot(tl.trans(dss), q, input_precision=PREC).to(DKG.dtype.element_ty), mask=mg)
    tl.store(DVG + doff, tl.dot(tl.trans(ps), do, input_precision=PREC).to(DVG.dtype.element_ty), mask=mg)
    if IN_BLOCK:
        k = tl.load(K + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
        v = tl.load(V + row * sqn + tok[:, None] * sqt + od[None, :], mask=mq, other=0.0).to(cdt)
        see = (oc[None, :] <= oc[:, None]) & valid[None, :]
        if HAS_KEEP:
            kp = tl.load(KEEP + row * N + tok, mask=valid, other=0)
            see = see & (kp[None, :] != 0)
        li = tl.where(see, tl.dot(q, tl.trans(k), input_precision=PREC) * scale, float("-inf"))
        pi = tl.exp(li - lse[:, None])
        dpi = tl.dot(do, tl.trans(v), input_precision=PREC)
        dsi = pi * (dpi - delta[:, None]) * scale
        dq += tl.dot(dsi, k, input_precision=PREC)
        tl.store(DK + dense, tl.dot(tl.trans(dsi), q, input_precision=PREC).to(DK.dtype.element_ty), mask=mq)
        tl.store(DV + dense, tl.dot(tl.trans(pi), do, input_precision=PREC).to(DV.dtype.element_ty), mask=mq)
    tl.store(DQ + dense, dq.to(DQ.dtype.element_ty), mask=mq)


def decode_step(Q, K, V, KEEP, POS, KV, BIAS, PKV, COUNT, P, O, inv_tau, scale, spos,
                C: tl.constexpr, M: tl.constexpr, D: tl.constexpr, BR: tl.constexpr, BM: tl.constexpr,
                BD: tl.constexpr, HAS_KEEP: tl.constexpr, F64: tl.constexpr):  # fmt: skip
    """One token per row (program): KV (n, C + M, 2 D), BIAS (n, C + M), PKV (n, M, 2 D), COUNT (n, 1) updated in
    place; O (n, D) the readout. POS: the token's slot in the block, per row (spos = 1) or shared (spos = 0)."""
    row = tl.program_id(0)
    cdt = tl.float64 if F64 else tl.float32
    orow, om, od = tl.arange(0, BR), tl.arange(0, BM), tl.arange(0, BD)
    md = od < D
    q = tl.load(Q + row * D + od, mask=md, other=0.0).to(cdt)
    k = tl.load(K + row * D + od, mask=md, other=0.0).to(cdt)
    v = tl.load(V + row * D + od, mask=md, other=0.0).to(cdt)
    pos = tl.load(POS + row * spos)
    kept = pos >= 0  # every token kept, unless the mask says otherwise
    if HAS_KEEP:
        kept = tl.load(KEEP + row) != 0
    base = KV + row * (C + M) * 2 * D
    rows = orow < C + M
    mrd = rows[:, None] & md[None, :]
    kk = tl.load(base + orow[:, None] * 2 * D + od[None, :], mask=mrd, other=0.0).to(cdt)
    vv = tl.load(base + orow[:, None] * 2 * D + D + od[None, :], mask=mrd, other=0.0).to(cdt)
    bias = tl.load(BIAS + row * (C + M) + orow, mask=rows, other=float("-inf")).to(cdt)
    here = orow == pos
    kk = tl.where(here[:, None], k[None, :], kk)  # the new token in its block slot
    vv = tl.where(here[:, None], v[None, :], vv)
    bias = tl.where(here, tl.where(kept, 0.0, float("-inf")), bias)
    tl.store(base + pos * 2 * D + od, k.to(KV.dtype.element_ty), mask=md)
    tl.store(base + pos * 2 * D + D + od, v.to(KV.dtype.element_ty), mask=md)
    tl.store(BIAS + row * (C + M) + pos, tl.where(kept, 0.0, float("-inf")).to(BIAS.dtype.element_ty))
    logit = tl.where(rows, tl.sum(kk * q[None, :], 1) * scale + bias, float("-inf"))  # eq. 12 and the block
    mx = tl.max(logit, 0)
    w = tl.exp(logit - tl.where(mx == float("-inf"), 0.0, mx))
    den = tl.sum(w, 0)
    out = tl.sum(w[:, None] * vv, 0) / tl.where(den > 0, den, 1.0)  # no kept key yet: 0
    tl.store(O + row * D + od, out.to(O.dtype.element_ty), mask=md)
    mm = om < M
    p = tl.load(P + om[:, None] * D + od[None, :], mask=mm[:, None] & md[None, :], other=0.0).to(cdt)
    s = tl.where(mm, tl.sum(p * k[None, :], 1) * inv_tau, float("-inf"))  # the routing column, eq. 3
    e = tl.exp(s - tl.max(s, 0))
    a = tl.where(kept, e / tl.sum(e, 0), 0.0)
    sums = PKV + row * M * 2 * D + om[:, None] * 2 * D + od[None, :]
    msum = mm[:, None] & md[None, :]
    tl.store(sums, (tl.load(sums, mask=msum, other=0.0).to(cdt) + a[:, None] * k[None, :]).to(PKV.dtype.element_ty),
             mask=msum)  # fmt: skip
    tl.store(sums + D, (tl.load(sums + D, mask=msum, other=0.0).to(cdt) + a[:, None] * v[None, :]).to(
        PKV.dtype.element_ty), mask=msum)  # fmt: skip
    tl.store(COUNT + row, tl.load(COUNT + row) + tl.where(kept, 1, 0))


_BODIES = (stage1_fwd, stage1_bwd, readout_fwd, readout_bwd, decode_step)


@functools.lru_cache(maxsize=2)
def build(interpret: bool) -> dict:
    """The kernels, decorated by triton.jit in the mode `interpret` names (TRITON_INTERPRET as set now)."""
    global tl
    import triton  # optional dependency (the `triton` extra): imported only when a kernel first runs
    import triton.language

    tl = triton.language
    return {fn.__name__: triton.jit(fn) for fn in _BODIES}
