"""Experiment registry and run context."""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from symformer.data.paths import data_file
from symformer.integrations.hf._common import hf_unavailable
from symformer.registry import Registry, description_of
from symformer.results import ExperimentResult
from symformer.runner.jobs import recorded_plan


@dataclass
class ExperimentSpec:
    name: str
    fn: Callable[["RunContext"], ExperimentResult]
    description: str
    data_files: tuple[str, ...] = ()
    # Options a user may change with `symformer reproduce NAME --set NAME.option=value`:
    # {option: (default, one-line help)}. Defaults are what a plain run uses.
    options: dict[str, tuple[Any, str]] = field(default_factory=dict)
    # {importable module: optional extra that installs it}: checked beside data_files, so a run of every
    # experiment skips this one (with the reason) where the extra is not installed
    requires: dict[str, str] = field(default_factory=dict)
    # the version of what the experiment's points compute: bump it when a commit changes a point's result for
    # the same arguments, so that --resume refuses a runs folder of the older version (runner.jobs.recorded_plan)
    protocol: str = "1"

    def missing_requirement(self) -> str | None:
        """None when every required module imports, else the reason this experiment cannot run here."""
        import importlib.util

        for mod, extra in self.requires.items():
            if importlib.util.find_spec(mod) is None:
                return f"needs {mod} (pip install 'symformer[{extra}]')"
            if mod == "transformers":  # installed is not enough: transformers 5 disables PyTorch < 2.6
                problem = hf_unavailable()
                if problem is not None:
                    return problem
        return None

    def resolve_options(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Defaults updated by `overrides`; an unknown option or a value of another JSON type is a
        ValueError/TypeError naming the option (and, for a typo, the closest valid one)."""
        out = {k: d for k, (d, _) in self.options.items()}
        for key, val in overrides.items():
            if key not in self.options:
                known = sorted(self.options)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {self.name}.{close[0]}?" if close else ""
                raise ValueError(
                    f"--set: got unknown option {self.name}.{key}, expected one of "
                    f"{', '.join(f'{self.name}.{k}' for k in known) or '(this experiment has no options)'}"
                    f"{hint}"
                )
            default = self.options[key][0]
            ok = default is None or (type(val) is type(default)) or (type(default) is float and type(val) is int)
            if not ok:
                tname = type(default).__name__
                kind = {
                    "int": "an integer",
                    "float": "a number",
                    "str": "a string",
                    "bool": "true or false",
                    "list": "a JSON list",
                    "dict": "a JSON object",
                }.get(tname, tname)
                raise TypeError(f"--set: got {self.name}.{key}={val!r}, expected {kind} like the default {default!r}")
            out[key] = float(val) if type(default) is float else val
        return out


@dataclass
class RunContext:
    out_dir: Path
    quick: bool = True
    seed: int = 0
    data_dir: Path | None = None
    device: str = "cpu"
    progress: bool = True
    jobs: int = 1  # worker processes for experiments made of independent sub-runs (runner/jobs.py)
    resume: bool = False  # reuse sub-runs recorded under out_dir/runs by an earlier, interrupted run
    extra: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)  # the experiment's options (ExperimentSpec.options), resolved

    def data_file(self, name: str) -> Path:
        return data_file(name, self.data_dir)

    @property
    def job_log(self):
        """run_jobs' progress printer (stderr, "[<experiment>] ..."), or None without progress output."""
        if not self.progress:
            return None
        import sys

        return lambda msg: print(f"[{self.out_dir.name}] {msg}", file=sys.stderr, flush=True)


EXPERIMENTS: Registry[ExperimentSpec] = Registry("experiment", "symformer.experiments")


def experiment(
    name: str,
    description: str = "",
    data_files: tuple[str, ...] = (),
    options: dict[str, tuple[Any, str]] | None = None,
    requires: dict[str, str] | None = None,
    protocol: str = "1",
):
    """Register `fn(ctx) -> ExperimentResult` as experiment `name`; `data_files` are checked before it runs.
    `options` {name: (default, help)} are what `reproduce --set NAME.option=value` may change; the
    registered function sees every option in `ctx.options` (defaults filled in, also for direct calls).
    The run's plan (experiment, `protocol`, quick, seed, options, --full) names its runs folder
    (out_dir/runs/PLAN.json): --resume refuses a folder of another plan (runner.jobs.recorded_plan)."""

    def deco(fn):
        spec = ExperimentSpec(
            name,
            fn,
            description_of(fn, description),
            tuple(data_files),
            dict(options or {}),
            dict(requires or {}),
            protocol,
        )

        @functools.wraps(fn)
        def with_options(ctx: RunContext) -> ExperimentResult:
            ctx.options = spec.resolve_options(ctx.options)
            plan = {
                "experiment": name,
                "protocol": protocol,
                "quick": ctx.quick,
                "seed": ctx.seed,
                "options": ctx.options,
                "full": bool(ctx.extra.get("full", False)),
            }
            with recorded_plan(ctx.out_dir / "runs", plan, ctx.resume):
                return fn(ctx)

        spec.fn = with_options
        EXPERIMENTS.register(name)(spec)
        return with_options

    return deco


def load_all() -> Registry[ExperimentSpec]:
    return EXPERIMENTS.load_all()


def combined(*parts: ExperimentResult) -> ExperimentResult:
    """One result from the parts of an experiment, each of which returns its own metrics, claims, config, figures
    and notes (rather than filling shared dicts): metrics and config merged in order, the lists concatenated. A
    metric or config key given by two parts is a ValueError (one part would silently overwrite the other)."""
    out = ExperimentResult()
    for part in parts:
        for mine, theirs in ((out.metrics, part.metrics), (out.config, part.config)):
            twice = sorted(set(mine) & set(theirs))
            if twice:
                raise ValueError(f"parts: got the key {twice[0]!r} from two parts, expected each key from one part")
            mine.update(theirs)
        out.claims += part.claims
        out.figures += part.figures
        out.notes += part.notes
    return out
