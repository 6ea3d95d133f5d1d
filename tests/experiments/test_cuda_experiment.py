"""A quick experiment on the GPU (issue 46 item 3): `extrapolation --quick` with device cuda trains and scores its
LMs there and reaches the CPU run's verdicts. Skipped without CUDA (tests/conftest.py)."""

from __future__ import annotations

import math

import pytest

from symformer.experiments.base import RunContext, load_all


@pytest.mark.cuda
def test_quick_extrapolation_on_cuda_matches_the_cpu_verdicts(tmp_path, data_dir):
    spec = load_all().get("extrapolation")
    runs = {}
    for device in ("cpu", "cuda"):
        ctx = RunContext(out_dir=tmp_path / device, quick=True, data_dir=data_dir, device=device, progress=False)
        runs[device] = spec.fn(ctx)
    cpu, gpu = runs["cpu"], runs["cuda"]
    assert [c.verdict for c in gpu.claims] == [c.verdict for c in cpu.claims]
    for part, row in gpu.metrics["extrapolation_bpc"].items():
        for ctx_len, cell in row.items():
            want = cpu.metrics["extrapolation_bpc"][part][ctx_len]["mean"]
            assert math.isfinite(cell["mean"]) and abs(cell["mean"] - want) <= 0.05 * want, (part, ctx_len)
