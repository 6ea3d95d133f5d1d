"""The working-set subproblem of `decodability` (issue #11, speed).

On a working set of K constraints per anchor (rows X, (B, K, d)) it solves min |w|^2/2 s.t. X w >= 1.
The Gram matrix G = X X^T is formed once per round (one O(K^2 d) batched GEMM); the Newton systems and the
active-set polish take masked slices of it, so a Newton step costs O(K d + K^3) instead of O(k^2 d) plus a
(B, k, d) gather as before.
"""
from __future__ import annotations

import torch

STAGES = (1e2, 1e4)                    # penalty continuation; the polish makes the solution exact
INFEASIBLE_STAGES = (1e6, 1e8, 1e10)   # where the polish fails: drive |X^T a| / 1^T a -> 0 (a non-vertex)


class Working:
    """Working-set rows X (B, K, d) with their Gram matrix G = X X^T, formed once per round."""

    def __init__(self, X: torch.Tensor, G: torch.Tensor | None = None):
        self.X = X
        self.G = X @ X.transpose(1, 2) if G is None else G

    def subset(self, rows: torch.Tensor) -> Working:
        return Working(self.X[rows], self.G[rows])


def newton(sub: Working, w: torch.Tensor, C: float, iters: int) -> tuple[torch.Tensor, int]:
    """Finite Newton on |w|^2/2 + C/2 sum (1 - <x_j, w>)_+^2 with Woodbury on the active rows A:
    dw = -(g - X_A^T (I/C + G_AA)^{-1} X_A g). G_AA is a masked slice of the Gram matrix (no O(k^2 d) work
    per step); w, g and the margins stay explicit vectors (Gram-space forms lose digits at kappa = 1e4)."""
    used = 0
    X, Xt = sub.X, sub.X.transpose(1, 2)
    mv = lambda M, v: (M @ v[..., None]).squeeze(-1)  # noqa: E731
    m = mv(X, w)
    eye = torch.eye(sub.G.shape[1], dtype=sub.G.dtype)
    for _ in range(iters):
        used += 1
        r = torch.relu(1 - m)
        a = (r > 0).to(m.dtype)
        g = w - C * mv(Xt, r)
        S = sub.G * (a[:, :, None] * a[:, None, :]) + eye * (a / C + (1 - a))[:, None, :]
        z = torch.cholesky_solve((a * mv(X, g))[..., None], torch.linalg.cholesky(S)).squeeze(-1)
        dw = -g + mv(Xt, a * z)
        sm = mv(X, dw)
        ww, wd, dd = (w * w).sum(-1), (w * dw).sum(-1), (dw * dw).sum(-1)
        f0, slope = 0.5 * ww + 0.5 * C * r.pow(2).sum(-1), (g * dw).sum(-1)
        t = torch.ones_like(ww)
        todo = torch.ones_like(t, dtype=torch.bool)
        for _ in range(50):  # Armijo backtracking, per anchor
            ft = 0.5 * (ww + 2 * t * wd + t * t * dd) + 0.5 * C * torch.relu(1 - m - t[:, None] * sm).pow(2).sum(-1)
            todo = todo & ~(ft <= f0 + 1e-4 * t * slope)
            if not bool(todo.any()):
                break
            t = torch.where(todo, t * 0.5, t)
        w, m = w + t[:, None] * dw, m + t[:, None] * sm
        if float((t * t * dd / (w * w).sum(-1).clamp_min(1e-300)).max()) < 1e-26:
            break
    return w, used


def polish(sub: Working, w: torch.Tensor, rounds: int = 24, tol: float = 1e-10):
    """Exact hard-margin solution on the support (G_SS alpha = 1, alpha >= 0) by a primal active-set method.
    Returns (alpha (B, K), ok) with w = X^T alpha where ok."""
    B, K = sub.G.shape[:2]
    support = (sub.X @ w[..., None]).squeeze(-1) < 1 + 1e-7
    ok = torch.zeros(B, dtype=torch.bool)
    best = torch.zeros(B, K, dtype=sub.G.dtype)
    rows = torch.arange(B)
    for _ in range(rounds):
        s = support.to(sub.G.dtype)
        Gs = sub.G * (s[:, :, None] * s[:, None, :]) + torch.diag_embed(1 - s)
        alpha = torch.linalg.lstsq(Gs, s[..., None], driver="gelsd").solution.squeeze(-1) * s
        neg = (alpha < -1e-9 * alpha.abs().amax(1, keepdim=True)) & support
        mn = (sub.G @ alpha[..., None]).squeeze(-1)
        viol = mn.min(1).values < 1 - tol
        good = ~neg.any(1) & ~viol & ((alpha * mn).sum(1) > 0) & ~ok
        best[good] = alpha[good].clamp_min(0)
        ok |= good
        if bool(ok.all()):
            break
        # drop the most negative multiplier, else add the most violated constraint
        has_neg = neg.any(1)
        drop_at = torch.where(neg, alpha, torch.zeros_like(alpha)).argmin(1)
        support[rows[has_neg], drop_at[has_neg]] = False
        add = ~has_neg & viol
        support[rows[add], mn[add].argmin(1)] = True
    return best, ok


def dual_upper(X: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """|X^T a| / 1^T a for a >= 0: a point of conv{x_ij}, hence an upper bound on rho_i (inf for a = 0)."""
    s = alpha.sum(1)
    p = (X.transpose(1, 2) @ alpha[..., None]).squeeze(-1)
    return torch.where(s > 0, p.norm(dim=1) / s.clamp_min(1e-300), torch.full_like(s, float("inf")))


def nonvertex_polish(X: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """On the support of the penalty multipliers, the least-squares a with X^T a = 0, 1^T a = 1; clamped >= 0
    it certifies a non-vertex to rounding where it is good (else the caller keeps the penalty multipliers)."""
    mask = (alpha > 0).to(X.dtype)
    s = X.abs().amax((1, 2)).clamp_min(1.0)
    M = torch.cat([X.transpose(1, 2) * mask[:, None, :], (s[:, None] * mask)[:, None, :]], 1)
    rhs = torch.zeros(M.shape[0], M.shape[1], 1, dtype=X.dtype)
    rhs[:, -1, 0] = s
    return (torch.linalg.lstsq(M, rhs, driver="gelsd").solution.squeeze(-1) * mask).clamp_min(0)


def subsolve(X: torch.Tensor, w: torch.Tensor, iters: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Solve on the working set from the warm start w; returns (w, alpha >= 0, Newton iterations)."""
    sub = Working(X)
    its = 0
    for C in STAGES:
        w, used = newton(sub, w, C, iters)
        its += used
    alpha, ok = polish(sub, w)
    w = torch.where(ok[:, None], (X.transpose(1, 2) @ alpha[..., None]).squeeze(-1), w)
    if bool((~ok).any()):
        # polish failed: likely infeasible (a non-vertex); the penalty multipliers C (1 - m)_+ certify it
        bad = (~ok).nonzero().flatten()
        sb, wb = sub.subset(bad), w[bad]
        for C in INFEASIBLE_STAGES:
            wb, used = newton(sb, wb, C, iters)
            its += used
        w[bad] = wb
        a_pen = INFEASIBLE_STAGES[-1] * torch.relu(1 - (sb.X @ wb[..., None]).squeeze(-1))
        a_ex = nonvertex_polish(sb.X, a_pen)
        better = dual_upper(sb.X, a_ex) < dual_upper(sb.X, a_pen)
        alpha[bad] = torch.where(better[:, None], a_ex, a_pen)
    return w, alpha, its
