"""The `precision` experiment (issue 40): its verdicts follow the fixed goals, and a small run reports every metric."""

from __future__ import annotations

import math

import torch

from symformer.experiments.base import RunContext
from symformer.experiments.precision.claims import precision_claims
from symformer.experiments.precision.hf_checks import hf_native_rope_err_vs_bound
from symformer.experiments.precision.report import _run


def _claims(rot=0.5, grad=0.5, hf=1.2, train=0.01, finite=True):
    return {
        c.id: c.verdict
        for c in precision_claims(
            {"rope/bfloat16/cast": rot},
            {"rope/bfloat16/cast": grad},
            {"llama/bfloat16": hf},
            {"rope/softmax/cast": train},
            {"rope/softmax/cast": finite},
            {"bfloat16": 80.0},
            "s",
        )
    }


def test_verdicts_follow_the_goals():
    assert set(_claims().values()) == {"holds"}
    assert _claims(rot=1.01)["P-rotation"] == "fails"
    assert _claims(grad=1.01)["P-rotation"] == "fails"
    assert _claims(hf=1.51)["P-hf"] == "fails"
    assert _claims(train=0.021)["P-train"] == "fails"
    assert _claims(finite=False)["P-train"] == "fails"
    assert _claims(rot=math.inf)["P-rotation"] == "fails"


def test_small_run_reports_every_metric(tmp_path):
    res = _run(RunContext(out_dir=tmp_path), parts=("partial",), families=(), combinations=())
    rot = res.metrics["precision_rotation_err_vs_bound"]
    assert set(rot) == {
        f"{p}/{d}/{r}"
        for p in ("partial", "partial@2d")
        for d in ("bfloat16", "float16")
        for r in ("built", "cast", "autocast")
    }
    assert max(rot.values()) <= 1.0 and max(res.metrics["precision_rotation_grad_err_vs_bound"].values()) <= 1.0
    assert [c.verdict for c in res.claims] == ["holds"]


def test_the_anchor_is_measured_not_assumed():
    """HF's own RoPE cast with .to(bfloat16) rounds inv_freq (transformers issue 29496): far above the bound."""
    from tests.integrations._hf_models import transformers_or_skip

    transformers_or_skip()
    assert hf_native_rope_err_vs_bound(torch.bfloat16, n=4096) > 10
