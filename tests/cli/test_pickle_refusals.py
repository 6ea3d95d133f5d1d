"""Issue 42 item 5: a user file crafted to run code when unpickled is refused by `symformer facts ...` with one
line on stderr and exit 2: no code runs, and torch's two-line UserWarning about the pickle protocol (a bare
pickle.dumps file gets it) is not printed before our line. (`train --resume`: tests/train/test_checkpoint_safety.py.)"""

from __future__ import annotations

import json
import pickle
import warnings

import pytest
import torch

from symformer import cli
from symformer.facts import make_fact_set


class Evil:
    """Unpickling this calls open(marker, 'w'): the marker file appears if a loader runs pickled code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def run_cli(argv, capsys) -> tuple[int, str]:
    """Exit code and what stderr would hold outside pytest: the CLI's lines and the warnings Python would print
    (pytest records warnings instead of printing them, so they are formatted here as Python's showwarning does)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main([str(a) for a in argv])
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return code, shown + capsys.readouterr().err


@pytest.mark.parametrize("zipped", [True, False], ids=["torch-zip", "bare-pickle"])
def test_facts_commands_refuse_crafted_pickles_in_one_line(tmp_path, capsys, zipped):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    if zipped:
        torch.save({"model": Evil(marker)}, evil)
    else:
        evil.write_bytes(pickle.dumps({"model": Evil(marker)}))
    fs = make_fact_set(8, 4, seed=0)
    torch.save(fs.keys, tmp_path / "K.pt")
    (tmp_path / "edits.json").write_text(json.dumps([[0, 1]]))
    t = tmp_path
    cases = [
        (["facts", "build", "--keys", evil, "--values", t / "K.pt", "--out", t / "o.pt"], f"--keys: {evil} is not"),
        (["facts", "build", "--keys", t / "K.pt", "--values", evil, "--out", t / "o.pt"], f"--values: {evil} is not"),
        (
            ["facts", "build", "--keys", t / "K.pt", "--values", t / "K.pt", "--facts", evil, "--out", t / "o.pt"],
            f"--facts: {evil} is not",
        ),
        (["facts", "rho", "--values", evil], f"--values: {evil} is not"),
        (["facts", "edit", "--model", evil, "--facts", t / "edits.json", "--out", t / "m2.pt"], f"{evil} is not"),
    ]
    reason = "would import and call io.open" if zipped else "not a torch file"
    for argv, start in cases:
        code, err = run_cli(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {start}") and reason in err, (argv, err)
    assert not marker.exists() and not (t / "o.pt").exists() and not (t / "m2.pt").exists()
