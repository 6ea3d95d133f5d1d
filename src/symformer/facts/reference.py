"""Independent references for the decodability solver (tests, the `facts` experiment and the benchmark).

- `rho_reference_cvxpy`: rho_i from the QP min |w|^2 s.t. X_i w >= 1 solved by cvxpy (CLARABEL, tight
  tolerances): rho_i = 1/|w| (our SVM form of eq. (4); the paper solves eq. (4) by ADMM, App. A.1.3).
- `hull_vertex_lp`: whether v_i is a vertex of conv(V), by the LP of scipy.optimize.linprog: v_i is NOT a
  vertex iff v_i = sum_j l_j v_j with l >= 0, sum l = 1 over the other values (feasible LP).
Both need the optional `cvxpy` / `scipy` packages (the `dev` extra) and are imported lazily.
"""

from __future__ import annotations

import torch


def rho_reference_cvxpy(values: torch.Tensor, anchors: list[int] | None = None) -> torch.Tensor:
    """Reference rho_i (-1.0 where the QP is infeasible: not a vertex)."""
    import cvxpy as cp
    import numpy as np

    V = values.detach().double().numpy()
    n, d = V.shape
    out = []
    for i in range(n) if anchors is None else anchors:
        diff = V[i] - np.delete(V, i, axis=0)
        X = diff / np.linalg.norm(diff, axis=1, keepdims=True)
        w = cp.Variable(d)
        prob = cp.Problem(cp.Minimize(cp.sum_squares(w)), [X @ w >= 1])
        out.append(_solve_qp(cp, prob, w))
    return torch.tensor(out, dtype=torch.float64)


def _solve_qp(cp, prob, w) -> float:
    """1/|w| (tight CLARABEL first; its default tolerances, then cvxpy's default, where that fails);
    -1.0 when infeasible, NaN when every solver fails (nearly degenerate sets)."""
    tight = dict(tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12, max_iter=400)
    has_clarabel = "CLARABEL" in cp.installed_solvers()
    tries = [dict(solver=cp.CLARABEL, **tight), dict(solver=cp.CLARABEL)] if has_clarabel else []
    for kw in tries + [{}]:
        try:
            prob.solve(**kw)
        except cp.error.SolverError:
            continue
        if prob.status in ("optimal", "optimal_inaccurate"):
            return 1.0 / float((w.value**2).sum() ** 0.5)
        if prob.status in ("infeasible", "infeasible_inaccurate"):
            return -1.0
    return float("nan")


def hull_vertex_lp(values: torch.Tensor, anchors: list[int] | None = None) -> torch.Tensor:
    """(len(anchors),) bool: True where v_i is a vertex of conv(V) (the convex-combination LP is infeasible)."""
    import numpy as np
    from scipy.optimize import linprog

    V = values.detach().double().numpy()
    n = V.shape[0]
    out = []
    for i in range(n) if anchors is None else anchors:
        others = np.delete(V, i, axis=0)
        A_eq = np.vstack([others.T, np.ones((1, n - 1))])
        b_eq = np.concatenate([V[i], [1.0]])
        out.append(_lp_vertex(linprog, np.zeros(n - 1), A_eq, b_eq, i))
    return torch.tensor(out)


#: seconds each HiGHS algorithm may take on one anchor's hull LP: its dual simplex, the last fallback, once ran for
#: over half an hour on a d = 128, F = 4096 whitened set; past the limit the next algorithm is tried, then undecided
LP_TIME_LIMIT = 120.0


def _lp_vertex(linprog, c, A_eq, b_eq, i: int) -> bool:
    """Status 2 (infeasible): a vertex; status 0 with a verified combination: not one. HiGHS' default
    sometimes ends with an unknown model status on these LPs; then its other algorithms are tried."""
    import numpy as np

    for method in ("highs", "highs-ipm", "highs-ds"):
        res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method=method, options={"time_limit": LP_TIME_LIMIT})
        if res.status == 2:
            return True
        if res.status == 0 and float(np.abs(A_eq @ res.x - b_eq).max()) <= 1e-9:
            return False
    raise RuntimeError(f"hull LP undecided for anchor {i} (last status {res.status}: {res.message})")


def solver_check(values: torch.Tensor, rho_i: torch.Tensor, anchors: list[int], detail: bool = False) -> dict:
    """Our rho_i against both references on the given anchors: max |rho_i - cvxpy| over the vertices,
    false non-vertices (LP: vertex, ours: rho_i <= 0) and false vertices (LP: not a vertex, ours: rho_i > 0).
    detail: also each anchor's values (ours, cvxpy's, the LP's decision), to find a disagreement again."""
    ref = rho_reference_cvxpy(values, anchors)
    lp = hull_vertex_lp(values, anchors)
    ours = rho_i[anchors].double()
    both = lp & (ref > 0)  # NaN (every QP solver failed) compares False: left out, counted below
    err = float((ours[both] - ref[both]).abs().max()) if bool(both.any()) else 0.0
    out = {
        "max_abs_err": err,
        "false_non_vertices": int((lp & (ours <= 0)).sum()),
        "false_vertices": int((~lp & (ours > 0)).sum()),
        "anchors": len(anchors),
        "cvxpy_lp_disagree": int((lp != (ref > 0)).sum()),
        "cvxpy_failed": int(ref.isnan().sum()),
    }
    if detail:
        out["per_anchor"] = {"anchor": list(anchors), "ours": ours.tolist(), "cvxpy": ref.tolist(), "lp": lp.tolist()}
    return out
