"""Decodability rho(V) and the margin-optimal output directions U* (eqs. 3-4, Def. 3.2.1).

Per anchor i, with unit rows x_ij = (v_i - v_j)/|v_i - v_j| (j != i):
    rho_i = max_{|u| = 1} min_j <x_ij, u>,   rho = min_i rho_i.
When rho_i > 0 this is the hard-margin SVM through the origin  min |w| s.t. X_i w >= 1, with
u_i* = w/|w| and rho_i = 1/|w| (our reformulation; the paper solves eq. (4) by ADMM, App. A.1.3); equivalently
rho_i is the distance from 0 to conv{x_ij}. It is infeasible exactly when v_i is not a vertex of conv(V); such a
value can never be decoded.

Solver (all anchors of a chunk at once), a cutting-plane method on a working set of K constraints:
  1. on the working set, Newton on the squared-hinge penalty |w|^2/2 + C/2 sum_j max(0, 1 - <x_ij, w>)^2
     with continuation in C, then an exact active-set polish (X_S X_S^T alpha = 1, alpha >= 0); both run in
     K-space on the working set's Gram matrix, formed once per round (`_Working`);
  2. one pass over all F constraints; anchors with a violated one get a new working set that KEEPS the
     support of step 1 and fills up with the tightest constraints. Keeping the support makes the working-set
     optimum strictly increase round to round, so the method cannot cycle (a working set of the K tightest
     constraints alone drops the support and can cycle, ending with a rho_i of the wrong sign).
Every returned rho_i is certified by a primal-dual pair: lower = min_j <x_ij, u_i> of the returned unit
direction (a feasible point of eq. 3) and upper = |X^T a| / 1^T a for the multipliers a >= 0 (a point of
conv{x_ij}, so an upper bound on the distance). `gap` = upper - lower; a vertex is reported only when
lower > 0 and the gap is below `GAP_TOL`, a non-vertex only when upper <= `NV_TOL` (0 is in the hull up to
rounding). Anything else raises `DecodabilityNotConverged` naming the anchors.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from symformer._validation import check_int, check_tensor, fail

GAP_TOL = 1e-8  # certified |upper - lower| on rho_i (rho_i in [-1, 1]): far below the 1e-6 of issue #11
NV_TOL = 1e-9  # a non-vertex: the distance from 0 to conv{x_ij} is at most this
STAGES = (1e2, 1e4)  # penalty continuation; the polish makes the working-set solution exact
INFEASIBLE_STAGES = (1e6, 1e8, 1e10)  # where the polish fails: drive |X^T a| / 1^T a -> 0 (a non-vertex)


class DecodabilityNotConverged(RuntimeError):
    """The solver could not certify rho_i (nor a non-vertex) for the named anchors."""

    def __init__(self, anchors: list[int], gaps: list[float]):
        self.anchors = anchors
        shown = ", ".join(f"{a} (gap {g:.2e})" for a, g in zip(anchors[:20], gaps[:20]))
        super().__init__(
            f"decodability: rho_i not certified for anchor(s) {shown}"
            f"{'...' if len(anchors) > 20 else ''}; expected a duality gap <= {GAP_TOL:g}"
        )


@dataclass
class Decodability:
    """rho(V) and U* of a set of values, every rho_i certified (module docstring); `decodability` computes it.

    Attributes:
        rho (float): min_i rho_i (eq. 3); > 0 iff every value is a vertex of conv(V).
        rho_i (n_values,): float64, the certified per-anchor values (0 for non-vertices).
        U (n_values, d): the unit margin-optimal directions u_i* (eq. 4), in the values' dtype.
        not_vertices (list[int]): the values that are not vertices of conv(V) (never decodable).
        iterations (int): cutting-plane rounds of the solver.
        gap (n_values,): float64, the certified duality gap per anchor.
        max_gap (float): its maximum.

    Examples:
        >>> import torch
        >>> from symformer.facts import decodability, sample_embeddings
        >>> values = sample_embeddings(20, 6, seed=0)  # on the sphere: every value a vertex
        >>> info = decodability(values)
        >>> info.rho > 0, info.not_vertices, info.U.shape, info.max_gap <= 1e-8
        (True, [], torch.Size([20, 6]), True)
        >>> x = (values[0] - values[1:]) / (values[0] - values[1:]).norm(dim=1, keepdim=True)  # anchor 0's x_0j
        >>> abs(float((x @ info.U[0]).min()) - float(info.rho_i[0])) < 1e-12  # rho_0 = min_j <x_0j, u_0*>
        True
    """

    rho: float  # min_i rho_i (eq. 3)
    rho_i: torch.Tensor  # (|V|,) certified per-anchor values; 0 for non-vertices
    U: torch.Tensor  # (|V|, d) unit margin-optimal directions u_i* (eq. 4)
    not_vertices: list[int]  # indices i that are not vertices of conv(V) (never decodable)
    iterations: int = 0
    gap: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))  # upper - lower
    max_gap: float = 0.0  # max certified duality gap over the anchors


def _sq_dists(V: torch.Tensor, idx: torch.Tensor, block: int = 1 << 13) -> torch.Tensor:
    """|v_i - v_j|^2 for the anchors idx against all values: by one GEMM on centred values, recomputed
    directly for the pairs whose GEMM form cancels (|v_i - v_j|^2 < 1e-2 (|v_i|^2 + |v_j|^2), centred), so
    every entry keeps ~1e-14 relative accuracy. One GEMM rather than torch.cdist's pairwise loop: the
    distances are the largest single cost of a solve at real widths (d in the hundreds, F in the thousands)."""
    Vc = V - V.mean(0)
    sq = (Vc * Vc).sum(1)
    scale = sq[idx][:, None] + sq[None, :]
    d2 = (scale - 2 * Vc[idx] @ Vc.T).clamp_min(0)
    bi, bj = (d2 < 1e-2 * scale).nonzero(as_tuple=True)
    for s in range(0, len(bi), block):
        i, j = bi[s : s + block], bj[s : s + block]
        d2[i, j] = (V[idx[i]] - V[j]).pow(2).sum(1)
    return d2


class _Chunk:
    """Margins <x_ij, w_i> against all F values for a chunk of anchors without materialising X (B x F x d)."""

    def __init__(self, V: torch.Tensor, idx: torch.Tensor, inv: torch.Tensor | None = None):
        self.V, self.idx = V, idx
        self.A = V[idx]  # (B, d) anchors
        if inv is None:
            d2 = _sq_dists(V, idx)
            d2[torch.arange(len(idx)), idx] = float("inf")  # the anchor itself: no constraint
            inv = 1.0 / d2.sqrt()  # rows are distinct (validated)
        self.inv = inv
        self.self_mask = inv == 0

    def subset(self, rows: torch.Tensor) -> _Chunk:
        return _Chunk(self.V, self.idx[rows], self.inv[rows])

    def margins(self, W: torch.Tensor) -> torch.Tensor:
        m = ((self.A * W).sum(-1, keepdim=True) - W @ self.V.T) * self.inv
        return m.masked_fill(self.self_mask, float("inf"))

    def rows(self, jj: torch.Tensor) -> torch.Tensor:
        """x_ij for the gathered indices jj (B, k) -> (B, k, d)."""
        Vj = torch.index_select(self.V, 0, jj.reshape(-1)).view(*jj.shape, -1)  # (faster than V[jj])
        return torch.sub(self.A[:, None, :], Vj, out=Vj).mul_(self.inv.gather(1, jj)[..., None])


def _bmv(v: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """v_b^T M_b for a batch: (B, n) x (B, n, p) -> (B, p). The row-vector form is cheaper on CPU than the
    column form M^T v (a bmm with one output column), so products with X^T use a contiguous copy."""
    return (v[:, None, :] @ M).squeeze(1)


class _Working:
    """The problem restricted to a working set of K constraints per anchor, solved in K-space.

    Every iterate is w = c w0 + X^T beta (the Newton step below lies in w's span and the rows'), so the
    margins X w = c X w0 + G beta need only products with the Gram matrix G = X X^T, formed ONCE per working
    set: a Newton or polish step then costs O(K^2) per anchor, not O(k^2 d) for a fresh X_A X_A^T (which
    dominates at real widths). Where K > 2d, G v is cheaper as X (X^T v) (2Kd reads instead of K^2)."""

    def __init__(self, X: torch.Tensor, w0: torch.Tensor):
        self.X, self.w0 = X, w0
        self.G = X @ X.transpose(1, 2)
        self.XT = X.transpose(1, 2).contiguous() if X.shape[1] > 2 * X.shape[2] else None
        self.m0 = _bmv(w0, X.transpose(1, 2))
        self.n0 = (w0 * w0).sum(-1)

    def subset(self, rows: torch.Tensor) -> _Working:
        sub = _Working.__new__(_Working)
        sub.X, sub.w0, sub.G, sub.m0, sub.n0 = self.X[rows], self.w0[rows], self.G[rows], self.m0[rows], self.n0[rows]
        sub.XT = None if self.XT is None else self.XT[rows]
        return sub

    def gv(self, v: torch.Tensor) -> torch.Tensor:
        """G v for a batch of K-vectors v (B, K)."""
        if self.XT is not None:
            return _bmv(_bmv(v, self.X), self.XT)
        return _bmv(v, self.G)  # G is symmetric

    def block(self, jj: torch.Tensor) -> torch.Tensor:
        """G[jj, jj] per anchor, (B, k, k), by one gather on the flattened Gram matrix."""
        B, K, k = self.G.shape[0], self.G.shape[1], jj.shape[1]
        flat = (jj[:, :, None] * K + jj[:, None, :]).reshape(B, k * k)
        return self.G.reshape(B, K * K).gather(1, flat).reshape(B, k, k)

    def margins(self, c: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        return c[:, None] * self.m0 + self.gv(beta)

    def w(self, c: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        return c[:, None] * self.w0 + _bmv(beta, self.X)


def _spd_solve(G: torch.Tensor, b: torch.Tensor, check: bool = True) -> torch.Tensor:
    """G x = b for a batch of symmetric PSD matrices: Cholesky, and SVD least squares (gelsd, the minimum-norm
    solution) where it fails (rounding, or a singular G: C >= 1e8 on a rank-deficient G_AA, degenerate
    supports) or, with check, where the residual exceeds 1e-9."""
    L, info = torch.linalg.cholesky_ex(G)
    x = torch.cholesky_solve(b[..., None], L).squeeze(-1)
    redo = info > 0
    if check:
        redo |= ~((_bmv(x, G) - b).abs().amax(1) <= 1e-9 * b.abs().amax(1).clamp_min(1))
    if bool(redo.any()):
        x[redo] = torch.linalg.lstsq(G[redo], b[redo][..., None], driver="gelsd").solution.squeeze(-1)
    return x


def _newton(sub: _Working, c: torch.Tensor, beta: torch.Tensor, C: float, iters: int):
    """Finite Newton on the squared-hinge penalty |w|^2/2 + C/2 sum_j (1 - <x_j, w>)_+^2, in K-space.

    With r = (1 - m)_+ on the active rows A, the step -(I + C X_A^T X_A)^{-1} g is, by Woodbury,
    dw = -w + X^T delta, delta = C r + z, (I/C + G_AA) z = m_A - C (G r)_A. Returns (c, beta, m, steps)."""
    m = sub.margins(c, beta)
    used = 0
    for _ in range(iters):
        used += 1
        r = torch.relu(1 - m)
        # the active rows, packed to k = the largest active count (Cholesky on k x k, not K x K)
        k = max(1, int((r > 0).sum(1).max()))
        rv, jj = r.topk(k, dim=1)
        a = (rv > 0).to(m.dtype)
        M = sub.block(jj) * (a[:, :, None] * a[:, None, :]) + torch.diag_embed(1.0 / C * a + (1 - a))
        rhs = (m - C * sub.gv(r)).gather(1, jj) * a
        z = _spd_solve(M, rhs, check=False) * a
        delta = (C * r).scatter_add_(1, jj, z)
        e = delta - beta  # dw = -c w0 + X^T e
        sm = sub.gv(delta) - m  # X dw
        cn0, em0 = c * c * sub.n0, c * (e * sub.m0).sum(-1)
        ww = cn0 + c * (beta * sub.m0).sum(-1) + (beta * m).sum(-1)
        wd = em0 - cn0 + (beta * sm).sum(-1)
        dd = (cn0 - em0 + (e * sm).sum(-1)).clamp_min(0)
        f0, slope = 0.5 * ww + 0.5 * C * (r * r).sum(-1), wd - C * (r * sm).sum(-1)
        t = _armijo(m, sm, ww, wd, dd, f0, slope, C)
        c = c * (1 - t)
        beta = beta * (1 - t[:, None]) + t[:, None] * delta
        m_new = m + t[:, None] * sm
        # a full step that leaves the active set unchanged lands on the exact minimiser (finite Newton)
        done = ((t == 1) & ((m_new < 1) == (m < 1)).all(1)) | (t * dd.sqrt() < 1e-13 * ww.sqrt())
        m = m_new
        if bool(done.all()):
            break
    return c, beta, m, used


def _armijo(m, sm, ww, wd, dd, f0, slope, C: float) -> torch.Tensor:
    """Backtracking step per anchor (margins are linear in t: no matrix products)."""
    t = torch.ones_like(ww)
    todo = torch.ones_like(ww, dtype=torch.bool)
    for _ in range(50):
        ft = 0.5 * (ww + 2 * t * wd + t * t * dd) + 0.5 * C * torch.relu(1 - m - t[:, None] * sm).pow(2).sum(-1)
        todo = todo & ~(ft <= f0 + 1e-4 * t * slope)
        if not bool(todo.any()):
            break
        t = torch.where(todo, t * 0.5, t)
    return t


def _polish(sub: _Working, m: torch.Tensor, rounds: int = 24, tol: float = 1e-10):
    """Exact hard-margin solution on the support by a primal active-set method, in K-space:
    G_SS alpha = 1 on the support S, alpha >= 0, G alpha >= 1 (the KKT conditions of the working set).

    Returns (alpha, ok): alpha (B, K) the multipliers (w = X^T alpha), ok where KKT holds."""
    B, K = m.shape
    support = m < 1 + 1e-7
    ok = torch.zeros(B, dtype=torch.bool)
    best_alpha = torch.zeros(B, K, dtype=m.dtype)
    rows = torch.arange(B)
    for _ in range(rounds):
        k = max(1, int(support.sum(1).max()))
        sv, jj = support.to(m.dtype).topk(k, dim=1)
        mask = sv > 0
        Gs = sub.block(jj) * (mask[:, :, None] & mask[:, None, :]) + torch.diag_embed((~mask).to(m.dtype))
        alpha = _spd_solve(Gs, mask.to(m.dtype)) * mask
        neg = (alpha < -1e-9 * alpha.abs().amax(1, keepdim=True)) & mask
        mn = sub.gv(torch.zeros_like(m).scatter_(1, jj, alpha))
        viol = mn.min(1).values < 1 - tol
        good = ~neg.any(1) & ~viol & (alpha.sum(1) > 0) & ~ok
        best_alpha[good] = torch.zeros(int(good.sum()), K, dtype=m.dtype).scatter(1, jj[good], alpha[good].clamp_min(0))
        ok |= good
        if bool(ok.all()):
            break
        # drop the most negative multiplier, else add the most violated constraint
        drop_at = torch.where(neg, alpha, torch.zeros_like(alpha)).argmin(1)
        has_neg = neg.any(1)
        support[rows[has_neg], jj[rows[has_neg], drop_at[has_neg]]] = False
        add = ~has_neg & viol
        support[rows[add], mn[add].argmin(1)] = True
    return best_alpha, ok


def _dual_upper(X: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """|X^T a| / 1^T a for a >= 0: a point of conv{x_ij}, hence an upper bound on rho_i (or 0 for none)."""
    s = alpha.sum(1)
    p = _bmv(alpha, X)
    return torch.where(s > 0, p.norm(dim=1) / s.clamp_min(1e-300), torch.full_like(s, float("inf")))


def _subsolve(sub: _Working, iters: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Solve on the working set from w0; returns (w, alpha >= 0, Newton iterations)."""
    B, K = sub.m0.shape
    c, beta, its = torch.ones(B, dtype=sub.G.dtype), torch.zeros(B, K, dtype=sub.G.dtype), 0
    for C in STAGES:
        c, beta, m, used = _newton(sub, c, beta, C, iters)
        its += used
    alpha, ok = _polish(sub, m)
    w = sub.w(torch.zeros_like(c), alpha)
    if bool((~ok).any()):
        # polish failed: likely infeasible (a non-vertex); the penalty multipliers C (1 - m)_+ certify it
        bad = (~ok).nonzero().flatten()
        sb, cb, bb = sub.subset(bad), c[bad], beta[bad]
        for C in INFEASIBLE_STAGES:
            cb, bb, mb, used = _newton(sb, cb, bb, C, iters)
            its += used
        w[bad] = sb.w(cb, bb)
        a_pen = INFEASIBLE_STAGES[-1] * torch.relu(1 - mb)
        a_ex = _nonvertex_polish(sb.X, a_pen)
        better = _dual_upper(sb.X, a_ex) < _dual_upper(sb.X, a_pen)
        alpha[bad] = torch.where(better[:, None], a_ex, a_pen)
    return w, alpha, its


def _nonvertex_polish(X: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """On the support of the penalty multipliers, the exact a with X^T a = 0, 1^T a = 1 (least squares);
    it certifies a non-vertex to rounding where it is >= 0 (else the caller keeps the penalty multipliers)."""
    mask = (alpha > 0).to(X.dtype)
    s = X.abs().amax((1, 2)).clamp_min(1.0)
    M = torch.cat([X.transpose(1, 2) * mask[:, None, :], (s[:, None] * mask)[:, None, :]], 1)
    rhs = torch.zeros(M.shape[0], M.shape[1], 1, dtype=X.dtype)
    rhs[:, -1, 0] = s
    a = torch.linalg.lstsq(M, rhs, driver="gelsd").solution.squeeze(-1) * mask
    return a.clamp_min(0)


def _initial(ch: _Chunk, V: torch.Tensor) -> torch.Tensor:
    """Warm start: the direction away from the centroid, scaled to margin 1 where it already separates."""
    u0 = ch.A - V.mean(0)
    small = u0.norm(dim=1, keepdim=True) <= 1e-12 * ch.A.norm(dim=1, keepdim=True).clamp_min(1e-300)
    u0 = torch.where(small, ch.A, u0)
    m0 = ch.margins(u0).min(1).values
    return torch.where(m0[:, None] > 0, u0 / m0.clamp_min(1e-300)[:, None], u0 / u0.norm(dim=1, keepdim=True))


def _next_working_set(m: torch.Tensor, S: torch.Tensor, alpha: torch.Tensor, K: int) -> tuple[torch.Tensor, int]:
    """Keep the support (alpha > 0) of the last working set, fill up with the tightest of all constraints."""
    n_supp = int((alpha > 0).sum(1).max())
    if n_supp > K - K // 4:  # the support crowds the working set: give the new cuts room
        K = min(m.shape[1] - 1, n_supp + K // 2)  # (not 2K: the Gram matrix costs K^2 d per anchor)
    key = m.clone()
    key.scatter_(1, S, torch.where(alpha > 0, float("-inf"), m.gather(1, S)))
    return key.topk(K, dim=1, largest=False).indices, K


def _solve_chunk(V: torch.Tensor, idx: torch.Tensor, newton_iters: int, K: int, rounds: int = 40):
    """Cutting-plane rounds on the anchors idx; returns (chunk, w, upper bound on rho_i, Newton iterations)."""
    ch = _Chunk(V, idx)
    w = _initial(ch, V)
    S = ch.margins(w).topk(K, dim=1, largest=False).indices
    upper = torch.full((len(idx),), float("inf"), dtype=V.dtype)
    act, its = torch.arange(len(idx)), 0
    for _ in range(rounds):
        sub_ch = ch.subset(act)
        X = sub_ch.rows(S)
        w_act, alpha, k = _subsolve(_Working(X, w[act]), newton_iters)
        its += k
        w[act] = w_act
        upper[act] = torch.minimum(upper[act], _dual_upper(X, alpha))
        m = sub_ch.margins(w_act)
        # done: feasible for all F constraints, or a subset of them is already infeasible (a non-vertex)
        done = (m.min(1).values >= 1 - 1e-10) | (upper[act] <= NV_TOL)
        if bool(done.all()):
            break
        keep = ~done
        S, K = _next_working_set(m[keep], S[keep], alpha[keep], K)
        act = act[keep]
    return ch, w, upper, its


def _certify(ch: _Chunk, w: torch.Tensor, upper: torch.Tensor):
    """(rho_i, U, gap, vertex, certified) per anchor from the primal-dual pair (module docstring)."""
    u = w / w.norm(dim=1, keepdim=True).clamp_min(1e-300)
    lower = ch.margins(u).min(1).values
    vertex = lower > 0
    gap = torch.where(vertex, upper - lower, upper)
    certified = torch.where(vertex, gap <= GAP_TOL, upper <= NV_TOL)
    return torch.where(vertex, lower, torch.zeros_like(lower)), u, gap, vertex, certified


def _check_values(values: torch.Tensor) -> torch.Tensor:
    """Boundary checks: finite, nonzero and pairwise distinct rows (a repeated row makes some v_i - v_j zero,
    so x_ij is undefined), at least 2 of them."""
    check_tensor("values", values, 2, finite=False)
    n = values.shape[0]
    if n < 2:
        fail("values", f"{n} value(s)", "at least 2 values")
    V = values.detach().double()
    bad = (~torch.isfinite(V).all(1)).nonzero().flatten().tolist()
    if bad:
        fail("values", f"NaN or inf in row(s) {bad[:20]}", "finite values")
    zero = (V.abs().amax(1) == 0).nonzero().flatten().tolist()
    if zero:
        fail("values", f"all-zero row(s) {zero[:20]}", "nonzero value embeddings")
    _, inv, counts = torch.unique(V, dim=0, return_inverse=True, return_counts=True)
    if bool((counts > 1).any()):
        groups = sorted((inv == g).nonzero().flatten().tolist() for g in (counts > 1).nonzero().flatten().tolist())[:10]
        fail("values", f"duplicated rows {groups}", "distinct values (a repeated value is never a vertex)")
    return V


def _wolfe_min_norm_point(X: torch.Tensor, iters: int = 2000) -> tuple[torch.Tensor, torch.Tensor]:
    """Wolfe's (1976) min-norm point of conv{rows of X}, exact and finite: the fallback for the anchors the
    batched solver could not certify (non-vertices near rounding, nearly collinear values).
    Returns (p, lam) with p = X^T lam, lam >= 0 on the simplex; dist(0, conv) = |p|."""
    S = [int((X @ X.mean(0)).argmin())]
    lam = torch.ones(1, dtype=X.dtype)
    p = X[S[0]].clone()
    for _ in range(iters):
        m = X @ p
        j = int(m.argmin())
        pp = float(p @ p)
        if pp <= NV_TOL**2 or pp - float(m[j]) <= 1e-3 * GAP_TOL * pp**0.5 or j in S:
            break
        S.append(j)
        lam = torch.cat([lam, lam.new_zeros(1)])
        for _ in range(len(S) + 1):  # minor cycles: at most one drop each
            # affine minimiser of span S: p = y_k + D mu', D = [y_i - y_k] (least squares on D, not on the
            # normal equations, whose squared condition number loses the tiny |p| of nearly degenerate sets)
            Y = X[S]
            D = (Y[:-1] - Y[-1]).T
            mu = torch.linalg.lstsq(D, -Y[-1][:, None], driver="gelsd").solution[:, 0] if len(S) > 1 else Y.new_zeros(0)
            mu = torch.cat([mu, (1 - mu.sum())[None]])
            if bool((mu > 1e-14).all()):
                lam = mu
                break
            neg = (mu <= 1e-14) & (lam - mu > 0)
            theta = float((lam[neg] / (lam[neg] - mu[neg])).min()) if bool(neg.any()) else 1.0
            lam = theta * mu + (1 - theta) * lam
            keep = lam > 1e-14
            S = [s for s, k_ in zip(S, keep.tolist()) if k_]
            lam = lam[keep] / lam[keep].sum()
        p = X[S].T @ lam
    full = torch.zeros(X.shape[0], dtype=X.dtype)
    full[S] = lam
    return p, full


def _fallback(V: torch.Tensor, i: int) -> tuple[float, torch.Tensor, float, bool, bool]:
    """One anchor by Wolfe's method: (rho_i, u, gap, vertex, certified)."""
    diff = V[i] - torch.cat([V[:i], V[i + 1 :]])
    X = diff / diff.norm(dim=1, keepdim=True)
    p, _ = _wolfe_min_norm_point(X)
    upper = float(p.norm())
    u = p / upper if upper > 0 else p
    lower = float((X @ u).min()) if upper > 0 else 0.0
    if lower > 0:
        return lower, u, upper - lower, True, upper - lower <= GAP_TOL
    return 0.0, u, upper, False, upper <= NV_TOL


def _single_thread() -> None:
    torch.set_num_threads(1)


def _parallel_chunks(fn, n: int, chunk: int) -> list:
    """Run fn over anchor chunks on torch.get_num_threads() workers, each with ONE intra-op thread.

    The solver's kernels are many and small; with 2 intra-op threads each one ends in a barrier, and when
    another process holds a core the barrier waits on a descheduled thread, for every kernel. Chunk-level
    parallelism has no such barriers."""
    workers = torch.get_num_threads()
    chunk = max(1, min(chunk, -(-n // workers)))
    idxs = [torch.arange(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    try:
        torch.set_num_threads(1)
        if workers == 1 or len(idxs) == 1:
            return [fn(i) for i in idxs]
        with ThreadPoolExecutor(min(workers, len(idxs)), initializer=_single_thread) as pool:
            return list(pool.map(fn, idxs))
    finally:
        torch.set_num_threads(workers)


def decodability(values: torch.Tensor, chunk: int | None = None, newton_iters: int = 60) -> Decodability:
    """rho(V), the certified per-anchor rho_i and U* for all anchors by the batched solver above.

    Args:
        values (n_values, d): distinct nonzero value embeddings, one per row.
        chunk (int | None): anchors solved together (None: sized to the problem).
        newton_iters (int): Newton iterations per working-set solve.

    Returns:
        info (Decodability): rho, rho_i, U*, the non-vertices and the certified gaps.

    Raises:
        DecodabilityNotConverged: an anchor could not be certified.

    Examples:
        >>> import torch
        >>> from symformer.facts import decodability, sample_embeddings
        >>> values = sample_embeddings(20, 6, seed=0)
        >>> midpoint = values[:2].mean(0, keepdim=True)  # inside the hull: never decodable
        >>> decodability(torch.cat([values, midpoint])).not_vertices
        [20]
    """
    V = _check_values(values)
    n, d = V.shape
    if chunk is not None:
        check_int("chunk", chunk, 1)
    K = min(n - 1, max(32, min(2 * d + 16, 96)))
    # ~32 MB per (B, F) slab and per (B, K, d) working set
    chunk = chunk or max(1, min(n, (1 << 22) // n, (1 << 22) // (K * d)))
    rho_i, gap = torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float64)
    U = torch.empty(n, d, dtype=torch.float64)
    vertex, certified = torch.empty(n, dtype=torch.bool), torch.empty(n, dtype=torch.bool)

    def solve(idx: torch.Tensor) -> int:
        ch, w, upper, k = _solve_chunk(V, idx, newton_iters, K)
        rho_i[idx], U[idx], gap[idx], vertex[idx], certified[idx] = _certify(ch, w, upper)
        return k

    its = sum(_parallel_chunks(solve, n, chunk))
    for i in (~certified).nonzero().flatten().tolist():
        rho_i[i], U[i], gap[i], vertex[i], certified[i] = _fallback(V, i)
    if not bool(certified.all()):
        bad = (~certified).nonzero().flatten()
        raise DecodabilityNotConverged(bad.tolist(), gap[bad].tolist())
    return Decodability(
        float(rho_i.min()),
        rho_i,
        U.to(values.dtype),
        (~vertex).nonzero().flatten().tolist(),
        its,
        gap,
        float(gap.max()),
    )


def require_vertices(values: torch.Tensor, info: Decodability | None = None, name: str = "values") -> Decodability:
    """A construction that decodes through U* needs every value to be a vertex (rho_i > 0).

    Args:
        values (n_values, d): value embeddings.
        info (Decodability | None): `decodability(values)` if already computed.
        name (str): the argument name the error message gives.

    Returns:
        info (Decodability): the values' decodability, computed if not given.

    Raises:
        ValueError: a value is not a vertex of conv(V).

    Examples:
        >>> import torch
        >>> from symformer.facts import require_vertices
        >>> require_vertices(torch.eye(3, dtype=torch.float64)).rho > 0
        True
        >>> require_vertices(torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], dtype=torch.float64))
        Traceback (most recent call last):
        ...
        ValueError: values: got 'values [1] that are not vertices of their convex hull (rho_i <= 0)', expected ...
    """
    info = info or decodability(values)
    if info.not_vertices:
        shown = info.not_vertices[:20]
        fail(
            name,
            f"values {shown}{'...' if len(info.not_vertices) > 20 else ''} that are not vertices of their "
            f"convex hull (rho_i <= 0)",
            "every value a vertex (rho(V) > 0) so that it can be decoded",
        )
    return info


from symformer.facts.reference import rho_reference_cvxpy  # noqa: E402,F401  (kept importable from here)
