"""`train --preset NAME [--config FILE] [--set key.sub=value ...]`, OUT/config.json, `reproduce --set`."""

import json

import pytest

from symformer import cli
from symformer.experiments import base as ebase
from symformer.results import ExperimentResult
from symformer.train.presets import PRESETS, parse_set, resolve


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_parse_set_json_else_string():
    assert parse_set("train.lr=3e-3") == (["train", "lr"], 0.003)
    assert parse_set("model.positional=rope") == (["model", "positional"], "rope")
    assert parse_set("train.grad_clip=null") == (["train", "grad_clip"], None)
    assert parse_set('model.attention_kwargs={"M": 8}') == (["model", "attention_kwargs"], {"M": 8})
    assert parse_set("data.filename=a=b.csv") == (["data", "filename"], "a=b.csv")
    for bad in ("train.lr", "train..lr=1", ".x=1"):
        with pytest.raises(ValueError, match="--set"):
            parse_set(bad)


def test_order_preset_then_config_then_set():
    cfg = {"train": {"lr": 0.5, "epochs": 2}, "model": {"d_model": 32}}
    spec = resolve("digits-vit", cfg, ["train.lr=0.25", "model.attention_kwargs.M=4", "train.lr=0.125"])
    assert spec["train"]["lr"] == 0.125 and spec["train"]["epochs"] == 2  # set wins, later set wins
    assert spec["train"]["batch_size"] == PRESETS["digits-vit"]["train"]["batch_size"]  # preset kept
    assert spec["model"]["d_model"] == 32 and spec["model"]["attention_kwargs"] == {"M": 4}
    assert PRESETS["digits-vit"]["train"]["lr"] == 3e-3  # the preset itself untouched


@pytest.mark.parametrize(
    "sets, part",
    [
        (["train.lrr=0.1"], "unknown key 'train.lrr'; did you mean train.lr?"),
        (["modl.d_model=8"], "unknown key 'modl.d_model'; did you mean model.d_model?"),
        (["data.pach=4"], "unknown key 'data.pach'; did you mean data.patch?"),
        (["tsk=digits"], "unknown key 'tsk'; did you mean task?"),
    ],
)
def test_unknown_key_names_closest(capsys, tmp_path, sets, part):
    argv = ["train", "--preset", "digits-vit", "--out", tmp_path / "o"]
    for s in sets:
        argv += ["--set", s]
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and part in err and "--set:" in err
    assert not (tmp_path / "o").exists()  # rejected before any work


def test_unknown_key_in_config_file(capsys, tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"task": "digits", "model": {"dmodel": 8}}))
    code, _, err = run(capsys, "train", "--config", tmp_path / "c.json", "--out", tmp_path / "o")
    assert code == 2 and "config: unknown key 'model.dmodel'; did you mean model.d_model?" in err


def test_config_json_repeats_the_run(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    sets = [
        "--set",
        "train.epochs=1",
        "--set",
        "model.d_model=16",
        "--set",
        "model.n_heads=2",
        "--set",
        "model.n_layers=1",
        "--set",
        "train.warmup_steps=5",
    ]
    code, out_a, err = run(capsys, "train", "--preset", "digits-vit", *sets, "--seed", 3, "--out", a)
    assert code == 0, err
    spec = json.loads((a / "config.json").read_text())
    assert spec["train"]["seed"] == 3 and spec["model"]["d_model"] == 16 and spec["task"] == "digits"
    code, out_b, err = run(capsys, "train", "--config", a / "config.json", "--out", b)
    assert code == 0, err
    assert json.loads((b / "config.json").read_text()) == spec
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (a, b))
    assert ra["metrics"] == rb["metrics"] and ra["history"] == rb["history"]


def test_train_needs_preset_or_config(capsys):
    code, _, err = run(capsys, "train")
    assert code == 2 and "--preset" in err and "--config" in err


# ---------------------------------------------------------------- reproduce --set
@pytest.fixture
def optioned(monkeypatch):
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)
    seen = {}

    @ebase.experiment(
        "knobs", "has options", options={"steps": (10, "steps"), "rate": (0.5, "a rate"), "mode": ("fast", "a mode")}
    )
    def knobs(ctx):
        seen["knobs"] = dict(ctx.options)
        return ExperimentResult(metrics={"steps": ctx.options["steps"]})

    @ebase.experiment("plain", "no options")
    def plain(ctx):
        seen["plain"] = dict(ctx.options)
        return ExperimentResult()

    return seen


def test_reproduce_set_applies_and_records(capsys, tmp_path, optioned):
    code, _, err = run(
        capsys, "reproduce", "knobs", "plain", "--set", "knobs.steps=3", "--set", "knobs.rate=1", "--out", tmp_path
    )
    assert code == 0, err
    assert optioned == {"knobs": {"steps": 3, "rate": 1.0, "mode": "fast"}, "plain": {}}
    res = json.loads((tmp_path / "knobs" / "results.json").read_text())
    assert res["metrics"]["steps"] == 3 and res["config"]["options"]["steps"] == 3
    code, _, _ = run(capsys, "reproduce", "knobs", "--set", "mode=slow", "--out", tmp_path)  # one experiment: no prefix
    assert code == 0 and optioned["knobs"]["mode"] == "slow"


def test_direct_call_gets_defaults(optioned, tmp_path):
    ebase.EXPERIMENTS.get("knobs").fn(ebase.RunContext(out_dir=tmp_path))
    assert optioned["knobs"] == {"steps": 10, "rate": 0.5, "mode": "fast"}


@pytest.mark.parametrize(
    "argv, part",
    [
        (["knobs", "--set", "knobs.stesp=3"], "unknown option knobs.stesp"),
        (["knobs", "--set", "knobs.stesp=3"], "did you mean knobs.steps?"),
        (["knobs", "--set", "knobs.steps=fast"], "expected an integer like the default 10"),
        (["plain", "--set", "plain.steps=3"], "(this experiment has no options)"),
        (["plain", "--set", "knobs.steps=3"], "this call does not run knobs"),
        (["knobs", "--set", "knbos.steps=3"], "did you mean knobs?"),
        (["knobs", "plain", "--set", "steps=3"], "expected EXPERIMENT.option=value"),
    ],
)
def test_reproduce_bad_set_one_line(capsys, tmp_path, optioned, argv, part):
    code, _, err = run(capsys, "reproduce", *argv, "--out", tmp_path / "o")
    assert code == 2 and err.count("\n") == 1 and part in err, err
    assert not optioned and not (tmp_path / "o").exists()  # before any work


def test_reproduce_list_shows_options(capsys, optioned):
    code, out, _ = run(capsys, "reproduce", "--list")
    assert code == 0 and "--set knobs.steps=10" in out


def test_plash_declares_quick_epochs():
    spec = ebase.load_all().get("plash")
    assert spec.resolve_options({"quick_epochs": 5}) == {"quick_epochs": 5, "quick_train_windows": 1024}


def test_experiment_needing_a_missing_extra_is_skipped_or_named(capsys, tmp_path, monkeypatch):
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)
    ran = []

    @ebase.experiment("needs", "needs a module that is not installed", requires={"no_such_module_xyz": "hf"})
    def needs(ctx):
        ran.append("needs")
        return ExperimentResult()

    @ebase.experiment("plain", "no requirement")
    def plain(ctx):
        ran.append("plain")
        return ExperimentResult()

    # all experiments: the one missing its extra is skipped with the reason, the others run
    code, _, _ = run(capsys, "reproduce", "--out", tmp_path / "all")
    assert code == 0 and ran == ["plain"]
    assert "needs no_such_module_xyz (pip install 'symformer[hf]')" in (tmp_path / "all" / "report.md").read_text()
    # named explicitly: one line, exit 2, nothing run
    code, _, err = run(capsys, "reproduce", "needs", "--out", tmp_path / "one")
    assert code == 2 and err.count("\n") == 1 and "experiment needs: needs no_such_module_xyz" in err
    assert ran == ["plain"]


def test_config_toml_reads_as_its_json(tmp_path):
    """`--config x.toml` (tomllib from Python 3.11, tomli before) gives the dict the same config as JSON gives;
    bad TOML is a ValueError naming --config."""
    from symformer.train.presets import load_config

    spec = {"task": "digits", "model": {"d_model": 16, "n_heads": 2}, "train": {"epochs": 1, "lr": 0.001}}
    (tmp_path / "c.json").write_text(json.dumps(spec))
    (tmp_path / "c.toml").write_text(
        'task = "digits"\n[model]\nd_model = 16\nn_heads = 2\n[train]\nepochs = 1\nlr = 0.001\n'
    )
    assert load_config(tmp_path / "c.toml") == load_config(tmp_path / "c.json") == spec
    (tmp_path / "bad.toml").write_text("task = \n")
    with pytest.raises(ValueError, match="--config.*valid TOML"):
        load_config(tmp_path / "bad.toml")
