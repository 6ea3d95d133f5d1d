"""Experiment facts-hebbian in quick mode: every search runs, the metrics and claims exist, and a record of the
authors' code placed in OUT/official/ is read into the comparison metrics (slow: its GD searches train for about a
minute on a loaded core)."""

from __future__ import annotations

import json

import pytest

from symformer.experiments import RunContext, load_all
from symformer.experiments.facts_hebbian import plan as hp
from symformer.experiments.facts_hebbian import report as hr

METRICS = (
    "hebbian_reimpl_vs_official_params",
    "best_construction_vs_official_best_params",
    "gd_baseline_vs_official_gd_params",
)


@pytest.mark.slow
def test_quick_run_reports_every_method_and_reads_the_official_record(tmp_path):
    off = tmp_path / "official"
    off.mkdir()
    # a made-up record of their code at the quick point: hebbian-dd at h = 1000 units, GD at 3000 parameters
    (off / "official.json").write_text(
        json.dumps(
            {
                "d=16_F=64_kappa=1": {
                    "cf_coord_whitened": {"m": 1000, "param_count": 48000},
                    "gd": {"m": 62, "param_count": 3000},
                }
            }
        )
    )
    res = load_all().get("facts-hebbian").fn(RunContext(out_dir=tmp_path, quick=True, progress=False))
    assert set(METRICS) <= set(res.metrics)
    rows = res.config["rows"]["d=16_F=64_kappa=1"]
    plan = hp.Plan.for_run(True)
    assert set(rows) == set(hp.methods_at(plan, plan.points[0]))
    dd = rows["hebbian-dd"]
    assert dd["size"] is not None and dd["params"] == 3 * 16 * dd["size"] == dd["params_official_count"]
    assert res.metrics["hebbian_reimpl_vs_official_params"] == {"d=16_F=64_kappa=1": dd["params"] / 48000}
    assert res.metrics["gd_baseline_vs_official_gd_params"] == rows["gd-swiglu"]["params"] / 3000
    assert rows["hebbian-als"]["params"] <= rows["hebbian-dd"]["params"]  # the refits never need more here
    assert all(c.verdict in ("holds", "fails", "inconclusive") for c in res.claims)
    assert {c.id for c in res.claims} >= {
        "e/Fig2b-gd/gd-swiglu",
        "e/Fig2b-gd/gd-bilinear",
        "e/Fig2b-ntk/ntk",
        "e/Fig2b-ntk/ntk-relu1",
        "hebbian/reimpl",
        "hebbian/best",
    }
    assert (tmp_path / "sizes.md").read_text().count("| d=16_F=64") == 2 * 7 + 2
    which = (tmp_path / "which.md").read_text().splitlines()  # docs/systems/facts.md's table, one row per point
    assert len(which) == 2 + len(plan.points) and which[2].startswith("| 16, 64, 1 | ")
    assert f"| {rows['gd-swiglu']['params']:,} / " in which[2] and "not run" in which[3]  # GD only at the first
    assert hr.read_official(tmp_path / "nothing") == {}


def test_the_full_plan_covers_the_issues_grid_or_names_what_it_leaves_out():
    """d in {32, 64, 128}, F in {256, 1024, 4096} with F <= d^2 / 4, kappa in {1, 100, 1e4}: each point is searched
    or named in `missing`, and so is each point's GD search."""
    plan = hp.Plan.for_run(False)
    said = " ".join(plan.missing)
    grid = [(d, F, k) for d in (32, 64, 128) for F in (256, 1024, 4096) if 4 * F <= d * d for k in (1.0, 100.0, 1e4)]
    assert len(grid) == 18 and set(plan.points) <= set(grid) and set(plan.gd_points) <= set(plan.points)
    for p in grid:
        assert p in plan.points or str(p) in said, p
        assert p in plan.gd_points or str(p) in said, p


def _row(size, params, largest, knob="h"):
    return {
        "size": size,
        "params": params,
        "params_official_count": params,
        "bits_per_param": None,
        "knob": knob,
        "largest_tried": largest,
    }


def test_where_theirs_store_nothing_the_bound_is_over_the_smallest_of_their_largest_widths():
    """Their best needs more units than every one of their searches tried; a valid upper bound on ours / theirs
    divides by the smallest of their largest widths (here hebbian-dd's 512), not by plain hebbian's 8192."""
    plan = hp.Plan([(32, 256, 100.0)], [], 2, [])
    got = {m: _row(None, None, 8192 if m == "hebbian" else 512) for m in hp.THEIRS}
    got |= {hp.OURS: _row(None, None, 4096, "m"), hp.BEST: _row(137, 13152, 256)}
    got |= {m: _row(None, None, 65536) for m in hp.NTK}
    table, _ = hr.side_by_side({"d=32_F=256_kappa=100": got}, plan, {})
    assert table[0]["best_kind"] == "upper bound"
    assert table[0]["best_vs_their_best"] == pytest.approx(13152 / (3 * 32 * 512))
    got[hp.BEST] = _row(None, None, 512)
    assert hr.side_by_side({"d=32_F=256_kappa=100": got}, plan, {})[0][0]["best_kind"] == "neither stores"
