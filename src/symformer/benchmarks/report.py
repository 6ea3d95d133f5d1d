"""Write OUT/<suite>/results.json and report.md for a benchmark suite."""

from __future__ import annotations

from pathlib import Path

from symformer.results import atomic_write_text, environment, fmt, write_json


def write_bench(out: Path, name: str, quick: bool, res, device: str = "cpu", seconds: float | None = None) -> dict:
    """`seconds`: the suite's wall time (a recorded run says how long it took)."""
    payload = {
        "suite": name,
        "quick": quick,
        "rows": res.rows,
        "ratios": res.ratios,
        "config": res.config,
        "environment": environment(device),
        "seconds": seconds,
    }
    write_json(Path(out) / "results.json", payload)
    cols: list[str] = []
    for r in res.rows:
        cols += [c for c in r if c not in cols]
    md = [f"# bench {name}{' (quick)' if quick else ''}", ""]
    env = payload["environment"]
    cmd = env["command"] or "called from Python"
    md += [
        f"Commit {env['git_sha']}, `{cmd}`, {env['machine']} ({env['cpu_count']} CPUs, {env['threads']} threads, "
        f"torch {env['torch']}, device {device}), finished {env['finished_at']}"
        + (f", {seconds:.0f} s." if seconds is not None else "."),
        "",
        "## Ratios",
        "",
    ]
    md += [f"- `{k}`: {fmt(v)}" for k, v in res.ratios.items()]
    md += ["", "## Rows", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in res.rows]
    if res.figures:
        md += ["", "## Figures", ""] + [f"![{f}]({f})" for f in res.figures]
    if res.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in res.notes]
    atomic_write_text(Path(out) / "report.md", "\n".join(md) + "\n")
    return payload
