"""The README and the docs pages: every ```python example runs (the blocks of a page in order, in one namespace, in
a scratch folder), the README stays a five-minute read, and its generated parts (verdict table, family count)
follow results/ and the code. A block that cannot run here is preceded by `<!-- not-run: reason -->`; none is
today. `make docs` (mkdocs build --strict) checks the links and the generated pages."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "gen" not in p.parts)
BLOCK = re.compile(r"(?P<mark><!-- not-run: [^>]+ -->\n)?```python\n(?P<code>.*?)```", re.S)
FENCE = re.compile(r"```.*?```", re.S)


def _symdocs():
    spec = importlib.util.spec_from_file_location("symdocs", ROOT / "docs" / "gen" / "symdocs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("symdocs", mod)
    spec.loader.exec_module(mod)
    return mod


def _examples(page: Path) -> list[str]:
    return [m.group("code") for m in BLOCK.finditer(page.read_text(encoding="utf-8")) if not m.group("mark")]


@pytest.mark.parametrize("page", [p for p in PAGES if _examples(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page, tmp_path, monkeypatch):
    blocks = _examples(page)
    if any("transformers" in code for code in blocks):  # a Hugging Face model: skipped where HF cannot run
        from tests.integrations._hf_models import transformers_or_skip

        transformers_or_skip()
    monkeypatch.chdir(tmp_path)  # examples that save files write here
    torch.manual_seed(0)
    namespace: dict = {"__name__": "__docs_example__"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page.name}[python block {i}]", "exec"), namespace)
        except Exception as exc:  # name the block: the traceback alone points into exec
            raise AssertionError(f"{page.relative_to(ROOT)}: python block {i} failed: {exc!r}") from exc


def test_examples_are_found():
    assert len(_examples(ROOT / "README.md")) >= 3  # ten lines, Hugging Face, generation
    marked = [m for p in PAGES for m in BLOCK.finditer(p.read_text()) if m.group("mark")]
    assert all("not-run: " in m.group("mark") and len(m.group("mark")) > 20 for m in marked)  # each says why


def test_readme_is_short():
    words = len(FENCE.sub("", (ROOT / "README.md").read_text(encoding="utf-8")).split())
    assert words <= 1200, f"README.md has {words} words outside fenced code blocks; the budget is 1200"


def test_readme_verdict_table_follows_results():
    sd = _symdocs()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split(sd.README_START, 1)[1].split(sd.README_END, 1)[0].strip()
    assert table == sd.readme_verdicts(), "run: python docs/gen/symdocs.py readme"


def test_verdict_table_counts(tmp_path):
    """The counts come from the claims' verdicts; an unknown verdict is refused, not counted."""
    sd = _symdocs()
    (tmp_path / "results" / "x").mkdir(parents=True)
    claims = [{"verdict": v} for v in ("holds", "holds", "fails", "inconclusive")]
    (tmp_path / "results" / "x" / "results.json").write_text(sd.json.dumps({"experiment": "x", "claims": claims}))
    sd.HEADLINES["x"] = "headline"
    try:
        row = sd.verdict_table("results/", tmp_path, ["x", "y"]).splitlines()
        assert row[2].startswith("| `x` | 2 | 1 | 1 | headline |") and "not recorded" in row[3]
        claims.append({"verdict": "maybe"})
        (tmp_path / "results" / "x" / "results.json").write_text(sd.json.dumps({"experiment": "x", "claims": claims}))
        with pytest.raises(ValueError, match="maybe"):
            sd.verdict_table("results/", tmp_path, ["x"])
    finally:
        del sd.HEADLINES["x"]


def test_readme_family_count_is_the_code_count():
    from symformer.integrations.hf import FAMILIES

    count = re.search(r"`transformers` models of (\d+) families", (ROOT / "README.md").read_text().replace("\n", " "))
    assert count is not None and int(count.group(1)) == len(FAMILIES)


def test_family_table_lists_every_family_once():
    from symformer.integrations.hf import FAMILIES

    rows = [r for r in _symdocs().family_table().splitlines() if r.startswith("|") and not re.match(r"\|[ :|-]+$", r)]
    names = [n.strip(" `") for r in rows[1:] for n in re.sub(r"\([^)]*\)", "", r.split("|")[1]).split(",") if n.strip()]
    assert sorted(names) == sorted(FAMILIES), set(names) ^ set(FAMILIES)


def test_family_notes_list_every_family_once():
    """The per-family notes on the Hugging Face page cover every family (until the records generate them too)."""
    from symformer.integrations.hf import FAMILIES

    section = (ROOT / "docs" / "huggingface.md").read_text().split("## Per-family notes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| family (`model_type`)"), "the notes table moved"
    names = [n.strip() for r in rows[1:] for n in re.sub(r"\([^)]*\)", "", r.split("|")[1]).split(",") if n.strip()]
    assert sorted(names) == sorted(FAMILIES), set(names) ^ set(FAMILIES)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "gen" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "docs" / "gen"))  # claims.py imports claims_data beside it
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "docs" / "gen"))
    return mod


def test_make_docs_without_the_extra_names_it(monkeypatch, capsys):
    build = _load("build")
    monkeypatch.setattr(build, "_importable", lambda name: name != "mkdocs_gen_files")
    assert build.main() == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "pip install 'symformer[docs]'" in out and "mkdocs_gen_files" in out


def test_claims_index_describes_every_cited_statement():
    claims = _load("claims")
    assert claims.missing(ROOT) == []  # add a line to docs/gen/claims_data.py for each one listed
    cited = claims.citations(ROOT)
    unused = [k for k in claims.ENTRIES if k not in cited]
    assert unused == [], f"entries nothing cites (remove them): {unused}"


def test_claims_scan_attributes_by_place_and_name():
    claims = _load("claims")
    text = "x = 1  # T2.9\n# the teleportation paper Sec. 3 and eq. (9); Prop. C.4\n"
    found = {claims.normalise(m): m for m in claims.PATTERN.finditer(text)}
    assert set(found) == {"T2.9", "Sec. 3", "eq. (9)", "Prop. C.4"}
    before = text[: found["Sec. 3"].start()]
    assert claims.paper_of("Sec. 3", "src/symformer/attention/plash.py", before) == "teleport"
    assert claims.paper_of("Prop. C.4", "src/symformer/attention/plash.py") == "plash"
    assert claims.paper_of("T2.9", "src/symformer/teleport/groups.py") == "espr"
    assert claims.paper_of("Fig. 2", "src/symformer/cli.py") is None  # unattributed: the index check then fails


def test_headline_numbers_come_from_the_recorded_run():
    """A headline is written by hand; each number in it must appear in its run's results.json or report.md, so a
    re-recorded run with other numbers fails here until the headline is rewritten."""
    sd = _symdocs()
    for name, headline in sd.HEADLINES.items():
        run = ROOT / "results" / name
        text = (run / "results.json").read_text() + (run / "report.md").read_text()
        for number in re.findall(r"\d+(?:\.\d+)?", headline):
            assert number in text, f"HEADLINES[{name!r}]: {number} is not in results/{name}/"


#: what a clone of the repository lacks: the reading notes (NOTES.md) and the other files of ../shared. Cite the
#: paper's statement id (the claims index) or state our own choice instead. The data directory's fallback
#: ../shared/data is behaviour (symformer.data.paths), so the pages that document it may name it.
OUTSIDE = re.compile(r"\bNOTES\b|(?:\.\./|/work/)shared\b(?!/data\b)")


def outside_citations(text: str, name: str) -> list[str]:
    """'name:line: text' for each line of `text` that points at a file outside the repository."""
    return [f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_repository_cites_nothing_outside_it():
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "src" / "symformer").rglob("*.py")) + sorted(
        p for p in (ROOT / "docs").rglob("*") if p.is_file()
    )
    assert len(files) > 120  # the scan reads the package and the pages, not an empty folder
    hits = [h for f in files for h in outside_citations(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not hits, "citations of files outside the repository:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line",
    [
        "x = 1  # the default of NOTES 4",
        '    """rho_i = 1/|w| (NOTES.md §3)."""',
        "psi = nn.Linear(a, b)  # (NOTES default)",
        "Start with `../shared/design.md` and the paper notes.",
        "`L<n>` is the line of `/work/shared/papers/fact-storing-mlps.txt`",
    ],
)
def test_outside_scan_catches_a_planted_citation(line):
    assert outside_citations(f"clean: T2.9, Prop. C.4, our notes\n{line}\n", "planted.py") == [
        f"planted.py:2: {line.strip()}"
    ]


def test_outside_scan_allows_the_data_fallback():
    assert outside_citations("else ./data or `../shared/data` if present; the shared notes", "paths.py") == []
