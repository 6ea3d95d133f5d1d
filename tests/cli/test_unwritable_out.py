"""An unwritable --out (a file in the way, a read-only folder) is one line, before any work starts."""

import os

import numpy as np
import pytest

from symformer import _io, cli


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.err


def _commands(out, tmp_path):
    np.save(tmp_path / "v.npy", np.eye(3))
    return {
        "train": ["train", "--preset", "digits-vit", "--out", out],
        "reproduce": ["reproduce", "plash", "--quick", "--out", out],
        "bench": ["bench", "attention", "--quick", "--out", out],
        "facts build": [
            "facts",
            "build",
            "--keys",
            tmp_path / "v.npy",
            "--values",
            tmp_path / "v.npy",
            "--method",
            "naive",
            "--out",
            out,
        ],
        "facts rho": ["facts", "rho", "--values", tmp_path / "v.npy", "--out", out],
    }


@pytest.fixture(autouse=True)
def _no_work(monkeypatch):
    """Any work past the --out check fails the test loudly (it must not start)."""

    def boom(*a, **k):
        raise AssertionError("work started before the --out check")

    monkeypatch.setattr(cli, "_threads", boom)
    import importlib

    cli_facts = importlib.import_module("symformer.cli_facts")  # the names `facts rho` / `facts build` call
    monkeypatch.setattr(cli_facts, "decodability", boom)
    monkeypatch.setattr(cli_facts, "build_fact_mlp", boom)


@pytest.mark.parametrize("cmd", ["train", "reproduce", "bench", "facts build", "facts rho"])
def test_file_in_the_way(capsys, tmp_path, cmd):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker / "sub" if cmd.startswith("facts") else blocker
    code, err = run(capsys, *_commands(out if not cmd.startswith("facts") else out / "f.pt", tmp_path)[cmd])
    assert code == 2 and err.count("\n") == 1 and "--out" in err and "Traceback" not in err
    assert "is a file" in err or "a file of that name is in the way" in err


def test_folder_in_the_way_of_a_facts_output(capsys, tmp_path):
    (tmp_path / "mlp.pt").mkdir()
    code, err = run(capsys, *_commands(tmp_path / "mlp.pt", tmp_path)["facts build"])
    assert code == 2 and "a folder of that name is in the way" in err


@pytest.mark.parametrize("cmd", ["train", "reproduce", "bench", "facts build", "facts rho"])
def test_read_only_folder(capsys, tmp_path, monkeypatch, cmd):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        try:  # root ignores permissions: then simulate what a read-only mount answers
            (ro / "probe").write_text("x")
            (ro / "probe").unlink()

            def refuse(folder):
                raise PermissionError(30, "Read-only file system")

            monkeypatch.setattr(_io, "_probe", refuse)
        except PermissionError:
            pass
        out = ro / "out" if not cmd.startswith("facts") else ro / "f.pt"
        if cmd == "train" or cmd == "reproduce" or cmd == "bench":
            out = ro  # an existing read-only folder
        code, err = run(capsys, *_commands(out, tmp_path)[cmd])
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: --out: ") and "cannot write to" in err
        assert "expected a writable folder" in err
    finally:
        os.chmod(ro, 0o755)


def test_writable_out_is_created(tmp_path):
    assert _io.check_writable_dir(tmp_path / "a" / "b").is_dir()
    assert not list((tmp_path / "a" / "b").iterdir())  # the probe file is removed
