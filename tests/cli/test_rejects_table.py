"""CONTRIBUTING.md's "What symformer rejects" table matches what the CLI prints.

Each row of the table is run here: the CLI must exit 2 with exactly one line on stderr, no traceback, equal
to the row's message once `<out>`, `<data>` and `<tmp>` are replaced by this test's folders (`…` stands
for text that varies, such as torch's own wording). A row without a case here, or a case without a row,
fails the test."""

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from symformer import cli

REPO = Path(__file__).resolve().parents[2]
HEADER = "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n"
ROW = "2016-07-01 00:00:00,5.827,2.009,1.599,0.462,4.203,1.340,30.531\n"


class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _table() -> list[tuple[str, str, str]]:
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text.split("## What symformer rejects", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = []
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        out.append((cells[0].strip("`"), cells[1], cells[2].strip("`")))
    return out


def _small(out):  # a tiny digits model, quick to build
    return ["--set", "model.d_model=16", "--set", "model.n_heads=2", "--set", "model.n_layers=1", "--out", out]


def _ckpt(t, content):
    (t / "out").mkdir(exist_ok=True)
    p = t / "out" / "checkpoint.pt"
    if callable(content):
        content(p)
    else:
        p.write_bytes(content)
    return ["train", "--preset", "digits-vit", "--resume", *_small(t / "out")]


def _ett(t, text):
    (t / "data").mkdir(exist_ok=True)
    (t / "data" / "ETTh1.csv").write_bytes(text.encode() if isinstance(text, str) else text)
    return ["train", "--preset", "etth1-informer", "--data-dir", t / "data", "--out", t / "out"]


def _text(t, data):
    (t / "data").mkdir(exist_ok=True)
    (t / "data" / "tinyshakespeare.txt").write_bytes(data)
    return ["train", "--preset", "shakespeare-char", "--data-dir", t / "data", "--out", t / "out"]


def _npy(t, save):
    p = t / "v.npy"
    save(p)
    return ["facts", "rho", "--values", p]


def _truncated(p):
    torch.save({"x": torch.zeros(1000)}, p)
    p.write_bytes(p.read_bytes()[:500])


def _other_model(t):
    assert (
        cli.main(
            [
                "train",
                "--preset",
                "digits-vit",
                "--set",
                "train.max_steps=1",
                "--set",
                "train.epochs=1",
                *_small(t / "out"),
            ]
        )
        == 0
    )
    return [
        "train",
        "--preset",
        "digits-vit",
        "--resume",
        "--set",
        "train.max_steps=1",
        "--set",
        "train.epochs=1",
        "--set",
        "model.d_model=32",
        "--set",
        "model.n_heads=2",
        "--set",
        "model.n_layers=1",
        "--out",
        t / "out",
    ]


def _fact_edit(t, edits, model=None):
    """`facts edit` on an untrained SSFR model whose checkpoint asks for a 1-wide MLP (it cannot store 32 facts)."""
    from symformer.facts import build_fact_mlp
    from symformer.facts.lm.checkpoint import save_fact_model
    from symformer.facts.lm.recall import build_recall_model
    from symformer.facts.lm.ssfr import make_ssfr

    args = dict(n_facts=32, d=32, seed=0)
    task = make_ssfr(**args)
    if model is None:
        model = t / "m.pt"
        K, V = task.mlp_embeddings()
        save_fact_model(
            model,
            build_recall_model(task, build_fact_mlp(K, V, task.facts, "gd-swiglu", h=32)),
            "ssfr",
            args,
            task.facts,
            {"method": "bin+jl", "size": 1},
        )
    (t / "new.json").write_text(json.dumps(edits))
    return ["facts", "edit", "--model", model, "--facts", t / "new.json", "--out", t / "o.pt"]


def _blocked(t, *argv):
    (t / "out").write_text("x")
    return list(argv) + ["--out", t / "out"]


CASES = {
    ("symformer train --resume", "a crafted pickle checkpoint (its `__reduce__` calls `open`)"): lambda t: _ckpt(
        t, lambda p: torch.save({"model": Evil(t / "PWNED")}, p)
    ),
    ("symformer train --resume", "a text file as checkpoint (`echo garbage > checkpoint.pt`)"): lambda t: _ckpt(
        t, b"garbage\n"
    ),
    ("symformer train --resume", "a truncated checkpoint"): lambda t: _ckpt(t, _truncated),
    ("symformer train --resume", "an empty checkpoint"): lambda t: _ckpt(t, b""),
    ("symformer train --resume", "a torch file from elsewhere (`torch.save({'a': 1})`)"): lambda t: _ckpt(
        t, lambda p: torch.save({"a": 1}, p)
    ),
    ("symformer train --resume", "a checkpoint of another model (`--set model.d_model=32`)"): _other_model,
    ("symformer train", "an ETT CSV with a header and one row"): lambda t: _ett(t, HEADER + ROW),
    ("symformer train", "an ETT CSV without some columns"): lambda t: _ett(t, "date,HUFL,OT\n" + "2016-07-01,1,2\n"),
    ("symformer train", "an ETT CSV with `abc` in a cell"): lambda t: _ett(
        t, HEADER + ROW + ROW.replace("1.599", "abc")
    ),
    ("symformer train", "an ETT CSV with an empty cell (NaN)"): lambda t: _ett(t, HEADER + ROW.replace("4.203", "")),
    ("symformer train", "an empty ETT CSV"): lambda t: _ett(t, ""),
    ("symformer train", "an ETT CSV in UTF-16"): lambda t: _ett(t, (HEADER + ROW).encode("utf-16")),
    ("symformer train", "a text corpus in Latin-1"): lambda t: _text(t, "café au lait\n".encode("latin-1") * 9999),
    ("symformer train", "an empty text corpus"): lambda t: _text(t, b""),
    ("symformer train", "a text corpus of 300 characters"): lambda t: _text(t, b"abc" * 100),
    ("symformer facts rho", "an object-dtype `.npy`"): lambda t: _npy(
        t, lambda p: np.save(p, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    ),
    ("symformer facts rho", "a pickle renamed to `.npy`"): lambda t: _npy(
        t, lambda p: p.write_bytes(pickle.dumps(Evil(t / "PWNED")))
    ),
    ("symformer facts build", "a `.pt` whose pickle calls `open`"): lambda t: (
        torch.save(Evil(t / "PWNED"), t / "k.pt"),
        ["facts", "build", "--keys", t / "k.pt", "--values", t / "k.pt", "--out", t / "m.pt"],
    )[1],
    ("symformer facts edit", "a crafted pickle checkpoint as `--model`"): lambda t: (
        torch.save({"x": Evil(t / "PWNED")}, t / "evil.pt"),
        _fact_edit(t, [], t / "evil.pt"),
    )[1],
    ("symformer facts edit", "an edit file with an unknown key and a key with two values"): lambda t: _fact_edit(
        t, [["nope", "v1"], ["k1", "v1"], ["k1", "v2"]]
    ),
    ("symformer facts edit", "a checkpoint whose MLP recipe cannot store the facts (`bin+jl`, width 1)"): lambda t: (
        _fact_edit(t, [["k1", "v5"]])
    ),
    ("symformer train", "`--set train.lrr=0.1`"): lambda t: [
        "train",
        "--preset",
        "digits-vit",
        "--set",
        "train.lrr=0.1",
        "--out",
        t / "out",
    ],
    ("symformer train", "`--config` file with invalid JSON"): lambda t: (
        (t / "c.json").write_text('{"task": "digits",}'),
        ["train", "--config", t / "c.json", "--out", t / "out"],
    )[1],
    ("symformer reproduce", "`--set plash.quik_epochs=5`"): lambda t: [
        "reproduce",
        "plash",
        "--set",
        "plash.quik_epochs=5",
        "--out",
        t / "out",
    ],
    ("symformer reproduce", "`--set plash.quick_epochs=many`"): lambda t: [
        "reproduce",
        "plash",
        "--set",
        "plash.quick_epochs=many",
        "--out",
        t / "out",
    ],
    ("symformer train", "`--out` is an existing file"): lambda t: _blocked(t, "train", "--preset", "digits-vit"),
    ("symformer reproduce", "`--out` is an existing file"): lambda t: _blocked(t, "reproduce", "plash"),
    ("symformer bench", "`--out` is an existing file"): lambda t: _blocked(t, "bench", "attention"),
    ("symformer facts rho", "`--out` below a file"): lambda t: (
        np.save(t / "v.npy", np.eye(2)),
        (t / "f").write_text("x"),
        ["facts", "rho", "--values", t / "v.npy", "--out", t / "f" / "rho.pt"],
    )[2],
}


def _pattern(msg: str, t: Path) -> re.Pattern:
    parts = re.split(r"(<out>|<data>|<tmp>|…)", msg)
    subst = {"<out>": str(t / "out"), "<data>": str(t / "data"), "<tmp>": str(t)}
    return re.compile("".join(re.escape(subst[p]) if p in subst else ".*" if p == "…" else re.escape(p) for p in parts))


def test_table_and_cases_match():
    rows = {(e, i) for e, i, _ in _table()}
    assert rows == set(CASES), (rows - set(CASES), set(CASES) - rows)


@pytest.mark.parametrize("entry, given, message", _table(), ids=lambda x: x[:40] if isinstance(x, str) else x)
def test_message_matches_table(tmp_path, capsys, entry, given, message):
    argv = [str(a) for a in CASES[(entry, given)](tmp_path)]
    capsys.readouterr()
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert _pattern(message, tmp_path).fullmatch(err.strip()), f"\n  got:   {err.strip()}\n  table: {message}"
    assert not (tmp_path / "PWNED").exists()  # no crafted file ever ran code
    json.dumps(argv)  # (the case built plain arguments)


@pytest.mark.parametrize(
    "case",
    [
        ("symformer train --resume", "a crafted pickle checkpoint (its `__reduce__` calls `open`)"),
        ("symformer train", "an ETT CSV with `abc` in a cell"),
    ],
)
def test_installed_entrypoint_prints_one_line(tmp_path, case):
    """The same through `python -m symformer.cli` in a fresh process: one line, exit 2, no traceback."""
    import os
    import subprocess
    import sys

    argv = [str(a) for a in CASES[case](tmp_path)]
    p = subprocess.run(
        [sys.executable, "-m", "symformer.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=600,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "PWNED").exists()
