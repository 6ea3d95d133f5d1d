"""The CLI's help and its page say what the commands take (issue 58 item 10): every option of a command whose row in
docs/cli.md lists options is in that row (`sample --data-dir` was not); no user-facing help cites an issue number;
`facts build --facts` takes what its help says, a 1-D JSON list included."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import typer

from symformer import cli
from symformer.cli import main

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BOX = re.compile(r"[│╭╮╰╯─]")


def _commands():
    """(path, click command) of every leaf command of `symformer`."""
    cli._register_plugins()

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    seen = {}
    for path, cmd in walk(typer.main.get_command(cli.app), []):
        seen.setdefault(tuple(path), cmd)
    return seen


def _options(cmd) -> set[str]:
    return {o for p in cmd.params if not getattr(p, "is_argument", False) for o in p.opts if o.startswith("--")}


def _help(argv: list[str]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0, argv
    return " ".join(BOX.sub(" ", buf.getvalue()).split())  # one line: the rich boxes and wrapping removed


def _rows() -> dict[tuple[str, ...], str]:
    """The command cells of the page's command table, merged per command: {("facts", "build"): "...", ...}."""
    rows: dict[tuple[str, ...], str] = {}
    for line in PAGE.read_text().splitlines():
        for cell in re.findall(r"`(symformer [^`]*)`", line.split(" | ")[0]):
            words = cell.split()[1:]
            path = tuple(w for w in words[:2] if re.fullmatch(r"[a-z][a-z-]*", w))
            if path and words[len(path) : len(path) + 1] != ["..."]:
                rows[path] = rows.get(path, "") + " " + cell
    return rows


def test_every_option_is_in_its_commands_row():
    commands, rows = _commands(), _rows()
    assert {("sample",), ("train",), ("reproduce",), ("facts", "build")} <= rows.keys()
    for path, row in rows.items():
        path = path if path in commands else path[:1]
        missing = sorted(o for o in _options(commands[path]) - {"--help"} if o not in row)
        assert not missing, (path, missing)


@pytest.mark.parametrize(
    "extra", [["--help"], ["reproduce", "--list"], ["train", "--list-presets"], ["bench", "--list"]]
)
def test_no_help_cites_an_issue_number(extra):
    texts = [_help([*path, "--help"]) for path in _commands()] if extra == ["--help"] else [_help(extra)]
    for text in texts:
        assert not re.search(r"\bissues? #?\d+", text, re.I), re.search(r".{60}\bissues? #?\d+.{10}", text, re.I)


def test_facts_build_takes_what_its_help_says(tmp_path, capsys):
    from symformer.facts import make_fact_set

    fs = make_fact_set(24, 8, tied=False, seed=1)
    np.save(tmp_path / "K.npy", fs.keys.numpy())
    np.save(tmp_path / "V.npy", fs.values.numpy())
    help_text = _help(["facts", "build", "--help"])
    assert "a JSON list [f(0), f(1), ...]" in help_text and "JSON [[k, v], ...]" in help_text
    outs = []
    for name, data in (("list", fs.facts.tolist()), ("pairs", [[i, int(f)] for i, f in enumerate(fs.facts)])):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
        out = tmp_path / f"{name}.pt"
        argv = ["facts", "build", "--keys", str(tmp_path / "K.npy"), "--values", str(tmp_path / "V.npy")]
        assert main([*argv, "--facts", str(tmp_path / f"{name}.json"), "--out", str(out)]) == 0
        outs.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
        assert outs[-1]["accuracy"] == 1.0
    assert outs[0] == {**outs[1], "out": outs[0]["out"]}  # the same facts either way
    (tmp_path / "bad.json").write_text(json.dumps([[0, 1], 2]))
    assert main([*argv, "--facts", str(tmp_path / "bad.json"), "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert "--facts: got" in err and "expected [[key, value], ...] or a list of integers [f(0), f(1), ...]" in err
