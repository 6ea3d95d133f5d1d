"""Size limits of src/ (issue 18 item 4, CONTRIBUTING "Size"): no function over 80 lines, no module over 600, and no
module of experiments/ over 300 (issue 59)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "symformer"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
MAX_EXPERIMENT_LINES = 300
ALLOWED: set[str] = set()  # no exceptions (experiments/espr.py was split into the modules of experiments/espr/)


def oversized(src: Path = SRC) -> list[str]:
    bad = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel in ALLOWED:
            continue
        text = path.read_text()
        n = len(text.splitlines())
        limit = MAX_EXPERIMENT_LINES if rel.startswith("experiments/") else MAX_MODULE_LINES
        if n > limit:
            bad.append(f"{rel}: {n} lines (module limit {limit})")
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ln = node.end_lineno - node.lineno + 1
                if ln > MAX_FUNCTION_LINES:
                    bad.append(f"{rel}:{node.lineno} {node.name}: {ln} lines (function limit {MAX_FUNCTION_LINES})")
    return bad


def test_functions_and_modules_within_limits():
    bad = oversized()
    assert not bad, "over the size limits:\n" + "\n".join(bad)


def test_the_check_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 80 + "\n" * 530)
    assert oversized(tmp_path) == ["m.py: 611 lines (module limit 600)", "m.py:1 f: 81 lines (function limit 80)"]
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "e.py").write_text("x = 1\n" * 301)
    assert oversized(tmp_path)[0] == "experiments/e.py: 301 lines (module limit 300)"
