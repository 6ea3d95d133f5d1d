"""Experiment `linearize` (issue 64 item 4): its metrics and verdicts are computed from the runs' numbers (fast, on
made-up records, with a negative control), and `reproduce linearize --quick` runs end to end (CI's quick mode: a tiny
teacher and a few steps per stage check the plumbing, not the numbers)."""

import dataclasses
import math

import pytest
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()
pytest.importorskip("peft")

from symformer.experiments import RunContext, load_all  # noqa: E402
from symformer.experiments.linearize.plan import ARMS, ATTENTIONS, LinearizePlan  # noqa: E402
from symformer.experiments.linearize.report import arm_metrics, claims, ppl_table  # noqa: E402

METRICS = [
    f"{name}[{a}]"
    for name in ("linearized_ppl_vs_softmax", "linearized_vs_scratch_ppl", "stage1_gap_closed")
    for a in ATTENTIONS
]


def _got(stage2: float, stage1: float, swap: float = 3.0, teacher: float = 2.0, scratch: float = 2.5) -> dict:
    got = {"teacher": {"final_val_loss": teacher}}
    for a, p in ARMS:
        got[f"linearize-{a}-{p}"] = {"val_loss": {"stage0": swap, "stage1": stage1, "stage2": stage2}}
    for a in ATTENTIONS:
        got[f"scratch-{a}"] = {"final_val_loss": scratch}
    got["decode"] = {"context": 64, "seconds_per_token": {"softmax": 2.0, "favor": 1.0, "plash": 4.0}, "cache_bytes": {
        "softmax": 100, "favor": 10, "plash": 20}}  # fmt: skip
    return got


def test_metrics_and_verdicts_come_from_the_numbers():
    plan = LinearizePlan.for_run(True)
    good = arm_metrics(_got(stage2=2.05, stage1=2.2))
    assert set(METRICS) <= set(good)
    assert good["linearized_ppl_vs_softmax[favor]"] == pytest.approx(math.exp(0.05))
    assert good["linearized_vs_scratch_ppl[plash]"] == pytest.approx(math.exp(2.05 - 2.5))
    gap = (math.exp(3.0) - math.exp(2.2)) / (math.exp(3.0) - math.exp(2.0))
    assert good["stage1_gap_closed[favor]"] == pytest.approx(gap)
    assert good["decode_speedup_at_context[favor]"] == 2.0 and good["state_vs_kv_cache_bytes[plash]"] == 0.2
    assert [c.verdict for c in claims(good, plan)] == ["holds", "holds", "holds"]
    assert "| plash + string |" in ppl_table(good)
    # negative control: a linearized model 20% worse than the teacher, worse than scratch, stage 1 closing little
    bad = arm_metrics(_got(stage2=2.2, stage1=2.9, scratch=2.1))
    assert [c.verdict for c in claims(bad, plan)] == ["fails", "fails", "fails"]


def test_plan_round_trips_through_json_and_full_is_larger():
    quick, full = LinearizePlan.for_run(True), LinearizePlan.for_run(False)
    assert LinearizePlan.from_dict(quick.as_dict()) == quick
    assert full.spec.hidden_size > quick.spec.hidden_size and full.context == 4096


def test_per_attention_training_settings_reach_only_their_arms():
    from symformer.experiments.linearize.runs import arm_config

    plan = LinearizePlan.from_dict({**LinearizePlan.for_run(True).as_dict(), "train": {"favor": {"lr2": 0.5}}})
    assert arm_config(plan, "favor", "rope", 0).lr2 == 0.5
    assert arm_config(plan, "plash", "rope", 0).lr2 == plan.lr2 != 0.5  # the other attention keeps the plan's
    assert arm_config(plan, "favor", "rope", 0).lr1 == plan.lr1


def test_registered():
    assert load_all().get("linearize").data_files == ("tinyshakespeare.txt",)


def test_quick_run_reports_the_issue_metrics(tmp_path):
    from symformer.data.paths import data_dir

    d = data_dir(None)
    if d is None or not (d / "tinyshakespeare.txt").is_file():
        pytest.skip("tinyshakespeare.txt not found")
    res = load_all().get("linearize").fn(RunContext(tmp_path, quick=True, progress=False))
    assert set(METRICS) <= set(res.metrics)
    assert all(math.isfinite(res.metrics[m]) for m in METRICS)
    assert res.metrics["state_vs_kv_cache_bytes[favor]"] < 1
    assert all(v > 0 for v in res.metrics["decode"]["seconds_per_token"].values())  # timed steps, not a difference
    assert [c.id for c in res.claims] == ["lin-ppl", "lin-scratch", "lin-stage1"]
    assert (tmp_path / "linearize_ppl_vs_tokens.png").is_file()


def test_budget_scales_both_stages_and_refuses_below_one():
    plan = LinearizePlan.for_run(False)
    three = plan.scaled(3)
    assert (three.stage1_steps, three.stage2_steps) == (3 * plan.stage1_steps, 3 * plan.stage2_steps)
    assert dataclasses.replace(three, stage1_steps=plan.stage1_steps, stage2_steps=plan.stage2_steps) == plan
    for bad, error in ((0, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="budget"):
            plan.scaled(bad)
