"""A failed `train --resume` rewrites nothing in --out, and a failed run leaves no --out folder it created (issue 58
item 5). Both fail on the code before: config.json was written before the checkpoint was refused, and --out was
created before the first error."""

import json

from symformer import cli


def _run(capsys, *argv):
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_refused_resume_keeps_config_json(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    old = {"task": "digits", "model": {"d_model": 8, "n_heads": 2, "n_layers": 1}, "note": "the run's own config"}
    (out / "config.json").write_text(json.dumps(old))
    (out / "checkpoint.pt").write_bytes(b"not a checkpoint")
    cfg = {"task": "digits", "model": {"d_model": 16, "n_heads": 2, "n_layers": 1}, "train": {"epochs": 1}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    code, err = _run(capsys, "train", "--config", str(tmp_path / "c.json"), "--out", str(out), "--resume")
    assert code == 2 and err.startswith("error: --resume:")
    assert json.loads((out / "config.json").read_text()) == old
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "config.json"]


def test_failed_run_leaves_no_out_folder(capsys, tmp_path):
    cfg = {"task": "digits", "model": {"d_model": 10, "n_heads": 3, "n_layers": 1}, "train": {"epochs": 1}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))  # refused when the model is built, after --out is checked
    out = tmp_path / "new" / "deeper"
    code, err = _run(capsys, "train", "--config", str(tmp_path / "c.json"), "--out", str(out))
    assert code == 2 and err.startswith("error:")
    assert not (tmp_path / "new").exists()


def test_failed_bench_leaves_no_out_folder(capsys, tmp_path, monkeypatch):
    from symformer import benchmarks
    from symformer.benchmarks.base import SuiteSpec
    from symformer.registry import Registry

    def boom(ctx):
        raise ValueError("size: got 0, expected an integer >= 1")

    reg = Registry("benchmark suite")
    reg.register("boom")(SuiteSpec("boom", boom, "fails at once"))
    monkeypatch.setattr(benchmarks, "load_all", lambda: reg)
    code, err = _run(capsys, "bench", "boom", "--out", str(tmp_path / "b"))
    assert code == 2 and "size" in err
    assert not (tmp_path / "b").exists()
