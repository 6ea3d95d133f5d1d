"""Tests of the `extrapolation` experiment: context checks, the bpc evaluation, N/A handling and the summaries."""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest
import torch

from symformer.experiments import extrapolation
from symformer.experiments.base import RunContext, load_all


def _lm(part: str, **kw):
    cfg = extrapolation.ExtrapolationConfig(d_model=16, n_heads=2, n_layers=1, **kw)
    torch.manual_seed(0)
    return extrapolation.build_lm(part, cfg, vocab_size=11)


@pytest.mark.parametrize("bad", [64.0, 64.5, -1, 0, "64", True, None])
def test_bad_lengths_are_value_errors(bad):
    with pytest.raises(ValueError, match=r"context: got .*expected a positive integer"):
        extrapolation.check_context(_lm("rope"), bad)
    with pytest.raises(ValueError, match="eval_contexts"):
        extrapolation.ExtrapolationConfig(eval_contexts=(64, bad))


def test_context_past_the_learned_table_names_both_lengths():
    model = _lm("learned")
    assert extrapolation.max_context(model) == 64 and extrapolation.check_context(model, 64) == 64
    with pytest.raises(
        ValueError,
        match=r"context: got 128, expected at most 64 \(the learned positional table has "
        r"max_len=64",
    ):
        extrapolation.check_context(model, 128)
    ids = torch.randint(0, 11, (300,))
    with pytest.raises(ValueError, match="got 256"):
        extrapolation.context_bpc(model, ids, 256, 256)
    for part in ("none", "sinusoidal", "rope", "string", "circulant_string", "espr"):
        assert extrapolation.max_context(_lm(part)) is None, part
        assert extrapolation.check_context(_lm(part), 4096) == 4096


def test_context_bpc_matches_a_direct_computation():
    model = _lm("rope").eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 11, (97,), generator=g)
    got = extrapolation.context_bpc(model, ids, 32, 96, batch=2)
    nats = 0.0
    for s in range(0, 96, 32):
        with torch.no_grad():
            logits = model(ids[s : s + 32][None])[0]
        nats += float(torch.nn.functional.cross_entropy(logits, ids[s + 1 : s + 33], reduction="sum"))
    assert got == pytest.approx(nats / 96 / math.log(2), rel=1e-6)
    with pytest.raises(ValueError, match="n_chars"):
        extrapolation.context_bpc(model, ids, 32, 90)  # not a multiple of the context
    with pytest.raises(ValueError, match="n_chars"):
        extrapolation.context_bpc(model, ids, 32, 128)  # more characters than there are


def test_validation_ids_are_the_contiguous_split():
    from symformer.data.text import windows

    ids = torch.arange(1000)
    val = windows(ids[100:400], 64, 64)
    out = extrapolation.validation_ids(val)
    assert torch.equal(out, ids[100 : 100 + len(out)]) and len(out) == 4 * 64 + 1


def _run(part, seed, b64, b512, na=False):
    bpc = {"64": b64, "128": None if na else b64, "512": None if na else b512}
    reason = "context: got 512, expected at most 64 (the learned positional table has max_len=64 positions; ...)"
    return {"part": part, "seed": seed, "bpc": bpc, "na": {"128": reason, "512": reason} if na else {}}


def test_summaries_and_claims_on_synthetic_runs():
    cfg = extrapolation.ExtrapolationConfig(
        parts=("rope", "string", "learned", "none"), seeds=(0, 1, 2), eval_contexts=(64, 128, 512)
    )
    runs = {
        "rope": [_run("rope", s, 2.0, 1.9 + 0.01 * s) for s in range(3)],  # clearly better at 512 -> holds
        "string": [_run("string", s, 2.0, 2.5 + 0.01 * s) for s in range(3)],  # clearly worse -> fails
        "learned": [_run("learned", s, 2.0, None, na=True) for s in range(3)],
        "none": [_run("none", s, 2.0, 2.0 + (0.1 if s == 1 else -0.1)) for s in range(3)],
    }  # within 2 SE
    table, ratio = extrapolation.summarize(runs, cfg.eval_contexts)
    assert table["rope"]["512"]["mean"] == pytest.approx(1.91)
    assert table["rope"]["512"]["se"] == pytest.approx(0.01 / math.sqrt(3))
    assert table["learned"]["512"] == {"mean": None, "se": None, "na": runs["learned"][0]["na"]["512"]}
    assert table["learned"]["64"]["mean"] == 2.0
    assert ratio["rope"] == pytest.approx(1.91 / 2.0) and ratio["learned"] is None
    by = {c.id: c for c in extrapolation.claims(runs, cfg)}
    assert [by[f"EXT.{p}"].verdict for p in ("rope", "string", "learned", "none")] == [
        "holds",
        "fails",
        "inconclusive",
        "inconclusive",
    ]
    assert by["EXT.learned"].measured.startswith("N/A: context: got 512")
    for c in by.values():
        assert c.setting.startswith("ours:") and "no paper" in c.paper_setting
    one = {"rope": runs["rope"][:1]}
    assert extrapolation.claims(one, cfg)[0].verdict == "inconclusive"  # one seed: no standard error


def test_plot_writes_a_figure(tmp_path):
    table = {
        "rope": {"64": {"mean": 2.0, "se": 0.1}, "512": {"mean": 2.2, "se": float("nan")}},
        "learned": {"64": {"mean": 2.1, "se": 0.1}, "512": {"mean": None, "se": None, "na": "x"}},
    }
    extrapolation.plot(table, (64, 512), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_lm_job_tiny_learned_part_reports_na(tmp_path, data_dir):
    text = (data_dir / "tinyshakespeare.txt").read_text(encoding="utf-8")[:6000]
    (tmp_path / "tinyshakespeare.txt").write_text(text, encoding="utf-8")
    cfg = extrapolation.ExtrapolationConfig(
        parts=("learned",), seeds=(0,), steps=2, batch=4, d_model=8, n_heads=2, n_layers=1, eval_contexts=(64, 128)
    )
    cd = json.loads(json.dumps(asdict(cfg)))
    out = extrapolation.lm_job("learned", 0, cd, str(tmp_path))
    assert math.isfinite(out["bpc"]["64"]) and out["bpc"]["128"] is None
    assert "got 128" in out["na"]["128"] and "max_len=64" in out["na"]["128"]
    assert out["n_chars"] % 128 == 0 and out["n_chars"] > 0
    rope = extrapolation.lm_job("rope", 0, cd, str(tmp_path))
    assert all(math.isfinite(v) for v in rope["bpc"].values()) and rope["na"] == {}


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(parts=("foo",)), "parts"),
        (dict(parts=()), "parts"),
        (dict(seeds=(-1,)), "seeds"),
        (dict(steps=0), "steps"),
        (dict(lr=0.0), "lr"),
        (dict(eval_chars=10), "eval_chars"),
    ],
)
def test_config_bad_input(kw, name):
    with pytest.raises(ValueError, match=name):
        extrapolation.ExtrapolationConfig(**kw)


def test_registered_with_its_data_file():
    spec = load_all().get("extrapolation")
    assert spec.data_files == ("tinyshakespeare.txt",)
    q = extrapolation.config_for(True)
    assert q.parts == ("rope", "string") and q.seeds == (0,)
    f = extrapolation.config_for(False)
    assert (
        f.parts == extrapolation.PARTS
        and len(f.seeds) == 3
        and f.eval_contexts == (64, 128, 256, 512)
        and f.train_context == 64
    )


@pytest.mark.slow
def test_quick_run_writes_results(tmp_path, data_dir):
    from symformer.results import write_experiment

    ctx = RunContext(out_dir=tmp_path / "extrapolation", quick=True, data_dir=data_dir, progress=False)
    res = extrapolation.run(ctx)
    write_experiment(ctx.out_dir, "extrapolation", True, res)
    data = json.loads((ctx.out_dir / "results.json").read_text())
    assert set(data["metrics"]["extrapolation_bpc"]) == {"rope", "string"}
    assert set(data["metrics"]["extrapolation_ratio_512"]) == {"rope", "string"}
    assert (ctx.out_dir / "bpc_vs_length.png").is_file()
