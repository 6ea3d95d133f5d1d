"""Imports point down only (issue 18 item 5, CONTRIBUTING "Layering").

Every `import` in src/symformer, module level or inside a function (a lazy import is still a dependency), is
read with ast; an import of a higher layer fails, and so does one between the sibling top layers
experiments and benchmarks. Layers, from the bottom:

  0  _validation, registry, results, stats, _io, _rng, _torch_compat, report, profiling  (plumbing)
  1  data, positional, attention, facts                    (parts)
  2  models | runner   (siblings; runner: the experiments' job runner, whose devices module moves data splits)
  3  train
  3.5 facts.lm    (the transformer side of the fact-storing MLP paper: recall tasks, the fact-recall model, its
                   training and editing; builds on models and train, while facts itself stays layer 1)
  4  teleport
  5  integrations   (HF models: builds on models, positional, attention and teleport; imported by the `hf`
                     experiment and the positional_hf benchmark)
  5.5 linearize  (attention transfer and LoRA on HF models: builds on integrations)
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
    "kernels": 0.5,
    "data": 1,
    "positional": 1,
    "attention": 1,
    "facts": 1,
    "models": 2,
    "runner": 2,
    "train": 3,
    "facts.lm": 3.5,
    "teleport": 4,
    "integrations": 5,
    "linearize": 5.5,
    "experiments": 6,
    "benchmarks": 6,
    "cli": 7,
    "cli_facts": 7,
    "cli_linearize": 7,
}
SIBLINGS = {frozenset({"experiments", "benchmarks"}), frozenset({"models", "runner"})}


def unit_of(module: str) -> str | None:
    """'symformer.train.trainer' -> 'train', 'symformer.facts.lm.model' -> 'facts.lm' (the most specific unit in
    LAYERS: a subpackage may have its own layer); None for the package root."""
    parts = module.split(".")
    if parts[0] != "symformer" or len(parts) < 2:
        return None
    return next((".".join(parts[1:n]) for n in range(len(parts), 2, -1) if ".".join(parts[1:n]) in LAYERS), parts[1])


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
                # `from symformer.facts import lm`: a name that is a unit of its own is that unit
                out += [
                    (node.lineno, f"{base}.{a.name}")
                    for a in node.names
                    if unit_of(f"{base}.{a.name}") != unit_of(base)
                ]
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


def test_a_subpackage_with_its_own_layer(tmp_path):
    """facts.lm sits above train while facts is a part (layer 1): facts may not import facts.lm, by either
    spelling, and facts.lm may import train and facts."""
    pkg = tmp_path / "symformer"
    (pkg / "facts" / "lm").mkdir(parents=True)
    (pkg / "train").mkdir()
    for d in ("facts", "facts/lm", "train"):
        (pkg / d / "__init__.py").write_text("")
    (pkg / "facts" / "x.py").write_text("from symformer.facts.lm.model import M\nfrom symformer.facts import lm\n")
    (pkg / "facts" / "lm" / "model.py").write_text("from symformer.train import Trainer\nfrom ..x import y\n")
    bad = violations(pkg)
    assert len(bad) == 2
    assert "facts/x.py:1 imports symformer.facts.lm.model (layer 3.5 facts.lm) from layer 1 facts" in bad[0]
    assert "facts/x.py:2 imports symformer.facts.lm (layer 3.5 facts.lm) from layer 1 facts" in bad[1]


@pytest.mark.parametrize("unit", sorted(LAYERS))
def test_every_layer_exists(unit):
    path = SRC / unit.replace(".", "/")
    assert path.is_dir() or path.with_suffix(".py").is_file() or unit == "stats"


# ---------------------------------------------------------------- loops and lazy imports (issue 59)
def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the symformer modules it imports, anywhere in the file: `from package import module` is the module,
    `from package import name` the package's __init__ (a facade imported from inside its own package is a loop)."""
    modules = {module_name(p, src): p for p in src.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        package = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import symformer.x.y` of a name: its module
                    target = target.rpartition(".")[0]
                if target and target != m and target.startswith("symformer"):
                    graph[m].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of `graph`: its strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def loops(src: Path = SRC) -> list[str]:
    """Import loops between modules, and between two units of one layer (data <-> facts), which layers cannot see."""
    graph = import_graph(src)
    found = [" <-> ".join(c) for c in strongly_connected(graph)]
    units: dict[str, set[str]] = {}
    for m, targets in graph.items():
        u = unit_of(m)
        for t in targets:
            tu = unit_of(t)
            if u and tu and u != tu and LAYERS.get(u) == LAYERS.get(tu):
                units.setdefault(u, set()).add(tu)
    found += [" <-> ".join(c) + " (units of one layer)" for c in strongly_connected(units)]
    return found


def test_no_import_loops():
    bad = loops()
    assert not bad, "import loops:\n" + "\n".join(bad)


def test_the_loop_check_can_fail(tmp_path):
    pkg = tmp_path / "symformer"
    for unit in ("data", "facts"):
        (pkg / unit).mkdir(parents=True)
        (pkg / unit / "__init__.py").write_text("")
    (pkg / "data" / "a.py").write_text("def f():\n    from symformer.data import b\n")
    (pkg / "data" / "b.py").write_text("from symformer.data.a import f\n")
    (pkg / "data" / "c.py").write_text("from symformer.facts.d import g\n")
    (pkg / "facts" / "d.py").write_text("import symformer.data.files\ng = 1\n")
    (pkg / "data" / "files.py").write_text("")
    found = loops(pkg)
    assert "symformer.data.a <-> symformer.data.b" in found
    assert "data <-> facts (units of one layer)" in found


#: internal imports inside functions may only be for an optional dependency, each commented on its line or the line
#: above; issue 59 allows at most this many
MAX_LAZY = 30


def lazy_imports(src: Path = SRC) -> list[tuple[str, int, bool]]:
    """(file, line, commented) for every import of a symformer module inside a function."""
    out = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                internal = any(n == "symformer" or n.startswith("symformer.") for n in names)
                if not (getattr(node, "level", 0) or internal):
                    continue
                near = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
                out.append((str(path.relative_to(src)), node.lineno, "#" in near))
    return sorted(set(out))


def test_imports_inside_functions_are_few_and_commented():
    found = lazy_imports()
    uncommented = [f"{f}:{ln}" for f, ln, ok in found if not ok]
    assert not uncommented, "imports inside functions without a comment saying why:\n" + "\n".join(uncommented)
    assert len(found) <= MAX_LAZY, f"{len(found)} imports inside functions, expected at most {MAX_LAZY}"
