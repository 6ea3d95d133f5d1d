"""The results format of docs/design.md (Conventions): OUT/<name>/results.json, report.md and figures.

A verdict is always computed from the numbers of the run (see `verdict`), never written as a constant.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

VERDICTS = ("holds", "fails", "inconclusive")


@dataclass
class Claim:
    id: str
    statement: str
    paper: str
    measured: str
    verdict: str
    evidence: str = ""
    setting: str = ""  # ours: model size, data set, seeds ... (docs/design.md results format)
    paper_setting: str = ""  # the paper's, for the same claim

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: got {self.verdict!r}, expected one of {', '.join(VERDICTS)}")


def verdict(ok: bool | None) -> str:
    """Map a measured comparison to a verdict; None means the run could not decide."""
    if ok is None:
        return "inconclusive"
    return "holds" if ok else "fails"


@dataclass
class ExperimentResult:
    metrics: dict[str, Any] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@functools.cache
def git_sha() -> str:
    """HEAD's commit, with "+dirty" when tracked files differ from it: a record made by uncommitted code must not
    name a commit as if that commit had produced it. Read once per process (run_jobs reads it before the first
    job): a process runs the code it imported, so a commit made in the checkout while a long run records must not
    be named by the run's later records."""
    here = Path(__file__).resolve().parent
    try:

        def git(*args: str) -> str:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=here).stdout.strip()

        sha = git("rev-parse", "HEAD")
        if not sha:
            return "unknown"
        return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except Exception:
        return "unknown"


def environment(device: str = "cpu") -> dict[str, Any]:
    """Where a result came from: commit, the command that ran, the machine, the finish time (a recorded run
    under results/ must say all of them)."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "git_sha": git_sha(),
        "device": device,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "host": platform.node(),
        "command": _COMMAND,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


_COMMAND: str | None = None  # the command line that is running, set by the CLI (None from Python)


def set_command(argv: list[str]) -> None:
    """Record the running command line (`symformer ...`), so that every results.json says what produced it."""
    global _COMMAND
    _COMMAND = shlex.join(["symformer", *map(str, argv)])  # main() may be given paths


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return _jsonable(x.tolist())
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, (str, bytes)):
        try:
            return _jsonable(x.item())
        except Exception:
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def atomic_write_text(path: Path, text: str) -> None:
    """Temporary file in the same folder, fsync, os.replace: readers see the old or the new file, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(Path(path), json.dumps(_jsonable(obj), indent=2) + "\n")


def fmt(x: Any) -> str:
    if isinstance(x, float):
        if x == 0 or 1e-3 <= abs(x) < 1e5:
            return f"{x:.4g}"
        return f"{x:.3e}"
    if isinstance(x, dict):
        return ", ".join(f"{k}: {fmt(v)}" for k, v in x.items())
    return str(x)


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def claims_table(claims: list[Claim]) -> str:
    lines = [
        "| id | statement | paper | measured | verdict | setting | paper setting |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        cells = (c.id, c.statement, c.paper, c.measured, f"**{c.verdict}**", c.setting, c.paper_setting)
        lines.append("| " + " | ".join(_md_escape(x) for x in cells) + " |")
    return "\n".join(lines)


def write_experiment(
    out_dir: Path, name: str, quick: bool, result: ExperimentResult, device: str = "cpu", seconds: float | None = None
) -> dict[str, Any]:
    out_dir = Path(out_dir)
    payload = {
        "experiment": name,
        "quick": quick,
        "metrics": result.metrics,
        "claims": [asdict(c) for c in result.claims],
        "config": result.config,
        "environment": environment(device),
    }
    if seconds is not None:
        payload["seconds"] = round(seconds, 2)
    write_json(out_dir / "results.json", payload)
    md = [f"# {name}{' (quick)' if quick else ''}", ""]
    if result.claims:
        md += ["## Claims", "", claims_table(result.claims), ""]
        md += (
            ["### Evidence", ""]
            + [f"- **{c.id}**: {_md_escape(c.evidence)}" for c in result.claims if c.evidence]
            + [""]
        )
    md += ["## Metrics", ""] + [f"- `{k}`: {fmt(v)}" for k, v in result.metrics.items()] + [""]
    if result.figures:
        md += ["## Figures", ""] + [f"![{f}]({f})" for f in result.figures] + [""]
    if result.notes:
        md += ["## Notes", ""] + [f"- {n}" for n in result.notes] + [""]
    md += ["## Environment", "", "```", json.dumps(payload["environment"], indent=1), "```", ""]
    atomic_write_text(out_dir / "report.md", "\n".join(md))
    return payload
