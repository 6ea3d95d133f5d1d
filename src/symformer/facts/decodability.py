"""Decodability rho(V) and the margin-optimal output directions U* (eqs. 3-4, Def. 3.2.1).

Per anchor i, with unit rows x_ij = (v_i - v_j)/|v_i - v_j| (j != i):
    rho_i = max_{|u| <= 1} min_j <x_ij, u>,   rho = min_i rho_i.
When rho_i > 0 this is the hard-margin SVM through the origin  min |w| s.t. X_i w >= 1, with
u_i* = w/|w| and rho_i = 1/|w| (NOTES.md §3, reading). It is infeasible exactly when v_i is not a
vertex of conv(V); such a value can never be decoded (eq. 1).

Solver (all anchors of a chunk at once): Newton on the squared-hinge penalty
    f_C(w) = |w|^2/2 + C/2 sum_j max(0, 1 - <x_ij, w>)^2
with continuation in C (finite Newton; Hessian I + C X_A^T X_A on the active rows only), then an exact
active-set polish: w = X_S^T alpha with (X_S X_S^T) alpha = 1 on the support S, alpha >= 0, X w >= 1.
The reported rho_i is always min_j <x_ij, u_i> of the returned direction, i.e. a certified value.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from symformer._validation import check_int, check_tensor, fail


@dataclass
class Decodability:
    rho: float                  # min_i rho_i (eq. 3)
    rho_i: torch.Tensor         # (|V|,) per-anchor values; <= 0 for non-vertices
    U: torch.Tensor             # (|V|, d) unit margin-optimal directions u_i* (eq. 4)
    not_vertices: list[int]     # indices i with rho_i <= 0 (never decodable)
    iterations: int = 0


class _Chunk:
    """Margins <x_ij, w_i> against all F values for a chunk of anchors without materialising X (B x F x d)."""

    def __init__(self, V: torch.Tensor, idx: torch.Tensor):
        self.V, self.idx = V, idx
        self.A = V[idx]                                                     # (B, d) anchors
        dist = torch.cdist(self.A, V, compute_mode="donot_use_mm_for_euclid_dist")
        self.self_mask = torch.zeros_like(dist, dtype=torch.bool)
        self.self_mask[torch.arange(len(idx)), idx] = True
        self.duplicate = ((dist == 0) & ~self.self_mask).any(1)             # v_i repeated: not a vertex
        self.inv = torch.where((dist > 0) & ~self.self_mask, 1.0 / dist.clamp_min(1e-300), torch.zeros_like(dist))

    def margins(self, W: torch.Tensor) -> torch.Tensor:
        m = ((self.A * W).sum(-1, keepdim=True) - W @ self.V.T) * self.inv
        return m.masked_fill(self.self_mask, float("inf"))

    def rows(self, jj: torch.Tensor) -> torch.Tensor:
        """x_ij for the gathered indices jj (B, k) -> (B, k, d)."""
        return (self.A[:, None, :] - self.V[jj]) * self.inv.gather(1, jj)[..., None]


class _Working:
    """The same problem restricted to a working set of K constraints per anchor (materialised rows)."""

    def __init__(self, X: torch.Tensor):
        self.X = X
        self.self_mask = torch.zeros(X.shape[:2], dtype=torch.bool)

    def margins(self, W: torch.Tensor) -> torch.Tensor:
        return (self.X @ W[..., None]).squeeze(-1)

    def rows(self, jj: torch.Tensor) -> torch.Tensor:
        return self.X.gather(1, jj[..., None].expand(-1, -1, self.X.shape[2]))


def _penalty(w: torch.Tensor, m: torch.Tensor, C: float) -> torch.Tensor:
    return 0.5 * (w * w).sum(-1) + 0.5 * C * torch.relu(1 - m).pow(2).sum(-1)


def _newton_step(X: torch.Tensor, g: torch.Tensor, C: float) -> torch.Tensor:
    """-(I + C X^T X)^{-1} g; by Woodbury, -(g - X^T (I/C + X X^T)^{-1} X g), when the active rows are few."""
    k, d = X.shape[1], X.shape[2]
    if k < d:
        S = X @ X.transpose(1, 2) + torch.eye(k, dtype=X.dtype) / C
        z = torch.cholesky_solve((X @ g[..., None]), torch.linalg.cholesky(S))
        return -(g - (X.transpose(1, 2) @ z).squeeze(-1))
    H = torch.eye(d, dtype=X.dtype) + C * X.transpose(1, 2) @ X
    return -torch.cholesky_solve(g[..., None], torch.linalg.cholesky(H)).squeeze(-1)


def _newton(ch: _Chunk, w: torch.Tensor, C: float, cap: int, iters: int) -> tuple[torch.Tensor, int]:
    used = 0
    m = ch.margins(w)
    for _ in range(iters):
        used += 1
        r = torch.relu(1 - m)
        k = max(1, min(cap, int((r > 0).sum(1).max())))
        rv, jj = r.topk(k, dim=1)
        X = ch.rows(jj) * (rv > 0)[..., None]
        g = w - C * (X.transpose(1, 2) @ rv[..., None]).squeeze(-1)
        dw = _newton_step(X, g, C)
        # margins are linear in w: the line search and the next margins need no further matmuls
        sm = ch.margins(dw).masked_fill(ch.self_mask, 0.0)
        ww, wd, dd = (w * w).sum(-1), (w * dw).sum(-1), (dw * dw).sum(-1)
        f0, slope = _penalty(w, m, C), (g * dw).sum(-1)
        t = torch.ones(w.shape[0], dtype=w.dtype)
        todo = torch.ones_like(t, dtype=torch.bool)
        for _ in range(50):  # Armijo backtracking, per anchor
            ft = 0.5 * (ww + 2 * t * wd + t * t * dd) + 0.5 * C * torch.relu(1 - m - t[:, None] * sm).pow(2).sum(-1)
            todo = todo & ~(ft <= f0 + 1e-4 * t * slope)
            if not bool(todo.any()):
                break
            t = torch.where(todo, t * 0.5, t)
        step = t[:, None] * dw
        w = w + step
        m = m + t[:, None] * sm
        if float((step.norm(dim=1) / w.norm(dim=1).clamp_min(1e-300)).max()) < 1e-12:
            break
    return w, used


def _polish(ch: _Chunk, w: torch.Tensor, rounds: int = 12, tol: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact hard-margin solution on the support: returns (w, ok) with ok where KKT holds."""
    B, d = w.shape
    m = ch.margins(w)
    support = (m < 1 + 1e-7) & ~ch.self_mask
    ok = torch.zeros(B, dtype=torch.bool)
    best = w.clone()
    for _ in range(rounds):
        k = max(1, int(support.sum(1).max()))
        sv, jj = support.to(w.dtype).topk(k, dim=1)
        mask = sv > 0
        X = ch.rows(jj) * mask[..., None]
        G = X @ X.transpose(1, 2) + torch.diag_embed((~mask).to(w.dtype))
        alpha = torch.linalg.lstsq(G, mask.to(w.dtype)[..., None], driver="gelsd").solution.squeeze(-1) * mask
        wn = (X.transpose(1, 2) @ alpha[..., None]).squeeze(-1)
        neg = (alpha < -1e-9 * alpha.abs().amax(1, keepdim=True)) & mask
        mn = ch.margins(wn)
        viol = mn.min(1).values < 1 - tol
        good = ~neg.any(1) & ~viol & (wn.norm(dim=1) > 0)
        newly = good & ~ok
        best[newly] = wn[newly]
        ok |= good
        if bool(ok.all()):
            break
        # drop the most negative multiplier, else add the most violated constraint
        drop_at = torch.where(neg, alpha, torch.zeros_like(alpha)).argmin(1)
        has_neg = neg.any(1)
        rows = torch.arange(B)
        support[rows[has_neg], jj[rows[has_neg], drop_at[has_neg]]] = False
        add = ~has_neg & viol
        support[rows[add], mn[add].argmin(1)] = True
    return best, ok


STAGES = (1e2, 1e4)   # continuation: the penalty optimum nears the hard-margin one; the polish makes it exact


def _solve_working(ch: _Chunk, w: torch.Tensor, K: int, newton_iters: int) -> tuple[torch.Tensor, int]:
    """Solve on the K tightest constraints of each anchor; exact overall iff nothing else is violated."""
    J = ch.margins(w).topk(K, dim=1, largest=False).indices
    sub = _Working(ch.rows(J))
    its = 0
    for C in STAGES:
        w, used = _newton(sub, w, C, K, newton_iters)
        its += used
    w, _ = _polish(sub, w)
    return w, its


def _solve_chunk(V: torch.Tensor, idx: torch.Tensor, newton_iters: int, outer: int = 8):
    ch = _Chunk(V, idx)
    n, d = V.shape
    u0 = ch.A - V.mean(0)
    small = u0.norm(dim=1, keepdim=True) <= 1e-12 * ch.A.norm(dim=1, keepdim=True).clamp_min(1e-300)
    u0 = torch.where(small, ch.A, u0)
    m0 = ch.margins(u0).min(1).values
    w = torch.where(m0[:, None] > 0, u0 / m0.clamp_min(1e-300)[:, None], u0 / u0.norm(dim=1, keepdim=True))
    K = min(n - 1, 2 * d + 16)
    w, its = _solve_working(ch, w, K, newton_iters)
    for _ in range(outer - 1):
        todo = (ch.margins(w).min(1).values < 1 - 1e-9).nonzero().flatten()
        if todo.numel() == 0:
            break
        # re-solve only the anchors whose working set missed a constraint, warm-started
        w[todo], k = _solve_working(_Chunk(V, idx[todo]), w[todo], K, newton_iters)
        its += k
    u = w / w.norm(dim=1, keepdim=True).clamp_min(1e-300)
    r = ch.margins(u).min(1).values
    return torch.where(ch.duplicate, torch.zeros_like(r), r), u, its


def decodability(values: torch.Tensor, chunk: int | None = None, newton_iters: int = 60) -> Decodability:
    """rho(V), the per-anchor rho_i and U* for all anchors by the batched solver above."""
    check_tensor("values", values, 2)
    n, d = values.shape
    if n < 2:
        fail("values", f"{n} value(s)", "at least 2 values")
    if chunk is not None:
        check_int("chunk", chunk, 1)
    V = values.detach().double()
    # ~32 MB per (B, F) slab and per (B, K, d) working set
    chunk = chunk or max(1, min(n, (1 << 22) // n, (1 << 22) // ((2 * d + 16) * d)))
    rho_i = torch.empty(n, dtype=torch.float64)
    U = torch.empty(n, d, dtype=torch.float64)
    its = 0
    for s in range(0, n, chunk):
        idx = torch.arange(s, min(n, s + chunk))
        rho_i[idx], U[idx], k = _solve_chunk(V, idx, newton_iters)
        its += k
    bad = (rho_i <= 0).nonzero().flatten().tolist()
    return Decodability(float(rho_i.min()), rho_i, U.to(values.dtype), bad, its)


def require_vertices(values: torch.Tensor, info: Decodability | None = None, name: str = "values") -> Decodability:
    """A construction that decodes through U* needs every value to be a vertex (rho_i > 0)."""
    info = info or decodability(values)
    if info.not_vertices:
        shown = info.not_vertices[:20]
        fail(name, f"values {shown}{'...' if len(info.not_vertices) > 20 else ''} that are not vertices of their "
             f"convex hull (rho_i <= 0)", "every value a vertex (rho(V) > 0) so that it can be decoded")
    return info


def rho_reference_cvxpy(values: torch.Tensor, anchors: list[int] | None = None) -> torch.Tensor:
    """Reference rho_i from cvxpy (tests and the benchmark only): min |w|^2 s.t. X_i w >= 1."""
    import cvxpy as cp
    import numpy as np
    V = values.detach().double().numpy()
    n, d = V.shape
    out = []
    for i in (range(n) if anchors is None else anchors):
        diff = V[i] - np.delete(V, i, axis=0)
        X = diff / np.linalg.norm(diff, axis=1, keepdims=True)
        w = cp.Variable(d)
        prob = cp.Problem(cp.Minimize(cp.sum_squares(w)), [X @ w >= 1])
        prob.solve()
        out.append(1.0 / float(np.linalg.norm(w.value)) if prob.status in ("optimal", "optimal_inaccurate") else -1.0)
    return torch.tensor(out, dtype=torch.float64)
