"""The claims index: every paper statement id cited in src/ and results/ (T2.9, Prop. C.4, Thm H.3, eq. (103),
App. G, Alg. 1, Fig. 2c, ...), attributed to its paper by where it is cited, with one line from claims_data.py.

`citations(root)` scans; `missing(root)` lists cited ids that claims_data.ENTRIES does not describe (the build
and tests/test_docs.py fail on any); `claims_page(root)` renders the page."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from claims_data import ENTRIES, PAPERS

# a statement id: ESPR's boxed T-numbers, or a kind word and a number (letters for appendix numbering)
_NUM = r"[A-H]?\.?\d+(?:\.\d+)*[a-z]?|[A-H](?:\.\d+)*"
PATTERN = re.compile(
    r"(?<![\w.])(?:"
    r"(?P<t>T\d+'?\.\d+)"
    r"|(?P<kind>Prop(?:osition)?\.?|Thm\.?|Theorem|Lemma|Cor(?:ollary)?\.?|Def(?:inition)?\.?|Assumption|"
    r"Alg(?:orithm)?\.?|Construction|Fig(?:ure)?\.?|Table|Sec(?:tion)?\.?|App(?:endix)?\.?|Step|"
    r"eqs?\.?)\s?(?P<num>\((?:\d+)\)|" + _NUM + r")"
    r")(?![\w])"
)
KINDS = {
    "prop": "Prop.",
    "proposition": "Prop.",
    "thm": "Thm",
    "theorem": "Thm",
    "lemma": "Lemma",
    "cor": "Cor.",
    "corollary": "Cor.",
    "def": "Def.",
    "definition": "Def.",
    "assumption": "Assumption",
    "alg": "Alg.",
    "algorithm": "Alg.",
    "construction": "Construction",
    "fig": "Fig.",
    "figure": "Fig.",
    "table": "Table",
    "sec": "Sec.",
    "section": "Sec.",
    "app": "App.",
    "appendix": "App.",
    "eq": "eq.",
    "eqs": "eq.",
}
#: where a citation sits says which paper it is from: a path component (split at / _ . -) names it, first match
#: wins; T-numbers are always ESPR's
PATH_PAPER = (
    ("plash", "plash"),
    ("sketch", "plash"),
    ("certificate", "plash"),
    ("forecast", "plash"),
    ("informer", "plash"),
    ("ett", "plash"),
    ("teleport", "teleport"),
    ("fact", "facts"),
    ("facts", "facts"),
    ("ssfr", "facts"),
    ("books", "facts"),
    ("editors", "facts"),
    ("favor", "espr"),
    ("espr", "espr"),
    ("positional", "espr"),
    ("extrapolation", "espr"),
)


def normalise(match: re.Match) -> str | None:
    if match.group("t"):
        return match.group("t")
    kind = KINDS.get(match.group("kind").rstrip(".").lower())
    if kind is None or match.group("kind") == "Step":
        return None
    num = match.group("num").strip("()")
    return f"eq. ({num})" if kind == "eq." else f"{kind} {num}"


#: a paper named shortly before the citation overrides the path ("teleportation paper Sec. 3"); another work's
#: name counts only right before it ("Meng et al. 2022, eq. 2"); (name, paper, characters before the citation)
NAMED = (
    ("teleportation", "teleport", 120),
    ("PLASH", "plash", 120),
    ("fact-storing", "facts", 120),
    ("Performer", "performer", 12),
    ("Higham", "higham", 20),
    ("Avron", "anw", 60),
    ("ROME (Meng", "rome", 30),
    ("MEMIT (Meng", "memit", 30),
    ("AlphaEdit (Fang", "alphaedit", 30),
)


def paper_of(ident: str, rel: str, before: str = "", after: str = "") -> str | None:
    if re.fullmatch(r"T\d+'?\.\d+", ident):
        return "espr"
    named = [(before.rfind(key) - len(before), paper) for key, paper, n in NAMED if key in before[-n:]]
    if named:
        return max(named)[1]  # the paper named last before the citation
    parts = set(re.split(r"[/_.\-]", rel.lower()))
    for key, paper in PATH_PAPER:
        if key in parts:
            return paper
    named = [(-after.find(key), paper) for key, paper, _ in NAMED if key in after]
    return max(named)[1] if named else None  # else the paper named first after it


def _files(root: Path):
    yield from sorted((root / "src" / "symformer").rglob("*.py"))
    for path in sorted((root / "results").rglob("*")):
        if path.suffix in (".md", ".json") and "runs" not in path.parts and "bench" not in path.parts:
            yield path


def citations(root: Path) -> dict[tuple[str | None, str], set[str]]:
    """(paper, id) -> the files citing it (paths relative to root)."""
    out: dict[tuple[str | None, str], set[str]] = defaultdict(set)
    for path in _files(root):
        rel = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in PATTERN.finditer(text):
            ident = normalise(m)
            if ident is not None and not ident.startswith("T") and re.match(r"-[a-z]", text[m.end() : m.end() + 2]):
                continue  # one of our claim ids ("Sec.3-hf", "C.4-mean"): the statement is cited where it is defined
            if ident is not None:
                before = text[max(0, m.start() - 120) : m.start()].split("\n\n")[-1]
                after = text[m.end() : m.end() + 200].split("\n\n")[0]
                out[(paper_of(ident, rel, before, after), ident)].add(rel)
    return dict(out)


def entries(root: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """ENTRIES, plus each T-number the `espr` experiment checks, described by its claim's statement; a statement
    the recorded run found false says so."""
    out = dict(ENTRIES)
    path = root / "results" / "espr" / "results.json"
    if path.is_file():
        for claim in json.loads(path.read_text(encoding="utf-8"))["claims"]:
            for ident in claim["id"].split("/"):
                tier = re.match(r"T(\d+'?)\.", ident)
                if not tier:
                    continue
                where, text = out.get(("espr", ident), (f"Tier {tier.group(1)}", claim["statement"]))
                if claim["verdict"] != "holds":
                    text += f" (recorded check: **{claim['verdict']}**)"
                out[("espr", ident)] = (where, text)
    return out


def missing(root: Path) -> list[tuple[str | None, str]]:
    known = entries(root)
    return sorted((k for k in citations(root) if k not in known), key=str)


def _sort_key(ident: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", ident)]


def claims_page(root: Path) -> str:
    cited, known = citations(root), entries(root)
    gaps = missing(root)
    if gaps:
        raise KeyError(f"docs/gen/claims_data.py: no entry for cited statements {gaps}")
    lines = []
    for paper, (title, source) in PAPERS.items():
        lines += [
            f"## {title} {{#{paper}}}",
            "",
            source,
            "",
            "| id | what it says | where | cited in |",
            "|---|---|---|---|",
        ]
        for (p, ident), (where, text) in sorted(known.items(), key=lambda kv: _sort_key(kv[0][1])):
            if p != paper or (p, ident) not in cited:
                continue
            files = sorted(cited[(p, ident)])
            shown = ", ".join(f"`{f.removeprefix('src/symformer/')}`" for f in files[:3])
            more = f" and {len(files) - 3} more" if len(files) > 3 else ""
            # a norm |x| must not end the cell, and E<x, y> is not an HTML tag
            text = text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f"| {ident} | {text} | {where} | {shown}{more} |")
        lines.append("")
    return "\n".join(lines)
