"""Experiment `fact-recall` on a device (issue 46 item 3): its jobs take RunContext.device, outside their recorded
signatures; device="cpu" computes exactly what a call without it does; on CUDA the SSFR point (one transformer
training and the recall measurement after the MLP swap) and the LM job (training, swap check, editing) agree with
the CPU run within the float32 training's rounding; a bad device is a ValueError naming the argument.

The kernels run the job functions themselves at tiny sizes: only the budgets are shrunk (GD MLP epochs, SSFR
steps, the LM's MLP steps and the editors' grids), so the device threading under test is the jobs' own."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from symformer._validation import check_device
from symformer.experiments.base import RunContext
from symformer.experiments.fact_recall import lm_runs, plan, runs, search
from symformer.facts.capacity import BuildOptions
from symformer.facts.lm import editing as fact_editing
from symformer.facts.lm.books_lm import LMConfig, build_lm
from symformer.facts.lm.recall import SSFRTrainConfig, build_recall_model

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

# Tolerances of a CUDA run against the CPU run. The model's initial weights, every batch and every fact MLP are
# drawn or built on the CPU in both runs, so they are identical; only the float32 arithmetic of the forward and
# backward passes (cuBLAS and SDPA kernels sum in another order than the CPU's) differs, by ~1e-6 relative per
# step. Over these short trainings (80 SSFR steps, 30 LM steps, AdamW from the same start on the same batches)
# that moves a final loss by far less than LOSS_RTOL, and an accuracy only where a sequence's top two logits
# nearly tie: ACC_ATOL allows 5% of the sequences to flip. The editors keep the best configuration of a grid,
# which may change on a near tie between two configurations: SCORE_ATOL.
LOSS_RTOL = 0.05
ACC_ATOL = 0.05
SCORE_ATOL = 0.1


@pytest.fixture(scope="module")
def tiny_budgets():
    """The jobs at tiny budgets: GD MLPs trained 400 epochs, SSFR 80 steps of 64, the LM's MLPs 300 steps, and the
    last two configurations of each editor's quick grid (with which every editor edits: its score is above 0.5)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs, "BuildOptions", lambda **kw: BuildOptions(**{**kw, "train_epochs": 400}))
        mp.setattr(
            runs,
            "ssfr_train_config",
            lambda quick, seed, paper_budget=False: SSFRTrainConfig(
                steps=80, batch_size=64, lr=3e-3, seed=seed, stop_accuracy=0.995, eval_every=40
            ),
        )
        mp.setattr(lm_runs, "LMConfig", functools.partial(LMConfig, mlp_steps=300))
        grid = fact_editing.grid_configs
        mp.setattr(fact_editing, "grid_configs", lambda method, quick: grid(method, quick)[-2:])
        yield


def ssfr_kernel(**device) -> dict:
    """One SSFR point: a GD SwiGLU pair storing f and f' (F = 32, d = 32, h = 64), the transformer trained with
    the first, the second swapped in and SSFR[f'] measured; with the Lipschitz estimate."""
    rec = runs.ssfr_point("gd-swiglu", 64, 32, 32, 0, True, lipschitz=True, **device)
    rec.pop("seconds")
    return rec


def lm_kernel(**device) -> dict:
    """The LM job: 16 books, d = 32, 30 steps, the swap check and editing at the 10% split."""
    rec = lm_runs.lm_run(16, 32, 64, 30, [0.1], 0, True, **device)
    for part in (rec, rec["train"]):
        part.pop("seconds")
    rec.pop("timing")
    return rec


@pytest.fixture(scope="module")
def cpu_reference(tiny_budgets):
    """What the jobs compute without a device argument (today's behaviour)."""
    return {"ssfr": ssfr_kernel(), "lm": lm_kernel()}


def close(got: float, want: float, rtol: float) -> bool:
    return math.isfinite(got) and abs(got - want) <= rtol * abs(want)


@pytest.mark.parametrize("device", DEVICES)
def test_ssfr_point_on_a_device_matches_the_cpu_run(device, cpu_reference):
    want, got = cpu_reference["ssfr"], ssfr_kernel(device=device)
    if device == "cpu":
        assert got == want  # the default: bit for bit
    assert want["trained"] and want["fact_adaptive_accuracy"] > 0.5  # a trained point, so the comparison tells
    # the MLPs are built and their Lipschitz estimate taken on the CPU: identical on every device
    for key in ("hidden", "params", "capacity", "capacity_new", "lipschitz", "trained"):
        assert got[key] == want[key], key
    assert close(got["train"]["final_loss"], want["train"]["final_loss"], LOSS_RTOL)
    assert got["train"]["steps"] == want["train"]["steps"]
    assert abs(got["train"]["train_accuracy"] - want["train"]["train_accuracy"]) <= ACC_ATOL
    assert abs(got["fact_adaptive_accuracy"] - want["fact_adaptive_accuracy"]) <= ACC_ATOL


@pytest.mark.parametrize("device", DEVICES)
def test_lm_job_on_a_device_matches_the_cpu_run(device, cpu_reference):
    want, got = cpu_reference["lm"], lm_kernel(device=device)
    if device == "cpu":
        assert got == want
    assert want["swap"]["new_fact_accuracy"] > 0.5  # a trained LM and editors that edit, so the comparison tells
    assert min(m["score"] for m in want["edits"]["0.1"]["methods"].values()) > 0.5
    assert got["mlp_capacity"] == want["mlp_capacity"]  # the fact MLPs are trained on the CPU
    assert close(got["train"]["final_loss"], want["train"]["final_loss"], LOSS_RTOL)
    gs, ws = got["swap"], want["swap"]
    assert gs["new_mlp_capacity"] == ws["new_mlp_capacity"]
    for key in ("train_fact_accuracy", "new_fact_accuracy"):
        assert abs(gs[key] - ws[key]) <= ACC_ATOL, key
    for key in ("nonfact_ce_before", "nonfact_ce_after"):
        assert close(gs[key], ws[key], LOSS_RTOL), key
    ge, we = got["edits"]["0.1"], want["edits"]["0.1"]
    assert {k: ge[k] for k in ("n_altered", "n_preserved", "new_mlp_capacity")} == {
        k: we[k] for k in ("n_altered", "n_preserved", "new_mlp_capacity")
    }
    assert sorted(ge["methods"]) == sorted(we["methods"]) == sorted(fact_editing.METHODS)
    for method, res in ge["methods"].items():
        assert res["n_configs"] == we["methods"][method]["n_configs"], method
        assert abs(res["score"] - we["methods"][method]["score"]) <= SCORE_ATOL, method


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "", 0, None])
def test_a_bad_device_is_refused_before_any_work(bad):
    """Every job checks its device first: the MLP builds before the first training can take an hour."""
    task_free = [
        lambda: runs.ssfr_point("gd-swiglu", 8, 8, 8, 0, True, device=bad),
        lambda: search.ssfr_search("gd-swiglu", 8, 8, 1, True, 2, 4, device=bad),
        lambda: search.usability_point(1.0, 0.0, 8, 8, 8, 0, True, device=bad),
        lambda: lm_runs.lm_run(4, 8, 8, 1, [], 0, True, device=bad),
        lambda: search.SSFR_SEARCH.on(bad)("gd-swiglu", 8, 8, 1, True, 2, 4),
        lambda: build_lm(None, LMConfig(), device=bad),
        lambda: build_recall_model(None, None, device=bad),
    ]
    for call in task_free:
        with pytest.raises(ValueError, match=r"^device: got .*, expected 'cpu' or 'cuda'"):
            call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_cuda_device_is_one_clear_line():
    with pytest.raises(ValueError, match=r"^device: got 'cuda', expected 'cpu' here: torch finds no CUDA device"):
        check_device("cuda")
    assert check_device("cpu") == "cpu"


def test_the_device_stays_out_of_the_recorded_signatures(tmp_path):
    """A CUDA run records, and --resume reuses, the jobs a CPU run would: the device rides on the job function."""
    options = {k: d for k, (d, _) in plan.OPTIONS.items()}

    def jobs(device: str) -> list:
        ctx = RunContext(out_dir=tmp_path, quick=False, device=device, options=options)
        return [*plan.ssfr_jobs(ctx), *plan.usability_jobs(ctx, 64), plan.lm_job(ctx), plan.top1_job(plan.lm_job(ctx))]

    cpu, gpu = jobs("cpu"), jobs("cuda")
    assert [j.signature() for j in gpu] == [j.signature() for j in cpu]
    assert {j.fn.device for j in gpu} == {"cuda"} and {j.fn.device for j in cpu} == {"cpu"}
    assert all(j.fn.takes_device for j in cpu)
