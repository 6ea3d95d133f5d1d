"""Experiment `hf` and the `positional` bench's HF rows end to end (slow: training and timing runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()


def test_hf_experiment_is_registered():
    from symformer.experiments.base import load_all

    assert "hf" in load_all()


def test_hf_parity_covers_every_supported_family():
    from symformer.experiments.hf import FAMILY_MODELS
    from symformer.integrations.hf._common import FAMILIES

    assert set(FAMILY_MODELS) == set(FAMILIES)


def test_hf_teleport_invariance_rows_cover_every_family():
    from symformer.experiments.hf import FAMILY_MODELS, teleport_invariance
    from symformer.integrations.hf._common import GATED_OUTPUT  # diagonal V / O factors under their output gates

    tel = teleport_invariance(0)
    assert set(tel) == {"native_rope", "string", "espr"} | {f"{f}_native_rope" for f in FAMILY_MODELS if f != "llama"}
    assert {f"{f}_native_rope" for f in GATED_OUTPUT} <= set(tel)
    assert max(tel.values()) <= 1e-10


@pytest.mark.slow
def test_hf_experiment_quick_reports_fixed_metrics(tmp_path):
    from symformer.experiments.base import RunContext, load_all

    res = load_all().get("hf").fn(RunContext(tmp_path, quick=True, progress=False))
    for name in (
        "hf_rope_parity_max_abs_err_f32",
        "hf_rope_parity_max_abs_err_f64",
        "hf_string_identity_parity_max_abs_err",
        "hf_teleport_invariance_max_rel_err",
    ):
        assert isinstance(res.metrics[name], float)
    assert set(res.metrics["hf_val_loss"]) == {"rope", "string", "espr"}
    assert res.metrics["hf_rope_parity_max_abs_err_f64"] <= 1e-10
    by_family = res.metrics["hf_rope_parity_max_abs_err_f64_by_family"]
    from symformer.experiments.hf import FAMILY_MODELS

    assert set(by_family) == set(FAMILY_MODELS) and max(by_family.values()) <= 1e-10


@pytest.mark.slow
def test_positional_bench_hf_rows(tmp_path):
    from symformer.benchmarks.base import BenchContext, BenchResult
    from symformer.benchmarks.positional_hf import hf_rows

    res = BenchResult()
    hf_rows(res, BenchContext(Path(tmp_path), quick=True))
    assert {"hf_llama_string_step_vs_rope", "hf_llama_espr_step_vs_rope"} <= set(res.ratios)
    assert {r["method"] for r in res.rows} == {"hf_llama_native_rope", "hf_llama_string", "hf_llama_espr"}
