"""Imports point down only (issue 18 item 5, CONTRIBUTING "Layering").

Every `import` in src/symformer, module level or inside a function (a lazy import is still a dependency), is
read with ast; an import of a higher layer fails, and so does one between the sibling top layers
experiments and benchmarks. Layers, from the bottom:

  0  _validation, registry, results, stats, _io, _rng, _torch_compat, report, profiling  (plumbing)
  1  data, positional, attention, facts                    (parts)
  2  models | runner   (siblings; runner: the experiments' job runner, whose devices module moves data splits)
  3  train
  4  teleport
  5  integrations   (HF models: builds on models, positional, attention and teleport; imported by the `hf`
                     experiment and the positional_hf benchmark)
  6  experiments | benchmarks   (siblings: neither imports the other)
  7  cli, cli_facts   (the command line; `symformer facts` lives in cli_facts)

The package root symformer/__init__.py is a facade that imports parts to register them; it is not a layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "symformer"
LAYERS = {
    "_validation": 0,
    "registry": 0,
    "results": 0,
    "stats": 0,
    "_io": 0,
    "_rng": 0,
    "_torch_compat": 0,
    "report": 0,
    "profiling": 0,
    "data": 1,
    "positional": 1,
    "attention": 1,
    "facts": 1,
    "models": 2,
    "runner": 2,
    "train": 3,
    "teleport": 4,
    "integrations": 5,
    "experiments": 6,
    "benchmarks": 6,
    "cli": 7,
    "cli_facts": 7,
}
SIBLINGS = {frozenset({"experiments", "benchmarks"}), frozenset({"models", "runner"})}


def unit_of(module: str) -> str | None:
    """'symformer.train.trainer' -> 'train'; None for the package root."""
    parts = module.split(".")
    return parts[1] if parts[0] == "symformer" and len(parts) > 1 else None


def module_name(path: Path, src: Path) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, src: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path, src).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base == "symformer":  # `from symformer import x`: x is the unit
                out += [(node.lineno, f"symformer.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return [(ln, m) for ln, m in out if m == "symformer" or m.startswith("symformer.")]


def violations(src: Path = SRC) -> list[str]:
    bad = []
    for path in sorted(src.rglob("*.py")):
        unit = unit_of(module_name(path, src))
        if unit is None:
            continue
        if unit not in LAYERS:
            bad.append(f"{path.relative_to(src)}: {unit} has no layer; add it to LAYERS")
            continue
        for line, mod in imported_modules(path, src):
            target = unit_of(mod)
            if target is None or target == unit:
                continue
            if target not in LAYERS:
                bad.append(f"{path.relative_to(src)}:{line} imports {mod}, which has no layer")
            elif LAYERS[target] > LAYERS[unit]:
                bad.append(
                    f"{path.relative_to(src)}:{line} imports {mod} (layer {LAYERS[target]} {target}) "
                    f"from layer {LAYERS[unit]} {unit}"
                )
            elif frozenset({unit, target}) in SIBLINGS:
                bad.append(f"{path.relative_to(src)}:{line} imports {mod}: {unit} and {target} are siblings")
    return bad


def test_no_upward_imports():
    bad = violations()
    assert not bad, "imports pointing up the layers:\n" + "\n".join(bad)


def test_the_walk_sees_lazy_and_relative_imports(tmp_path):
    """The checker must be able to fail: a function-level import of a higher layer and a relative import of
    a sibling are both reported."""
    pkg = tmp_path / "symformer"
    (pkg / "positional").mkdir(parents=True)
    (pkg / "experiments").mkdir()
    (pkg / "positional" / "__init__.py").write_text("")
    (pkg / "positional" / "x.py").write_text("def f():\n    from symformer.models import attention_layers\n")
    (pkg / "experiments" / "__init__.py").write_text("")
    (pkg / "experiments" / "y.py").write_text("from ..benchmarks.base import suite\nfrom . import z\n")
    bad = violations(pkg)
    assert len(bad) == 2
    assert "experiments/y.py:1 imports symformer.benchmarks.base: experiments and benchmarks are siblings" in bad[0]
    assert "positional/x.py:2 imports symformer.models (layer 2 models) from layer 1 positional" in bad[1]


@pytest.mark.parametrize("unit", sorted(LAYERS))
def test_every_layer_exists(unit):
    assert (SRC / unit).is_dir() or (SRC / f"{unit}.py").is_file() or unit == "stats"
