"""The teleport experiment's pieces: speed-up definition, exactness checks (fast parts only)."""
from __future__ import annotations

import math

import pytest

from symformer.experiments.teleport import (
    closed_form_checks,
    epochs_to_reach,
    invariance_checks,
    speedup_pct,
)


def test_speedup_definition():
    base = [0.5, 0.7, 0.8, 0.8, 0.9]          # baseline reaches its final 0.9 at epoch 5
    assert epochs_to_reach(base, 0.9) == 5
    assert speedup_pct(base, [0.6, 0.9, 0.9, 0.9, 0.95]) == 100 * (5 - 2) / 5
    assert speedup_pct(base, base) == 0.0
    assert math.isnan(speedup_pct(base, [0.5] * 5))  # never reaches it: N/A as in the paper
    assert speedup_pct([0.5, 0.9, 0.9], [0.5, 0.6, 0.95]) == -50.0  # slower is a negative speed-up
    # losses: lower is better
    assert speedup_pct([3.0, 2.5, 2.0], [2.9, 2.0, 1.9], higher=False) == 100 * (3 - 2) / 3


def test_exactness_parts_of_the_experiment():
    inv = invariance_checks(trials=1)
    assert max(inv["errs"].values()) <= 1e-10
    assert min(inv["diag"], inv["wrong"]) > 1e-3
    assert inv["dims"]["rope-interleaved"] == 16 // 2 and inv["dims"]["none"] == 64
    assert closed_form_checks(samples=4) <= 1e-8


def test_pipeline_metrics_and_verdicts_with_fake_runs(tmp_path, monkeypatch):
    """Reporting logic on canned curves: metric names of the issue, verdicts from the numbers."""
    import symformer.experiments.teleport as E
    from symformer.experiments.base import RunContext

    def fake_arm(dataset, pe, arm, seed, quick, lr, epochs, alpha=0.65, steps=4, optimizer="sgd"):
        curve = [0.5, 0.8, 0.9, 0.9] if arm == "base" else [0.6, 0.9, 0.95, 0.95]
        return {"curve": curve, "test_acc": curve[-1], "val_acc": curve[-1], "epoch_seconds": [1.0] * 4,
                "tele_seconds": 0.0 if arm == "base" else 0.01, "overhead_pct": 0.0 if arm == "base" else 0.25,
                "first_epoch_overhead_pct": 1.0, "grad_norms": [1.0, 2.0], "log": [{"applied": True}]}
    monkeypatch.setattr(E, "train_arm", fake_arm)
    monkeypatch.setattr(E, "lm_arm", lambda pe, teleport, quick, seed, data_file: {
        "points": [(10, 3.0), (20, 2.5)] if not teleport else [(10, 2.4), (20, 2.3)], "final_val_loss": 2.5})
    monkeypatch.setattr(E, "invariance_checks", lambda trials: {"errs": {"rope": 1e-15}, "dims": {"rope": 8},
                                                                "diag": 0.1, "wrong": 0.2})
    monkeypatch.setattr(E, "closed_form_checks", lambda: 1e-15)
    res = E.run(RunContext(out_dir=tmp_path, quick=True))
    m = res.metrics
    for name in ("invariance_max_rel_err", "rope_generic_diagonal_err", "rope_wrong_pairing_err",
                 "closed_form_max_rel_err", "overhead_pct", "speedup_pct_mean", "speedup_pct_std", "final_acc"):
        assert name in m
    assert m["speedup_pct_mean"]["mnist1d/rope/tele/sgd"] == 100 * (3 - 2) / 3
    v = {c.id: c.verdict for c in res.claims}
    assert v["G-inv"] == v["G-neg"] == v["CF"] == v["OVH"] == "holds"
    assert v["SPD-rope"] == "inconclusive"  # one seed cannot decide
    assert v["ACC-rope"] == "inconclusive"
    assert v["LM"] == "holds"
    assert all((tmp_path / f).is_file() for f in res.figures)


@pytest.mark.parametrize("deltas, expected", [([0.02, 0.03, 0.025], "holds"), ([-0.1, -0.12, -0.09], "fails"),
                                              ([0.05, -0.05, 0.01], "inconclusive"), ([0.02], "inconclusive")])
def test_accuracy_claim_paired_two_standard_errors(deltas, expected):
    import symformer.experiments.teleport as E
    from symformer.results import ExperimentResult
    base = [{"test_acc": 0.8 + 0.01 * i} for i in range(len(deltas))]
    tele = [{"test_acc": b["test_acc"] + d} for b, d in zip(base, deltas)]
    res = ExperimentResult()
    E._accuracy_claim(res, {("mnist1d", "rope", "base", "sgd"): base, ("mnist1d", "rope", "tele", "sgd"): tele},
                      "rope", 97.8, 98.41)
    assert res.claims[0].id == "ACC-rope" and res.claims[0].verdict == expected
