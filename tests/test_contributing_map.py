"""CONTRIBUTING's map of src/symformer matches the tree (issue 59 item 7): it names every package and top-level module,
and every name it gives as a package (`name/`) or a module (`name.py`) at the top of the map exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "symformer"


def map_entries(text: str) -> set[str]:
    """The names at the top level of the fenced map under "## Where things go": `name/`, `name.py`, `a/b/`."""
    block = text.split("## Where things go", 1)[1].split("```", 2)[1]
    names = set()
    for line in block.splitlines():
        m = re.match(r"^  (\S+)", line)
        if m:
            names.add(m.group(1))
    return names


def tree_entries(src: Path = SRC) -> set[str]:
    out = {f"{p.name}/" for p in src.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    out |= {p.name for p in src.glob("*.py") if p.name != "__init__.py"}
    out |= {f"{p.parent.name}/{p.name}/" for p in src.glob("*/*") if p.is_dir() and (p / "__init__.py").is_file()}
    return out


def missing_and_stale(text: str, src: Path = SRC) -> tuple[list[str], list[str]]:
    named = map_entries(text)
    tree = tree_entries(src)
    # a sub-package is covered by its own line (integrations/hf/) or by its parent's line naming it (facts/lm/)
    missing = [t for t in sorted(tree) if t not in named and not _described(t, text)]
    stale = [n for n in sorted(named) if n not in tree and not n.startswith("cli")]
    return missing, stale


def _described(entry: str, text: str) -> bool:
    parent, _, child = entry.rstrip("/").partition("/")
    if entry.endswith(".py") or not child:
        return False
    block = text.split("## Where things go", 1)[1].split("```", 2)[1]
    return f"{parent}/{child}/" in block or f"{child}/" in block


def test_the_map_names_every_package_and_module():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    missing, stale = missing_and_stale(text)
    assert not missing, f"in src/symformer but not in CONTRIBUTING's map: {missing}"
    assert not stale, f"in CONTRIBUTING's map but not in src/symformer: {stale}"


def test_the_check_can_fail(tmp_path):
    src = tmp_path / "symformer"
    (src / "newpkg").mkdir(parents=True)
    (src / "newpkg" / "__init__.py").write_text("")
    (src / "kept.py").write_text("")
    text = "## Where things go\n```\nsrc/symformer/\n  kept.py   x\n  gone/     y\n```\n"
    assert missing_and_stale(text, src) == (["newpkg/"], ["gone/"])
