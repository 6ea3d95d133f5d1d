"""`symformer facts solver-check` (experiments/facts/solver_audit.py): the fact sets are those the facts plan
computes rho on, each set's check is a resumable record, and a wrong rho_i is reported (issue 45)."""

from __future__ import annotations

import json

import pytest
import torch

from symformer.cli import main
from symformer.experiments.facts import laws as facts_laws
from symformer.experiments.facts import solver_audit
from symformer.experiments.facts.plan import FactsPlan, jobs
from symformer.facts.embeddings import make_fact_set


@pytest.fixture(scope="module")
def quick_sets():
    return solver_audit.fact_sets(quick=True, seed=0)


def test_sets_cover_every_part_of_the_quick_plan(quick_sets):
    used = {u.split("#")[0] for s in quick_sets for u in s["used_by"]}
    p = jobs(FactsPlan.for_run(True), True, 0)
    assert {j.key for j, _ in p["f"]} <= used  # every solver point of part (f)
    for part in "abcde":
        assert any(j.key in used for j, _ in p[part]), part
    assert len({s["digest"] for s in quick_sets}) == len(quick_sets)  # identical sets are audited once
    # the recipes rebuild what the points draw, bit for bit (independently of the trace)
    by_use = {u: s for s in quick_sets for u in s["used_by"]}
    f = solver_audit._values(solver_audit.build(by_use["f_d=16_k=100#0"]["recipe"]))
    assert torch.equal(f, make_fact_set(128, 16, kappa=100.0, seed=7).values)
    whitened = solver_audit.build(by_use["d_d=16_k=100#1"]["recipe"]).values
    assert torch.equal(whitened, facts_laws.whitened(make_fact_set(64, 16, kappa=100.0, seed=7)).values)
    assert by_use["c_whitened_k=100#0"] is by_use["d_d=16_k=100#1"]  # (c) and (d) share that set


def _tiny(quick_sets):
    return sorted(quick_sets, key=lambda s: s["n"] * s["d"])[:2]


def test_audit_records_and_resumes(quick_sets, tmp_path, monkeypatch):
    pytest.importorskip("cvxpy")
    two = _tiny(quick_sets)
    got = solver_audit.audit(tmp_path, quick=True, sets=two, anchors=(2, 1))
    assert got["sets_recorded"] == 2 and got["ran"] == 2 and got["holds"]
    assert got["rho_solver_false_non_vertices"] == 0 and got["rho_solver_max_abs_err"] <= solver_audit.TOL
    for s in two:
        rec = json.loads((tmp_path / "facts" / "solver_check" / f"{s['key']}.json").read_text())
        assert rec["result"]["anchors"] == len(rec["result"]["per_anchor"]["anchor"]) >= 2
    assert json.loads((tmp_path / "facts" / "solver_check.json").read_text())["sets"] == 2

    def no_solve(*a, **kw):
        raise AssertionError("a resumed audit recomputed a recorded set")

    monkeypatch.setattr(solver_audit, "decodability", no_solve)
    again = solver_audit.audit(tmp_path, quick=True, sets=two, anchors=(2, 1), resume=True)
    assert again["ran"] == 0 and again["reused"] == 2
    assert again["rho_solver_max_abs_err"] == got["rho_solver_max_abs_err"]


def test_a_planted_wrong_rho_is_reported(quick_sets, tmp_path, monkeypatch):
    pytest.importorskip("cvxpy")
    true = solver_audit.decodability

    def wrong(V):
        info = true(V)
        info.rho_i = info.rho_i + 1e-5  # off by more than the 1e-6 tolerance everywhere ...
        info.rho_i[3] = 0.0  # ... and a vertex (the LP's) claimed a non-vertex: the smallest rho_i, always checked
        return info

    monkeypatch.setattr(solver_audit, "decodability", wrong)
    got = solver_audit.audit(tmp_path, quick=True, sets=_tiny(quick_sets), anchors=(2, 1))
    assert got["rho_solver_false_non_vertices"] == 2 and got["rho_solver_max_abs_err"] > solver_audit.TOL
    assert not got["holds"]


def test_cli_bad_input_is_one_line(tmp_path, monkeypatch, capsys):
    assert main(["facts", "solver-check", "--out", str(tmp_path), "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cvxpy" else find(name, *a))
    assert main(["facts", "solver-check", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cvxpy" in err and "symformer[dev]" in err
    assert not (tmp_path / "facts").exists()  # refused before any work


@pytest.mark.slow
def test_sets_of_the_full_plan():
    sets = solver_audit.fact_sets(quick=False, seed=0)
    used = {u.split("#")[0] for s in sets for u in s["used_by"]}
    p = jobs(FactsPlan.for_run(False), False, 0)
    assert used == {j.key for part in p.values() for j, _ in part}  # every point computes rho on a set
    assert max(s["n"] * s["d"] for s in sets) == 4096 * 128 and len(sets) == 98
