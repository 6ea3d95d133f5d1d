"""`symformer sample`: text from a trained shakespeare-char folder; bad input is one line and exit status 2."""

import pytest
import torch

from symformer import cli


def _corpus(t):
    (t / "data").mkdir(exist_ok=True)
    text = "".join(f"ROMEO: line {i} of the play, with all its words.\n" for i in range(60))
    (t / "data" / "tinyshakespeare.txt").write_text(text)
    return t / "data"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    t = tmp_path_factory.mktemp("sample")
    data = _corpus(t)
    argv = [
        "train",
        "--preset",
        "shakespeare-char",
        "--data-dir",
        data,
        "--out",
        t / "out",
        "--set",
        "train.max_steps=1",
        "--set",
        "train.epochs=1",
        "--set",
        "model.d_model=16",
        "--set",
        "model.n_layers=1",
        "--set",
        "model.attention=favor",
        "--set",
        "model.attention_kwargs.n_features=8",
        "--set",
        "train.eval_batch_size=512",
    ]
    assert cli.main([str(a) for a in argv]) == 0
    return t


def _sample(t, *extra):
    return cli.main([str(a) for a in ["sample", "--out", t / "out", "--data-dir", t / "data", *extra]])


def test_sample_prints_the_prompt_and_its_continuation(trained, capsys):
    capsys.readouterr()
    assert _sample(trained, "--prompt", "ROMEO:", "--tokens", "12", "--seed", "3") == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text.rstrip("\n")) >= 6 + 10
    assert _sample(trained, "--prompt", "ROMEO:", "--tokens", "12", "--seed", "3") == 0
    assert capsys.readouterr().out == text  # --seed fixes the draw


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--prompt", "ROMEO:", "--tokens", "-1"], "error: --tokens: got -1, expected an integer >= 0"),
        (
            ["--prompt", "ROMEO:", "--temperature", "0"],
            "error: --temperature: got 0.0, expected a number in (0.0, inf]",
        ),
        (["--prompt", "ROMEO:", "--top-k", "0"], "error: --top-k: got 0, expected an integer >= 1"),
        (["--prompt", ""], "error: --prompt: got an empty prompt"),
        (["--prompt", "Zq"], "error: --prompt: got characters not in the corpus vocabulary ('Zq')"),
    ],
)
def test_sample_bad_input(trained, capsys, extra, message):
    capsys.readouterr()
    assert _sample(trained, *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_sample_loads_the_checkpoint_safely(tmp_path, trained, capsys):
    import shutil

    shutil.copytree(trained / "out", tmp_path / "out")
    shutil.copytree(trained / "data", tmp_path / "data")
    (tmp_path / "out" / "checkpoint.pt").write_bytes(b"garbage\n")
    capsys.readouterr()
    assert _sample(tmp_path, "--prompt", "R") == 2
    assert "is not a symformer checkpoint" in capsys.readouterr().err
    torch.save({"a": 1}, tmp_path / "out" / "checkpoint.pt")
    assert _sample(tmp_path, "--prompt", "R") == 2
    assert capsys.readouterr().err.startswith("error: --out: ")
    assert _sample(tmp_path / "nowhere", "--prompt", "R") == 2
