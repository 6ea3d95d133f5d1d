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
    base = [0.5, 0.7, 0.8, 0.8, 0.9]  # baseline reaches its final 0.9 at epoch 5
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


def _fake_log(n_better, ratios, bound=None):
    cum, out = 1.0, []
    for i, r in enumerate(ratios):
        ok = bound is None or cum * r <= bound
        cum *= r if ok else 1.0
        out.append({"step": i, "applied": ok, "n_better": n_better, "cum_ratio": cum, "rejected_by_guard": not ok})
    return out


def _patch_runs(monkeypatch, calls: list):
    """Canned training runs, probes, LM runs and checks in place of the real ones (seconds, not hours)."""
    from symformer.experiments.teleport import report as teleport_report
    from symformer.experiments.teleport import runs as teleport_runs

    def fake_arm(
        dataset, pe, arm, seed, quick, lr, epochs, alpha=0.65, steps=4, optimizer="sgd", max_ratio=None, epoch_at=1
    ):
        calls.append((arm, alpha, max_ratio, dataset, pe, seed, lr, optimizer, epoch_at))
        curve = [0.5, 0.8, 0.9] if arm == "base" else [0.6, 0.9, 0.95]
        log = (
            [] if arm == "base" else _fake_log(15, [1.02, 1.02, 1.3, 1.005] if alpha == 0.65 else [1.01] * 4, max_ratio)
        )
        return {
            "curve": curve,
            "test_acc": curve[-1] - 0.01 * seed,
            "val_acc": curve[-1] - 0.01 * lr,
            "epoch_seconds": [1.0] * 3,
            "tele_seconds": 0.0 if arm == "base" else 0.01,
            "overhead_pct": 0.0 if arm == "base" else 0.25,
            "first_epoch_overhead_pct": 1.0,
            "grad_norms": [1.0, 2.0],
            "log": log,
            "seconds": 3.0,
        }

    def fake_probe(dataset, pe, quick, alpha, steps, epochs):  # ratio grows with alpha: 0.2 is the last <= 1.05
        return {"cum_ratio": 1.0 + alpha / 4, "step_ratios": [], "n_better": [12] * steps}

    monkeypatch.setattr(teleport_runs, "train_arm", fake_arm)
    monkeypatch.setattr(teleport_runs, "operating_point_probe", fake_probe)
    monkeypatch.setattr(
        teleport_runs,
        "schedule_for",
        lambda ds, quick: {
            "n_train": 3200,
            "batch_size": 32,
            "steps_per_epoch": 100,
            "consecutive": 4,
            "k_fraction": 0.04,
        },
    )
    monkeypatch.setattr(
        teleport_runs,
        "lm_arm",
        lambda pe, teleport, quick, seed, data_file: {
            "points": [(10, 3.0), (20, 2.5)] if not teleport else [(10, 2.4), (20, 2.3)],
            "final_val_loss": 2.5,
        },
    )
    monkeypatch.setattr(
        teleport_report,
        "invariance_checks",
        lambda trials: {"errs": {"rope": 1e-15}, "dims": {"rope": 8}, "diag": 0.1, "wrong": 0.2},
    )
    monkeypatch.setattr(teleport_report, "closed_form_checks", lambda: 1e-15)
    return teleport_report


def test_pipeline_metrics_and_verdicts_with_fake_runs(tmp_path, monkeypatch):
    """Reporting logic on canned runs: metric names of the issues, operating point, verdicts from the numbers."""
    from symformer.experiments.base import RunContext

    calls: list = []
    teleport_report = _patch_runs(monkeypatch, calls)
    res = teleport_report.run(RunContext(out_dir=tmp_path, quick=True))
    m = res.metrics
    for name in (
        "invariance_max_rel_err",
        "rope_generic_diagonal_err",
        "rope_wrong_pairing_err",
        "closed_form_max_rel_err",
        "overhead_pct",
        "speedup_pct_mean",
        "speedup_pct_std",
        "final_acc",
        "norm_ratio_cumulative_max",
        "norm_ratio_cumulative_max_unguarded",
        "candidates_beating_reference_mean",
        "teleports_rejected_by_guard",
        "k_fraction_of_epoch",
        "chosen_alpha",
    ):
        assert name in m
    assert m["chosen_alpha"] == {"mnist1d/learned": 0.2, "mnist1d/rope": 0.2}
    assert m["k_fraction_of_epoch"]["mnist1d"] == 4 / 100  # quick: 3200 samples, batch 32
    arms = {c[:3] for c in calls}
    assert ("tele", 0.2, 1.05) in arms and ("tele", 0.2, None) in arms and ("tele", 0.65, 1.05) in arms
    assert m["teleports_rejected_by_guard"]["mnist1d/rope/guard_a0.65/sgd"] == 1  # the 1.3 step
    assert m["norm_ratio_cumulative_max"]["mnist1d/rope/guard_a0.65/sgd"] <= 1.05
    assert m["norm_ratio_cumulative_max_unguarded"]["mnist1d/rope/tele_a0.65/sgd"] > 1.05
    assert m["candidates_beating_reference_mean"]["mnist1d/rope/guarded/sgd"] == 15
    assert m["speedup_pct_mean"]["mnist1d/rope/tele/sgd"] == 100 * (3 - 2) / 3
    v = {c.id: c.verdict for c in res.claims}
    assert v["G-inv"] == v["G-neg"] == v["CF"] == v["OVH"] == v["GUARD-bound"] == "holds"
    assert v["SPD-rope"] == "inconclusive"  # one seed cannot decide
    assert v["ACC-rope"] == v["GUARD-ACC-rope"] == "inconclusive"
    assert v["LM"] == "holds"
    assert all(c.setting and c.paper_setting for c in res.claims)
    assert all((tmp_path / f).is_file() for f in res.figures)


def test_full_plan_reports_on_fake_runs(tmp_path, monkeypatch):
    """The full protocol's own branches (both data sets, three PEs, lr selection on validation, the paper's lr,
    epoch-2 arm, alpha ablation, AdamW, Zhao) reach a report on canned runs: a recorded run of hours must not
    fail in its last minute."""
    from symformer.experiments.base import RunContext

    calls: list = []
    teleport_report = _patch_runs(monkeypatch, calls)
    res = teleport_report.run(RunContext(out_dir=tmp_path, quick=False))
    assert len(calls) == len(set(calls))  # identical runs share one job
    assert {c[3] for c in calls} == {"mnist1d", "digits"} and {c[4] for c in calls} == {"learned", "rope", "string"}
    assert {c[8] for c in calls} == {1, 2} and {c[7] for c in calls} == {"sgd", "adamw"}
    m = res.metrics
    # val_acc falls with lr in the canned runs, so validation picks the smallest lr of the grid for every arm
    assert set(m["chosen_lr"].values()) == {0.015} and len(m["chosen_lr"]) == 2 * 3 * 2
    assert set(m["chosen_alpha"]) == {
        f"{ds}/{pe}" for ds in ("mnist1d", "digits") for pe in ("learned", "rope", "string")
    }
    ids = {c.id for c in res.claims}
    assert {
        "SPD-learned",
        "SPD-rope",
        "ACC-rope",
        "GUARD-ACC-rope",
        "ACC-rope-lr0.015",
        "GUARD-bound",
        "ZHAO",
        "ADAMW",
        "LM",
        "ACC-string-mnist1d",
        "ACC-learned-digits",
        "ACC-rope-digits",
        "ACC-string-digits",
    } <= ids
    digits = next(c for c in res.claims if c.id == "ACC-rope-digits")
    assert "digits" in digits.statement and digits.setting.startswith("ours: digits")
    v = {c.id: c.verdict for c in res.claims}
    assert v["SPD-rope"] == "holds"  # 5 seeds, every teleported curve reaches the baseline one epoch earlier
    assert all(c.setting and c.paper_setting for c in res.claims)


@pytest.mark.parametrize(
    "deltas, expected",
    [
        ([0.02, 0.03, 0.025], "holds"),
        ([-0.1, -0.12, -0.09], "fails"),
        ([0.05, -0.05, 0.01], "inconclusive"),
        ([0.02], "inconclusive"),
    ],
)
def test_accuracy_claim_paired_two_standard_errors(deltas, expected):
    from symformer.experiments.teleport.claims import accuracy_claim

    base = [{"test_acc": 0.8 + 0.01 * i} for i in range(len(deltas))]
    tele = [{"test_acc": b["test_acc"] + d} for b, d in zip(base, deltas)]
    (claim,) = accuracy_claim(
        {}, {("mnist1d", "rope", "base", "sgd"): base, ("mnist1d", "rope", "tele", "sgd"): tele}, "rope", 97.8, 98.41
    )
    assert claim.id == "ACC-rope" and claim.verdict == expected


def _speedup_metrics(per_seed: dict) -> dict:
    import statistics

    keys = {"zhao": "mnist1d/rope/zhao/sgd", "tele": "mnist1d/rope/tele/sgd", "adamw": "mnist1d/rope/tele/adamw"}
    m = {
        "speedup_pct_mean": {},
        "speedup_na_seeds": {},
        "speedup_pct_per_seed": {},
        "teleport_operating_point": {},
        "chosen_alpha": {},
        "chosen_lr": {},
        "epochs": {},
    }
    for arm, vals in per_seed.items():
        got = [v for v in vals if v is not None]
        m["speedup_pct_mean"][keys[arm]] = statistics.fmean(got) if got else float("nan")
        m["speedup_na_seeds"][keys[arm]] = len(vals) - len(got)
        m["speedup_pct_per_seed"][keys[arm]] = vals
    return m


@pytest.mark.parametrize(
    "zhao, tele, expected",
    [
        ([5.0, 6.0, 4.0, 5.5], [15.0, 17.0, 14.0, 16.0], "holds"),  # sampling ahead by ~10 points on every seed
        ([15.0, 17.0, 14.0, 16.0], [5.0, 6.0, 4.0, 5.5], "fails"),
        ([7.0, -20.0, 30.0, 10.0], [7.3, 10.0, 0.0, 12.0], "inconclusive"),  # means 7.0 vs 7.3 within the noise
        ([5.0, None, None, 4.0], [15.0, 16.0, 14.0, None], "inconclusive"),  # only 2 seeds where both reached it
    ],
)
def test_zhao_and_adamw_rows_use_paired_two_standard_errors(zhao, tele, expected):
    """ZHAO / ADAMW compare two arms' speed-ups seed by seed (seeds where both reached their baseline),
    not their means: a 0.3-point gap between 20-point-noisy means is not a verdict either way."""
    from symformer.experiments.teleport.claims import extra_claims

    claims = extra_claims(_speedup_metrics({"zhao": zhao, "tele": tele, "adamw": zhao}), {}, 4, quick=False)
    v = {c.id: c.verdict for c in claims}
    assert v["ZHAO"] == expected and v["ADAMW"] == expected  # adamw plays zhao's part: "gains smaller"


def test_lm_row_names_a_run_that_never_reached_the_baseline():
    from symformer.experiments.teleport.claims import extra_claims

    metrics = {
        "speedup_pct_mean": {},
        "lm_speedup_pct": {"sinusoidal": None, "rope": 3.8},
        "lm_final_val_loss": {
            "sinusoidal/base": 1.622,
            "sinusoidal/tele": 1.624,
            "rope/base": 1.56,
            "rope/tele": 1.557,
        },
    }
    (c,) = extra_claims(metrics, {"x": {}}, 1, quick=False)
    assert c.id == "LM" and c.verdict == "inconclusive" and "nan" not in c.measured.lower()
    assert "never reached the baseline's final validation loss 1.6220; it ended at 1.6240" in c.measured


def test_operating_point_rules():
    """App. G: |K| at 2-4% of an epoch with 4-16 consecutive steps; the largest alpha with ratio <= 1.05."""
    from symformer.experiments.teleport.runs import batch_size_for, choose_alpha, consecutive_for

    assert batch_size_for(16000) == 128 and batch_size_for(3200) == 32 and batch_size_for(1078) == 8
    for spe in (100, 125, 134, 200, 300, 400):
        k = consecutive_for(spe)
        assert 4 <= k <= 16 and 0.02 <= k / spe <= 0.04
    assert consecutive_for(50) == 4 and consecutive_for(2000) == 16  # clipped to App. G's 4-16
    ratios = {0.05: 1.004, 0.1: 1.012, 0.2: 1.049, 0.3: 1.08, 0.5: 1.3, 0.65: 2.9}
    assert choose_alpha(ratios) == (0.2, True)
    assert choose_alpha({0.05: 1.06, 0.1: 1.2}) == (0.05, False)  # none meets it: the smallest, flagged
