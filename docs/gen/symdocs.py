"""Generated parts of the documentation: the verdict tables (results/*/results.json), the benchmark tables
(results/bench/*/results.json), the Hugging Face family table (the integration's per-family records) and the
claims index (every paper statement id cited in src/ and results/).

The docs pages hold `<!-- gen:NAME ARG -->` markers that `pages.py` (the mkdocs-gen-files script) replaces with
`render(NAME, ARG)` in the built site. A marker closed by `<!-- /gen -->` holds its content in the repository too
(`<!-- gen:family-count -->44<!-- /gen -->`, or a table between the two on lines of its own), so the page reads the
same on GitHub: `python docs/gen/symdocs.py pages` rewrites those contents from the code and results/, and
tests/test_docs_generated.py checks they are current. The README's verdict table is kept equal to
`readme_verdicts()` by `python docs/gen/symdocs.py readme` and checked by tests/test_docs.py. Nothing here is part of
the library."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ("holds", "fails", "inconclusive")
MARKER = re.compile(r"<!-- gen:(?P<name>[a-z-]+)(?: (?P<arg>[^ ]+))? -->")
BLOCK = re.compile(r"<!-- gen:(?P<name>[a-z-]+)(?: (?P<arg>[^ ]+))? -->(?P<body>.*?)<!-- /gen -->", re.S)
README_START, README_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"

#: the headline finding of each experiment's recorded run, in one line (the counts beside it are generated)
HEADLINES = {
    "espr": "the derivation's algebra holds in float64; 17 bounds fail as printed (counterexamples in the report); "
    "ESPR vs STRING out of distribution is inconclusive at 8 seeds",
    "extrapolation": "no positional part keeps its bpc at 8x the training context; none degrades least",
    "facts": "full protocol (114 points, d up to 128, F up to 4096): the rho law (R^2 0.981), whitening (20.8x) "
    "and the GD ratios hold; margin-optimal NTK targets gain at most 1.25x (paper 2-4x)",
    "facts-hebbian": "the authors' data-dependent Hebbian MLP reimplemented within 0.898-1.048x of their code's "
    "size; ours (hebbian-als) needs at most 0.875x their best at every recorded point where one stores "
    "(d <= 128, F <= 1024); "
    "our GD baseline needs 0.6667-0.8655x their code's; e/Fig2b-gd holds with ours (13.98-21.74x), fails with "
    "theirs (9.363-20.7x)",
    "fact-recall": "a frozen fact MLP is used for recall (>= 99% after the swap); scaling, whitening, LM swap "
    "and editing are inconclusive at our budget",
    "linearize": "PLASH after attention transfer + LoRA reaches 1.059x the softmax perplexity, FAVOR+ (Hedgehog "
    "feature map) 1.136x (target 1.10); both beat scratch training; stage 1 closes 0.848 (FAVOR+) and 0.668 (PLASH) "
    "of the swap's gap (tiny char Llama)",
    "plash": "PLASH +13.9 ± 5.9% test MSE over softmax on ETTh1 (paper +3.5%); Prop. C.4's variance bound "
    "fails for k >= 2; 0 certificate violations",
    "resolution": "RoPE-Mixed beats RoPE-Axial above the training grid (+0.0324, SE 0.0103); its lead over STRING is "
    "within noise; from the 4x4 training grid to 6x6 accuracy falls from 0.96 to 0.125-0.341 (own positions), "
    "0.694-0.804 rescaled",
    "teleport": "exact invariance and closed-form norms hold; the paper's speed-up does not appear "
    "(SPD rows fail); at App. G's operating point accuracy is unchanged",
}


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def experiment_names() -> list[str]:
    """Every registered experiment (the CLI's `reproduce --list`), read through the package's registry."""
    from symformer.experiments import load_all

    return sorted(load_all().names())


def recorded(root: Path = ROOT) -> dict[str, dict]:
    """results.json of each recorded experiment run, by experiment name."""
    out = {}
    for path in sorted((root / "results").glob("*/results.json")):
        data = _read_json(path)
        if "experiment" in data and "claims" in data:
            out[data["experiment"]] = data
    return out


def verdict_counts(result: dict) -> Counter:
    counts = Counter(c["verdict"] for c in result["claims"])
    unknown = set(counts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"results.json of {result['experiment']}: unknown verdicts {sorted(unknown)}")
    return counts


def verdict_table(link_prefix: str, root: Path = ROOT, names: list[str] | None = None) -> str:
    """One row per experiment: holds / fails / inconclusive counts, headline and link to the recorded report
    (`link_prefix` + "<name>/report.md"); an experiment without a recorded run says how to run it."""
    runs = recorded(root)
    rows = ["| experiment | holds | fails | inconclusive | headline | recorded report |", "|---|---|---|---|---|---|"]
    for name in names if names is not None else experiment_names():
        if name not in runs:
            rows.append(f"| `{name}` | - | - | - | not recorded in results/: `symformer reproduce {name}` | - |")
            continue
        if name not in HEADLINES:
            raise KeyError(f"docs/gen/symdocs.py HEADLINES has no headline for the recorded experiment {name!r}")
        c = verdict_counts(runs[name])
        link = f"[{name}/report.md]({link_prefix}{name}/report.md)"
        rows.append(f"| `{name}` | {c['holds']} | {c['fails']} | {c['inconclusive']} | {HEADLINES[name]} | {link} |")
    return "\n".join(rows)


def readme_verdicts(root: Path = ROOT) -> str:
    return verdict_table("results/", root)


def update_readme(root: Path = ROOT) -> bool:
    """Rewrite the README's verdict table from results/; True when it changed."""
    path = root / "README.md"
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    new = f"{head}{README_START}\n{readme_verdicts(root)}\n{README_END}{tail}"
    path.write_text(new, encoding="utf-8")
    return new != text


def _cell(text: object, limit: int = 160) -> str:
    """Text for a table cell: '|' escaped, '<' and '>' as entities (E<x, y> is not an HTML tag), one line."""
    s = str(text).replace("\n", " ")
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def experiment_section(name: str, root: Path = ROOT) -> str:
    """The registry's description, data files and options of one experiment, then its recorded run (command,
    commit, when) and the verdict of each claim, from results/<name>/results.json."""
    from symformer.experiments import load_all

    spec = load_all().get(name)
    lines = [f"*{spec.description}*", ""]
    if spec.data_files:
        lines.append("Data files: " + ", ".join(f"`{f}`" for f in spec.data_files) + ".")
    for opt, (default, help_) in spec.options.items():
        lines.append(f"- `--set {name}.{opt}={json.dumps(default)}`: {help_}")
    lines.append("")
    run = recorded(root).get(name)
    if run is None:
        lines.append(f"No run is recorded under results/. `symformer reproduce {name} --out out` makes one.")
        return "\n".join(lines)
    env = run.get("environment", {})
    c = verdict_counts(run)
    lines += [
        f"**Recorded run** ([report](results/{name}/report.md), [provenance](results/{name}/PROVENANCE.md)):"
        f" `{env.get('command', '?')}`, commit `{str(env.get('git_sha', '?'))[:7]}`, finished"
        f" {env.get('finished_at', '?')}, {'quick' if run.get('quick') else 'full'} mode."
        f" Verdicts: {c['holds']} hold, {c['fails']} fail, {c['inconclusive']} inconclusive.",
        "",
        "| id | statement | verdict | measured |",
        "|---|---|---|---|",
    ]
    for claim in run["claims"]:
        lines.append(
            f"| {_cell(claim['id'], 40)} | {_cell(claim['statement'])} | **{claim['verdict']}** "
            f"| {_cell(claim['measured'])} |"
        )
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return _cell(value, 80)


def bench_section(suite: str, root: Path = ROOT) -> str:
    """The ratios and timing rows of results/bench/<suite>/results.json, as recorded."""
    path = root / "results" / "bench" / suite / "results.json"
    data = _read_json(path)
    env = data.get("environment", {})
    lines = []
    if env:
        lines += [
            f"Recorded with `{env.get('command', '?')}` at commit `{str(env.get('git_sha', '?'))[:7]}` on"
            f" {env.get('machine', '?')} ({env.get('threads', '?')} threads, torch {env.get('torch', '?')},"
            f" device {env.get('device', '?')}), finished {env.get('finished_at', '?')}.",
            "",
        ]
    lines += ["| ratio | value |", "|---|---|"]
    lines += [f"| `{k}` | {_fmt(v)} |" for k, v in data.get("ratios", {}).items()]
    rows = data.get("rows", [])
    if rows:
        cols = list(dict.fromkeys(k for row in rows for k in row))
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_fmt(row.get(c, "")) for c in cols) + " |" for row in rows]
    return "\n".join(lines)


def family_table() -> str:
    """The Hugging Face family table, rendered from the integration's per-family records
    (`symformer.integrations.hf.families.family_table_markdown`): never written by hand."""
    from symformer.integrations.hf.families import family_table_markdown

    return family_table_markdown()


def render(name: str, arg: str | None, root: Path = ROOT) -> str:
    if name == "verdicts":
        return verdict_table("results/", root)
    if name == "experiment":
        return experiment_section(arg, root)
    if name == "bench":
        return bench_section(arg, root)
    if name == "families":
        return family_table()
    if name == "family-count":
        from symformer.integrations.hf import FAMILIES

        return str(len(FAMILIES))
    if name == "claims":
        from claims import claims_page  # docs/gen/claims.py, beside this file

        return claims_page(root)
    raise ValueError(f"docs marker: got gen:{name}, expected one of verdicts, experiment, bench, families, claims")


def expand(text: str, root: Path = ROOT) -> str:
    """The page as the site shows it: every marker (and a block's committed content) replaced by its rendering."""
    text = BLOCK.sub(lambda m: render(m.group("name"), m.group("arg"), root), text)
    return MARKER.sub(lambda m: render(m.group("name"), m.group("arg"), root), text)


def _block(m: re.Match, root: Path) -> str:
    """A block with fresh content: inline for a one-line rendering, else on lines of its own (blank lines around a
    table, which Markdown needs)."""
    body = render(m.group("name"), m.group("arg"), root).strip("\n")
    opening = m.group(0)[: m.start("body") - m.start()]
    return f"{opening}{body}<!-- /gen -->" if "\n" not in body else f"{opening}\n\n{body}\n\n<!-- /gen -->"


def refresh(text: str, root: Path = ROOT) -> str:
    """The page with every committed block's content regenerated (markers kept)."""
    return BLOCK.sub(lambda m: _block(m, root), text)


def pages_with_blocks(root: Path = ROOT) -> list[Path]:
    return [
        p for p in sorted((root / "docs").rglob("*.md")) if "gen" not in p.parent.parts and BLOCK.search(p.read_text())
    ]


def update_pages(root: Path = ROOT) -> list[Path]:
    """Rewrite the committed blocks of the docs pages; the pages that changed."""
    changed = []
    for path in pages_with_blocks(root):
        text = path.read_text(encoding="utf-8")
        new = refresh(text, root)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


USAGE = """usage: python docs/gen/symdocs.py readme|pages
  readme  rewrites README.md's verdict table from results/
  pages   rewrites the generated blocks committed in docs/ (<!-- gen:NAME -->...<!-- /gen -->)"""

if __name__ == "__main__":
    if sys.argv[1:] not in (["readme"], ["pages"]):
        sys.exit(USAGE)
    sys.path.insert(0, str(ROOT / "src"))
    if sys.argv[1] == "readme":
        print("README.md verdict table " + ("updated" if update_readme() else "already current"))
    else:
        changed = update_pages()
        print(f"docs pages: {len(changed)} updated" + "".join(f"\n  {p.relative_to(ROOT)}" for p in changed))
