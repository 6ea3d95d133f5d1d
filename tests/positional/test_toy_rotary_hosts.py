"""A rotary part added as CONTRIBUTING's recipe says (tests/_toys.py: its file's content and one registration line) is
held to the 16-bit bound by the precision checks and gets rows in the bfloat16 bench with no other edit: every "all
rotary parts" plan reads positional.rotary_parts(), and only while the part is registered."""

from __future__ import annotations

import pytest
import torch
from tests._toys import ToyRotary, registered

from symformer.benchmarks import _precision
from symformer.benchmarks.base import BenchContext
from symformer.experiments.extrapolation.plan import config_for, every_part
from symformer.experiments.precision.plan import PrecisionPlan
from symformer.experiments.precision.rotation_checks import (
    rotation_arms,
    rotation_err_vs_bound,
    rotation_errors,
    route_part,
)
from symformer.experiments.precision.train_checks import positionals, train_combinations
from symformer.experiments.teleport.plan import pe_settings


def _plans() -> dict[str, tuple]:
    return {
        "precision rotations": rotation_arms(),
        "precision plan": PrecisionPlan.for_run(True, 0).parts,
        "precision training": positionals(),
        "precision combinations": tuple(p for p, _ in train_combinations()),
        "extrapolation": every_part(),
        "extrapolation plan": config_for(False).parts,
        "teleport": tuple(pe_settings()),
        "bf16 bench": tuple(_precision.positional_parts(8, 16, 16)),
    }


def test_every_all_parts_plan_lists_the_toy_only_while_it_is_registered():
    with registered(core=None):
        inside = _plans()
    assert all("toy_rotary" in names for names in inside.values()), inside
    assert not any("toy_rotary" in names for names in _plans().values())


@pytest.mark.parametrize("route", ["built", "cast", "autocast"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_precision_checks_run_on_the_toy(route, dtype):
    with registered(core=None):
        module, ref = route_part("toy_rotary", dtype, route, n=64)
        assert isinstance(module, ToyRotary) and isinstance(ref, ToyRotary) and ref.beta.dtype == torch.float64
        res = rotation_errors("toy_rotary", dtype, route, n=64, backward=True)
        assert res["out_dtype_ok"] and res["forward"] <= 1.0 and res["grad_input"] <= 1.0
        assert res["grad_param"] == 0.0  # its frequencies are a buffer: nothing trains
        assert rotation_err_vs_bound("toy_rotary", dtype, route, n=64) == res["forward"]


def test_bf16_bench_rows_run_on_the_toy(tmp_path, monkeypatch):
    """The positional suite's *_bf16 rows (benchmarks/_precision.py) at a tiny shape: the toy gets its fwd and
    fwd+bwd rows, timed, within the bound."""
    monkeypatch.setattr(_precision, "ROT_SHAPE", (1, 2, 16, 8))
    ctx = BenchContext(out_dir=tmp_path, quick=True, progress=False)
    with registered(core=None):
        rows = _precision.positional_bf16_rows(ctx, mrt=1e-3)
    toy = [r for r in rows if r["method"] == "toy_rotary_bf16"]
    assert [r["mode"] for r in toy] == ["fwd", "fwd+bwd"], toy
    assert all(r["median_s"] > 0 and r["fp32_median_s"] > 0 and r["err_vs_bound"] <= 1.0 for r in toy)
    assert "toy_rotary_bf16_err_vs_bound" in _precision.bf16_ratios(rows)
