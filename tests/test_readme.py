"""The README's Hugging Face table and family count follow experiments.hf.FAMILY_MODELS (one table for the
integration tests, the experiment and the docs), so adding a family without documenting it fails here."""

from __future__ import annotations

import re
from pathlib import Path

from symformer.experiments.hf import FAMILY_MODELS

README = Path(__file__).resolve().parents[1] / "README.md"


def _hf_table_families(text: str) -> list[str]:
    """model_type names in the first column of the table under "Use with Hugging Face transformers"; what is in
    parentheses there (product names, notes) is not a model_type."""
    section = text.split("## Use with Hugging Face transformers", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| family (`model_type`)"), "the family table moved"
    names = []
    for row in rows[1:]:
        first = re.sub(r"\([^)]*\)", "", row.split("|")[1])
        names += [n.strip() for n in first.split(",") if n.strip()]
    return names


def test_readme_table_lists_every_family_once():
    names = _hf_table_families(README.read_text())
    assert sorted(names) == sorted(FAMILY_MODELS), set(names) ^ set(FAMILY_MODELS)


def test_readme_family_count_is_the_table_count():
    count = re.search(r"`transformers` models of (\d+) families", README.read_text().replace("\n", " "))
    assert count is not None and int(count.group(1)) == len(FAMILY_MODELS)
