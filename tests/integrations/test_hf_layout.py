"""The modules of symformer.integrations.hf sit in one downward order (issue 59 item 1): each imports only modules
before it in ORDER, so the package has no import loop, and no module of integrations/ imports one of symformer's own
modules inside a function (transformers, the optional dependency, is the only lazy import there). Read with ast: no
transformers needed."""

from __future__ import annotations

import ast
from pathlib import Path

HF = Path(__file__).resolve().parents[2] / "src" / "symformer" / "integrations" / "hf"
#: the package's modules from the bottom (the facade __init__ above them all)
ORDER = (
    "schema",
    "records",
    "records_mla",
    "families",
    "_common",
    "mla",
    "reload",
    "positional",
    "cache",
    "packing",
    "attention",
    "exact",
    "lm",
    "teleport",
)
PREFIX = "symformer.integrations.hf."


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, inside a function) for every `import` / `from ... import` of the file."""
    tree = ast.parse(path.read_text(), str(path))
    inner = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, id(node) in inner) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [f"{base}.{a.name}" for a in node.names] if base == PREFIX[:-1] else [base]
            out += [(node.lineno, name, id(node) in inner) for name in names]
    return out


def test_every_module_is_placed():
    assert sorted(p.stem for p in HF.glob("*.py") if p.stem != "__init__") == sorted(ORDER)


def test_modules_import_only_modules_below_them():
    bad = []
    for rank, name in enumerate(ORDER):
        for line, mod, _ in _imports(HF / f"{name}.py"):
            if mod == PREFIX[:-1] or (mod.startswith(PREFIX) and mod[len(PREFIX) :].split(".")[0] not in ORDER[:rank]):
                bad.append(f"hf/{name}.py:{line} imports {mod}")
    assert not bad, "imports pointing up (or at the facade) inside integrations.hf:\n" + "\n".join(bad)


def test_no_symformer_import_inside_a_function():
    bad = [
        f"{path.relative_to(HF.parent)}:{line} imports {mod}"
        for path in sorted(HF.parent.rglob("*.py"))
        for line, mod, inner in _imports(path)
        if inner and (mod == "symformer" or mod.startswith("symformer."))
    ]
    assert not bad, "imports of symformer's own modules inside functions:\n" + "\n".join(bad)


def test_the_checks_can_fail(tmp_path):
    """A lazy import of a module above is reported by both checks."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from symformer.integrations.hf.teleport import HFTeleport\n")
    assert _imports(path) == [(2, "symformer.integrations.hf.teleport", True)]
