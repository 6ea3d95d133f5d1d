"""`executors` suite: what an engine costs over the local process pool on `reproduce teleport --quick`.

Each round runs `symformer reproduce teleport --quick --jobs 2 --executor E` for E = local, ray (a local
instance), submitit (its LocalExecutor, running two long-lived slots) back to back, each in a fresh process and a
fresh --out, so the machine's state (other load, caches) is shared by the three within a round. An engine's
one-time start-up (ray.init; building submitit's executor) is printed by the CLI ("[engine] ... started in S s")
and reported beside its wall time; the overhead ratio excludes it: (wall - start-up) / local wall of the same
round, and the suite's metric is the median over rounds. Every round is a row. An engine whose extra is not
installed is skipped with a note. Quick: 1 round; otherwise 3.
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from symformer.benchmarks.base import BenchContext, BenchResult, suite, timed_call

ENGINES = {"local": None, "ray": "ray", "submitit": "submitit"}  # engine: module its extra installs


def _run_once(engine: str, out: Path, experiment: str) -> dict:
    """Wall seconds of one `reproduce` call in a fresh process, and the engine's start-up it printed."""
    env = {**os.environ, "SYMFORMER_SUBMITIT_CLUSTER": os.environ.get("SYMFORMER_SUBMITIT_CLUSTER", "local")}
    cmd = [
        sys.executable,
        "-m",
        "symformer.cli",
        "reproduce",
        experiment,
        "--quick",
        "--jobs",
        "2",
        "--executor",
        engine,
        "--out",
        str(out),
    ]
    wall, proc = timed_call(lambda: subprocess.run(cmd, env=env, capture_output=True, text=True))  # a subprocess
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    found = re.search(r"\[engine\] .* started in ([0-9.]+) s", proc.stderr)
    return {"wall_s": wall, "startup_s": float(found.group(1)) if found else 0.0}


@suite(
    "executors",
    "reproduce teleport --quick on the local pool, a local Ray instance and submitit's local "
    "executor, interleaved: overhead (start-up excluded) and start-up",
    by_name_only=True,
)
def run(ctx: BenchContext) -> BenchResult:
    rounds, experiment = (1 if ctx.quick else 3), "teleport"
    engines = [e for e, mod in ENGINES.items() if mod is None or importlib.util.find_spec(mod) is not None]
    notes = [f"{e}: extra not installed, skipped" for e in ENGINES if e not in engines]
    rows = []
    for r in range(rounds):
        for engine in engines:
            got = _run_once(engine, ctx.out_dir / "runs" / f"{engine}-{r}", experiment)
            rows.append({"round": r, "executor": engine, **got})
            if ctx.progress:
                print(
                    f"[executors] round {r} {engine}: {got['wall_s']:.1f} s (start-up {got['startup_s']:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    ratios = {}
    for engine in engines:
        if engine == "local":
            continue
        per_round = [
            (e["wall_s"] - e["startup_s"]) / loc["wall_s"]
            for loc, e in zip(
                [x for x in rows if x["executor"] == "local"], [x for x in rows if x["executor"] == engine]
            )
        ]
        ratios[f"executor_overhead_{engine}"] = statistics.median(per_round)
        ratios[f"executor_startup_seconds_{engine}"] = statistics.median(
            x["startup_s"] for x in rows if x["executor"] == engine
        )
    return BenchResult(
        rows=rows,
        ratios=ratios,
        notes=notes,
        config={
            "experiment": experiment,
            "quick_experiment": True,
            "jobs": 2,
            "rounds": rounds,
            "engines": engines,
            "goal": "executor_overhead_* <= 1.3",
        },
    )
