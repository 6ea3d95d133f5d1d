"""Comments and docstrings under src/symformer say why and cite the papers; timings, history and what used to be
belong in results/bench, docs/performance.md and the commit messages. This scan keeps the phrases that mark a lab
notebook out of the source: each hit is reported as file:line with the text and the pattern it matched. Only
comments and triple-quoted strings are read (an error message may say what it likes)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "symformer"

#: phrases of history and of wall-clock timings; each names what to write instead when it fires
PATTERNS = {
    r"\bused to\b": "history: say what the code does now, and why",
    r"\bpreviously\b": "history: say what the code does now, and why",
    r"\bformerly\b|\bformer name\b": "history: name the current API (a deprecated name says 'deprecated')",
    r"\d(\.\d+)?x (faster|slower)\b|\bx (faster|slower)\b": "a timing ratio: results/bench and docs/performance.md",
    r"\bwas (fixed|slow|slower|faster)\b": "history: say what the code does now, and why",
    r"\b(earlier|previous|last|this) sessions?\b": "lab notebook: the commit history has it",
    r"\bcommit [0-9a-f]{6,40}\b": "a commit in prose: the commit history has it",
    r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b": "a commit hash in prose: the commit history has it",
    r"\d(\.\d+)? ?ms\b": "a wall-clock timing: results/bench and docs/performance.md",
}
COMPILED = [(re.compile(p, re.IGNORECASE), why) for p, why in PATTERNS.items()]


def _prose(source: str):
    """(line number, text) of every comment line and every line of a triple-quoted string in `source`."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        elif tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            for i, line in enumerate(tok.string.splitlines()):
                yield tok.start[0] + i, line


def scan(source: str, name: str) -> list[str]:
    """'name:line: text  [why]' for each comment or docstring line that matches a pattern."""
    hits = []
    for line_no, text in _prose(source):
        for pattern, why in COMPILED:
            if pattern.search(text):
                hits.append(f"{name}:{line_no}: {text.strip()}  [{why}]")
    return hits


def test_source_prose_has_no_history_or_timings():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 100  # the scan reads the package, not an empty folder
    hits = [h for f in files for h in scan(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not hits, "history or timings in comments/docstrings:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "phrase",
    [
        "this path used to be slow",
        "Previously the table was rebuilt",
        "2.4x slower than the eager kernel",
        "was fixed in an earlier session",
        "since commit 3a92665 the solver",
        "the first call took 8.8 ms",
        "HFTeleport is the former name of PlainLoopTeleport",
    ],
)
def test_scan_catches_a_planted_phrase(phrase):
    source = f'"""Module docstring."""\n\n\ndef f():\n    """{phrase}."""\n\n\nx = 1  # {phrase}\n'
    lines = {int(h.split(":")[1]) for h in scan(source, "planted.py")}
    assert lines == {5, 8}  # the docstring and the comment, by line; the module docstring is clean


def test_scan_reads_prose_only():
    source = 'MSG = "it used to be slow, 8 ms"\n"""The positions at which the commutant is computed."""\n# why: T2.9\n'
    assert scan(source, "clean.py") == []
