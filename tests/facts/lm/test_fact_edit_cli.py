"""`symformer facts edit`: MLP swapping from the command line (fact-storing-mlps.txt Sec. 5.4)."""

import json

import pytest
import torch

from symformer.cli import main
from symformer.facts import build_fact_mlp
from symformer.facts.lm.checkpoint import load_fact_model, parse_edits, save_fact_model
from symformer.facts.lm.recall import SSFRTrainConfig, build_recall_model, train_ssfr
from symformer.facts.lm.ssfr import make_ssfr

ARGS = dict(n_facts=32, d=32, seed=0)
BUILD = {"method": "gd-swiglu", "size": 32}


def _model(train: bool):
    torch.manual_seed(0)
    t = make_ssfr(**ARGS)
    K, V = t.mlp_embeddings()
    model = build_recall_model(t, build_fact_mlp(K, V, t.facts, "gd-swiglu", h=32))
    if train:
        train_ssfr(model, t, SSFRTrainConfig(steps=300, batch_size=64, lr=3e-3, eval_every=50))
    return model, t


@pytest.fixture(scope="module")
def trained_ckpt(tmp_path_factory):
    model, t = _model(True)
    path = tmp_path_factory.mktemp("ck") / "model.pt"
    save_fact_model(path, model, "ssfr", ARGS, t.facts, BUILD)
    return path, t, model


def test_checkpoint_round_trip(trained_ckpt):
    path, t, ref = trained_ckpt
    model, task, ck = load_fact_model(path)
    assert torch.equal(task.facts, t.facts) and ck["mlp_build"] == BUILD
    tok, mask, _ = t.batch(torch.arange(4), torch.arange(4))
    assert torch.allclose(model(tok, mask, last_only=True), ref(tok, mask, last_only=True), atol=1e-5)


def test_edit_swaps_and_writes(trained_ckpt, tmp_path, capsys):
    path, t, _ = trained_ckpt
    new = [["k1", f"v{int(t.facts[2])}"], ["k2", f"v{int(t.facts[1])}"]]
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = tmp_path / "edited.pt"
    rc = main(
        [
            "facts",
            "edit",
            "--model",
            str(path),
            "--facts",
            str(tmp_path / "new.json"),
            "--out",
            str(out),
            "--min-accuracy",
            "0.9",
        ]
    )
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out.is_file()
    assert report["n_changed"] == 2 and report["edited_accuracy"] >= 0.9
    _, task, _ = load_fact_model(out)
    assert int(task.facts[1]) == int(t.facts[2]) and int(task.facts[2]) == int(t.facts[1])


def test_edit_refuses_an_mlp_that_does_not_store(tmp_path, capsys):
    model, t = _model(False)
    path = tmp_path / "model.pt"
    save_fact_model(path, model, "ssfr", ARGS, t.facts, {"method": "bin+jl", "size": 1})  # m = 1 cannot store 32 facts
    (tmp_path / "new.json").write_text(json.dumps([["k1", "v5"]]))
    out = tmp_path / "edited.pt"
    rc = main(["facts", "edit", "--model", str(path), "--facts", str(tmp_path / "new.json"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "recalls" in err and "stores" in err and "was not written" in err and len(err.strip().splitlines()) == 1


def test_unknown_keys_and_double_values_are_listed():
    t = make_ssfr(**ARGS)
    with pytest.raises(
        ValueError, match=r"unknown key 'nope', value 'v99'.*keys with two values: 'k1' -> 'v1' and 'v2'"
    ):
        parse_edits([["nope", "v1"], ["k0", "v99"], ["k1", "v1"], ["k1", "v2"]], t)
    assert parse_edits([[3, 4], ["k3", "v4"]], t) == {3: 4}


def test_cli_rejects_bad_edit_file_in_one_line(trained_ckpt, tmp_path, capsys):
    path, _, _ = trained_ckpt
    (tmp_path / "bad.json").write_text(json.dumps([["k1", "v1"], ["k1", "v2"]]))
    rc = main(
        ["facts", "edit", "--model", str(path), "--facts", str(tmp_path / "bad.json"), "--out", str(tmp_path / "o.pt")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "keys with two values" in err and len(err.strip().splitlines()) == 1


class _Evil:
    def __reduce__(self):
        return (open, ("/nonexistent-symformer-test", "r"))


def test_edit_never_unpickles_a_crafted_checkpoint(tmp_path, capsys):
    bad = tmp_path / "evil.pt"
    torch.save({"x": _Evil()}, bad)
    (tmp_path / "new.json").write_text("[]")
    rc = main(
        ["facts", "edit", "--model", str(bad), "--facts", str(tmp_path / "new.json"), "--out", str(tmp_path / "o.pt")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "never runs code" in err and len(err.strip().splitlines()) == 1


def test_edit_rejects_a_torch_file_from_elsewhere(tmp_path, capsys):
    other = tmp_path / "other.pt"
    torch.save({"a": torch.zeros(2)}, other)
    (tmp_path / "new.json").write_text("[]")
    rc = main(
        ["facts", "edit", "--model", str(other), "--facts", str(tmp_path / "new.json"), "--out", str(tmp_path / "o.pt")]
    )
    assert rc == 2 and "--model" in capsys.readouterr().err
