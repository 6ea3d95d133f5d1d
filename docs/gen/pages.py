"""mkdocs-gen-files script (mkdocs.yml): fills the `<!-- gen:NAME ARG -->` markers of every page from the code and
results/ (symdocs.py), and adds the recorded reports under results/ as pages, so the docs link to them."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import symdocs  # noqa: E402  (beside this file, not a package)

ROOT = symdocs.ROOT
DOCS = ROOT / "docs"

for page in sorted(DOCS.rglob("*.md")):
    if HERE in page.parents:
        continue
    text = page.read_text(encoding="utf-8")
    if symdocs.MARKER.search(text):
        with mkdocs_gen_files.open(str(page.relative_to(DOCS)), "w") as out:
            out.write(symdocs.expand(text))

# the recorded reports, their provenance and figures, at the same relative paths as in the repository
for path in sorted((ROOT / "results").rglob("*")):
    rel = path.relative_to(ROOT)
    if path.suffix not in (".md", ".png") or "runs" in rel.parts or "superseded-seed-collision" in rel.parts:
        continue
    with mkdocs_gen_files.open(str(rel), "wb") as out, path.open("rb") as src:
        shutil.copyfileobj(src, out)
