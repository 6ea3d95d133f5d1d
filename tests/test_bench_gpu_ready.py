"""The `gpu_ready` suite (benchmarks/gpu_ready.py) on a 1-layer model: every ratio of issue 57 is there and is a
number, a failing measurement is a recorded row error, not a crash. The dynamo-based counters are replaced by
stubs in the fast tests (test_profiling.py tests them; each trace of the model takes seconds on 2 cores); the
slow test runs them for real."""

from __future__ import annotations

import dataclasses
import math

import pytest
from tests.integrations._hf_models import transformers_or_skip

transformers_or_skip()

from symformer.benchmarks import gpu_ready  # noqa: E402
from symformer.benchmarks.base import SUITES, BenchContext, load_all  # noqa: E402
from symformer.profiling import CompileCounts  # noqa: E402

CPU_RATIOS = (
    "host_syncs_decode_max",
    "host_syncs_train_max",
    "graph_breaks_decode_max",
    "graph_breaks_train_max",
    "recompiles_decode_256_max",
    "ops_decode_vs_native_rotary_max",
    "ops_decode_vs_native_core_max",
)


def _no_compiles(step, calls):
    for _ in range(calls):
        step()
    return CompileCounts(first_call_graphs=1, recompiles=0, break_reasons=[])


@pytest.fixture
def stub_dynamo(monkeypatch):
    monkeypatch.setattr(gpu_ready, "graph_breaks", lambda fn: (fn(), [])[1])
    monkeypatch.setattr(gpu_ready, "compile_counts", lambda step, calls: _no_compiles(step, calls))
    monkeypatch.setattr(gpu_ready.torch, "compile", lambda model, **kw: model)


def _ctx(tmp_path):
    return BenchContext(out_dir=tmp_path, quick=True, progress=False)


def test_registered_and_in_quick_runs():
    spec = load_all().get("gpu_ready")
    assert not spec.by_name_only  # `symformer bench --quick` with no names runs it
    assert SUITES.get("gpu_ready") is spec


def test_tiny_suite_reports_every_ratio(tmp_path, stub_dynamo):
    res = gpu_ready.measure(_ctx(tmp_path), gpu_ready.GpuReadyPlan.tiny())
    assert set(CPU_RATIOS) <= set(res.ratios)
    for name in CPU_RATIOS:
        value = res.ratios[name]
        assert isinstance(value, (int, float)) and math.isfinite(value), (name, value)
    assert not any("decode_compiled" in k or "sync_debug" in k for k in res.ratios)  # GPU-only ratios
    rows = {(r["part"], r["core"]): r for r in res.rows}
    assert set(rows) == set(gpu_ready.GpuReadyPlan.tiny().rows)
    for row in rows.values():
        assert not row.get("errors"), row
        assert row["aten_ops_decode"] > 0 and row["aten_ops_train"] > row["aten_ops_decode"]
        assert "host_syncs_decode_cpu_default" in row  # the CPU's default mode, for information
    assert "graph_breaks_decode" in rows["rope", "sdpa"] and "graph_breaks_decode" not in rows["native", "sdpa"]
    assert any("value_checks('never')" in n for n in res.notes)


def test_a_failing_measurement_is_recorded(tmp_path, stub_dynamo, monkeypatch):
    def explain_fails(fn):
        raise RuntimeError("dynamo could not trace this\nsecond line")

    def compile_fails(step, calls):
        raise TypeError("cannot compile")

    monkeypatch.setattr(gpu_ready, "graph_breaks", explain_fails)
    monkeypatch.setattr(gpu_ready, "compile_counts", compile_fails)
    plan = dataclasses.replace(gpu_ready.GpuReadyPlan.tiny(), rows=(("native", "sdpa"),), compile_rows=None)
    res = gpu_ready.measure(_ctx(tmp_path), plan)
    (row,) = res.rows
    assert row["graph_breaks_train"] is None and row["graph_breaks_decode"] is None and row["recompiles_decode"] is None
    assert row["errors"]["graph_breaks_train"] == "RuntimeError: dynamo could not trace this"
    assert row["errors"]["graph_breaks_decode"] == "TypeError: cannot compile"
    for name in ("graph_breaks_decode_max", "graph_breaks_train_max", "recompiles_decode_256_max"):
        assert res.ratios[name] == math.inf  # an unmeasured row never reads as at goal
    assert res.ratios["host_syncs_decode_max"] == 0


def test_a_model_that_cannot_be_built_is_a_row_error(tmp_path, monkeypatch):
    def no_model(*args, **kwargs):
        raise ValueError("part: got 'x', expected one of rope, string")

    monkeypatch.setattr(gpu_ready, "build_model", no_model)
    res = gpu_ready.measure(_ctx(tmp_path), gpu_ready.GpuReadyPlan.tiny())
    assert all(r["errors"] == {"model": "ValueError: part: got 'x', expected one of rope, string"} for r in res.rows)
    assert res.ratios["host_syncs_decode_max"] == res.ratios["ops_decode_vs_native_core_max"] == math.inf


def test_gpu_ratios_from_rows(monkeypatch):
    # the cores the suite knows: sdpa and the registered decoding cores, fixed here (a plugin may register more)
    monkeypatch.setattr(gpu_ready, "CORES", ("sdpa", "favor", "plash"))
    rows = [
        {"part": "native", "core": "sdpa", "decode_compiled_s": 2.0, "sync_debug_error_ok": 1},
        {"part": "rope", "core": "sdpa", "decode_compiled_s": 2.2, "sync_debug_error_ok": 0},
    ]
    contexts = [
        {"part": "native", "core": c, "context": n, "decode_s": t}
        for n, times in ((1024, (4.0, 8.0, 6.0)), (16384, (12.0, 3.0, None)))
        for c, t in zip(gpu_ready.CORES, times)
    ]
    r = gpu_ready.gpu_ratios(rows, contexts)
    assert r["decode_compiled_vs_native[rope]"] == pytest.approx(1.1)
    assert r["favor_decode_vs_sdpa_1k"] == 2.0 and r["plash_decode_vs_sdpa_1k"] == 1.5
    assert r["favor_decode_vs_sdpa_16k"] == 0.25 and r["plash_decode_vs_sdpa_16k"] == math.inf
    assert r["sync_debug_error_decode_ok"] == 0.0


def test_gpu_rows_run_with_a_stubbed_device(stub_dynamo, monkeypatch):
    """The GPU-only rows' code on the CPU: sync-debug mode and CUDA-graph steps stubbed, compile = identity."""
    modes = []
    monkeypatch.setattr(gpu_ready.torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(gpu_ready.torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(gpu_ready.torch.compiler, "cudagraph_mark_step_begin", lambda: None)
    plan = gpu_ready.GpuReadyPlan.tiny()
    rows = [{"part": "native", "core": "sdpa"}, {"part": "rope", "core": "sdpa"}]
    for row in rows:
        gpu_ready.time_row(row, plan, "cpu", 0)
        assert not row.get("errors"), row
        assert row["decode_eager_s"] > 0 and row["decode_compiled_s"] > 0 and row["sync_debug_error_ok"] == 1
    assert modes == ["error", 0, "error", 0]  # set for one step, then restored
    contexts = gpu_ready.context_rows(plan, "cpu", 0)
    assert [(r["core"], r["context"]) for r in contexts] == [(c, 32) for c in gpu_ready.CORES]
    ratios = gpu_ready.gpu_ratios(rows, contexts)
    assert {"decode_compiled_vs_native[rope]", "favor_decode_vs_sdpa_32", "sync_debug_error_decode_ok"} <= set(ratios)
    assert all(isinstance(v, float) and math.isfinite(v) for v in ratios.values()), ratios


@pytest.mark.slow
def test_tiny_suite_with_dynamo(tmp_path):
    res = gpu_ready.measure(_ctx(tmp_path), gpu_ready.GpuReadyPlan.tiny())
    for name in CPU_RATIOS:
        assert isinstance(res.ratios[name], (int, float)), (name, res.ratios[name])
    row = next(r for r in res.rows if r["part"] == "rope")
    assert isinstance(row["recompiles_decode"], int) and isinstance(row["graph_breaks_train"], int)
