"""The top-level reproduction report: OUT/report.md linking every experiment with its claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from symformer.results import Claim, atomic_write_text, claims_table, environment, fmt


def write_index(out: Path, entries: list[dict[str, Any]], quick: bool) -> Path:
    """entries: {"name", "status" (ran|skipped|error), "reason", "payload", "seconds"}."""
    lines = [
        f"# symformer reproduction report{' (quick)' if quick else ''}",
        "",
        f"git `{environment()['git_sha'][:12]}`, torch {environment()['torch']}, {environment()['threads']} threads",
        "",
        "| experiment | status | claims holding | failing | inconclusive | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        claims = [Claim(**c) for c in (e.get("payload") or {}).get("claims", [])]
        count = {v: sum(c.verdict == v for c in claims) for v in ("holds", "fails", "inconclusive")}
        link = f"[{e['name']}]({e['name']}/report.md)" if e["status"] == "ran" else e["name"]
        status = e["status"] + (f": {e['reason']}" if e.get("reason") else "")
        lines.append(
            f"| {link} | {status} | {count['holds']} | {count['fails']} | {count['inconclusive']} "
            f"| {fmt(e.get('seconds', 0.0))} |"
        )
    for e in entries:
        if e["status"] != "ran":
            continue
        p = e["payload"]
        lines += ["", f"## [{e['name']}]({e['name']}/report.md)", ""]
        claims = [Claim(**c) for c in p.get("claims", [])]
        lines.append(claims_table(claims) if claims else "_no claims_")
    path = Path(out) / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
