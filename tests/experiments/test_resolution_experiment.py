"""Tests of the `resolution` experiment: the configs of its methods, the rescaled learned table, one tiny run,
claims computed from the records (both verdicts reachable), and the quick run (slow)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch

from symformer.experiments import resolution
from symformer.experiments.base import RunContext
from symformer.experiments.resolution.runs import rescaled_learned
from symformer.models.transformer import attention_layers
from symformer.models.vit import ViTClassifier
from symformer.positional import LearnedPE


def test_methods_are_the_papers_parts():
    cfg = resolution.ResolutionConfig()
    rots = {}
    for m in resolution.METHODS:
        model = ViTClassifier(resolution.method_config(m, cfg), 16, 10, n_prefix=1)
        layers = attention_layers(model)
        rots[m] = layers[0].rotary
    assert rots["learned"] is None
    assert rots["rope_mixed"].mode == "mixed" and rots["rope_mixed"].beta.shape == (2, 8, 2)
    assert rots["rope_mixed"].beta.requires_grad
    assert rots["rope_axial"].axis_layout == "blocks" and not rots["rope_axial"].beta.requires_grad
    assert rots["string"].rope.mode == "mixed" and rots["string"].rope.beta.shape == (2, 8, 2)
    with pytest.raises(ValueError, match="methods"):
        resolution.ResolutionConfig(methods=("rope",))


def test_rescaled_learned_table_interpolates_the_trained_rows():
    cfg = resolution.ResolutionConfig()
    torch.manual_seed(0)
    model = ViTClassifier(resolution.method_config("learned", cfg), 16, 10)
    same = rescaled_learned(model, 4, 4)
    pe, pe2 = (next(m for m in x.modules() if isinstance(m, LearnedPE)) for x in (model, same))
    assert torch.equal(pe2.tables, pe.tables[:, :4])
    big = next(m for m in rescaled_learned(model, 8, 4).modules() if isinstance(m, LearnedPE))
    assert torch.allclose(big.tables[:, 1], (pe.tables[:, 0] + pe.tables[:, 1]) / 2)  # row 1 at position 0.5
    assert big.max_len == 8 and torch.equal(big.tables[:, 2], pe.tables[:, 1])


def _fake(acc_mixed: float, acc_other: float, seeds=3) -> dict:
    def run(a, s):
        acc = {str(z): a + 0.01 * s for z in (8, 12, 16, 20, 24)}
        return {"accuracy": {"own": acc, "rescaled": acc}, "val_accuracy": a}

    return {
        "rope_mixed": [run(acc_mixed, s) for s in range(seeds)],
        "rope_axial": [run(acc_other, s) for s in range(seeds)],
        "learned": [run(acc_other - 0.1, s) for s in range(seeds)],
    }


def test_claims_come_from_the_numbers():
    cfg = resolution.ResolutionConfig(methods=("rope_mixed", "rope_axial", "learned"))
    noisy = _fake(0.8, 0.6)
    noisy["rope_axial"][0]["accuracy"]["own"] = {
        k: v + 0.05 for k, v in noisy["rope_axial"][0]["accuracy"]["own"].items()
    }
    verdicts = {c.id: c.verdict for c in resolution.claims(noisy, cfg)}
    assert verdicts == {"RES.1": "holds", "RES.2": "holds"}
    worse = _fake(0.5, 0.6)
    worse["rope_mixed"][1]["accuracy"]["own"] = {
        k: v - 0.02 for k, v in worse["rope_mixed"][1]["accuracy"]["own"].items()
    }
    verdicts = {c.id: c.verdict for c in resolution.claims(worse, cfg)}
    assert verdicts == {"RES.1": "fails", "RES.2": "fails"}
    one = {k: v[:1] for k, v in _fake(0.8, 0.6).items()}
    assert {c.verdict for c in resolution.claims(one, replace(cfg, seeds=(0,)))} == {"inconclusive"}


def test_one_tiny_run_records_every_grid_both_ways():
    cfg = resolution.ResolutionConfig(steps=3, batch=32, eval_sizes=(12, 16, 20))
    cd = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    for method in ("rope_mixed",):  # learned PE's rescaled path: test_rescaled_learned_table_...
        rec = resolution.vit_job(method, 0, cd)
        assert set(rec["accuracy"]) == {"own", "rescaled"}
        assert set(rec["accuracy"]["own"]) == {"12", "16", "20"}
        assert all(0.0 <= v <= 1.0 for r in rec["accuracy"].values() for v in r.values())
        assert rec["accuracy"]["own"]["16"] == rec["accuracy"]["rescaled"]["16"]  # the training grid: no change


@pytest.mark.slow
def test_quick_run_writes_results(tmp_path):
    from symformer.results import write_experiment

    ctx = RunContext(out_dir=tmp_path / "resolution", quick=True, progress=False)
    res = resolution.run(ctx)
    write_experiment(ctx.out_dir, "resolution", True, res)
    data = json.loads((ctx.out_dir / "results.json").read_text())
    assert set(data["metrics"]["resolution_accuracy"]["own"]) == {"rope_mixed", "learned"}
    assert (ctx.out_dir / "accuracy_vs_grid.png").is_file()
    assert len(list((ctx.out_dir / "runs").glob("vit_*.json"))) == 2  # one record per (method, seed)
