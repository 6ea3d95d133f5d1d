"""Issue #11: the decodability solver against independent references on every anchor (slow).

rho_i against a cvxpy QP (CLARABEL, tight tolerances) within 1e-6, and the vertex decision against the
convex-hull LP of scipy.optimize.linprog, over d in {16, 32, 64}, kappa in {1, 1e2, 1e3, 1e4}, F = 256,
plus degenerate sets: a value inside the hull and nearly collinear values (duplicated rows are rejected
at the public boundary, see test_facts_core.py::test_rho_bad_input)."""

from __future__ import annotations

import pytest
import torch

from symformer.facts.decodability import decodability
from symformer.facts.embeddings import make_fact_set

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("kappa", [1.0, 1e2, 1e3, 1e4])
def test_rho_sweep_against_cvxpy_and_hull_lp(d, kappa):
    pytest.importorskip("cvxpy")
    pytest.importorskip("scipy")
    from symformer.facts.reference import solver_check

    V = make_fact_set(256, d, kappa=kappa, seed=7).values
    info = decodability(V)
    assert info.max_gap <= 1e-8
    res = solver_check(V, info.rho_i, list(range(V.shape[0])))
    assert res["false_non_vertices"] == 0 and res["false_vertices"] == 0, res
    assert res["max_abs_err"] <= 1e-6, res


def _degenerate(d: int, kappa: float) -> torch.Tensor:
    V = make_fact_set(64, d, kappa=kappa, seed=3).values
    a, b, c = V[0], V[1], V[2]
    mid = 0.5 * (a + b)
    extra = [
        V[3:8].mean(0),  # strictly inside the hull
        0.5 * (a + c),  # on the segment a-c (on the hull surface)
        mid + 1e-3 * mid / mid.norm(),  # nearly collinear with a, b, pushed outward
        mid - 1e-3 * mid / mid.norm(),  # nearly collinear, pushed inward
        a + 1e-4 * (a - b),
    ]  # a, b and this one nearly collinear, beyond a
    return torch.cat([V, torch.stack(extra)])


@pytest.mark.parametrize("d,kappa", [(16, 1.0), (16, 1e3), (32, 1e2), (64, 1e4)])
def test_rho_degenerate_against_hull_lp(d, kappa):
    pytest.importorskip("cvxpy")
    pytest.importorskip("scipy")
    from symformer.facts.reference import hull_vertex_lp, solver_check

    V = _degenerate(d, kappa)
    info = decodability(V)
    n = V.shape[0]
    # the construction is what it says: the interior value and the midpoint are not vertices
    assert hull_vertex_lp(V, [64, 65]).tolist() == [False, False]
    assert {64, 65} <= set(info.not_vertices)
    res = solver_check(V, info.rho_i, list(range(n)))
    assert res["false_non_vertices"] == 0 and res["false_vertices"] == 0, res
    assert res["max_abs_err"] <= 1e-6, res
