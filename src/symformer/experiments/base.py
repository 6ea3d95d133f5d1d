"""Experiment registry and run context."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from symformer.registry import Registry
from symformer.results import ExperimentResult


@dataclass
class ExperimentSpec:
    name: str
    fn: Callable[["RunContext"], ExperimentResult]
    description: str
    data_files: tuple[str, ...] = ()


@dataclass
class RunContext:
    out_dir: Path
    quick: bool = True
    seed: int = 0
    data_dir: Path | None = None
    device: str = "cpu"
    progress: bool = True
    jobs: int = 1          # worker processes for experiments made of independent sub-runs (experiments/jobs.py)
    resume: bool = False   # reuse sub-runs recorded under out_dir/runs by an earlier, interrupted run
    extra: dict = field(default_factory=dict)

    def data_file(self, name: str) -> Path:
        from symformer.data.paths import data_file
        return data_file(name, self.data_dir)


EXPERIMENTS: Registry[ExperimentSpec] = Registry("experiment")


def experiment(name: str, description: str = "", data_files: tuple[str, ...] = ()):
    """Register `fn(ctx) -> ExperimentResult` as experiment `name`; `data_files` are checked before it runs."""
    def deco(fn):
        EXPERIMENTS.register(name)(ExperimentSpec(name, fn, description or (fn.__doc__ or "").strip().split("\n")[0], tuple(data_files)))
        return fn
    return deco


def _import_package_modules(pkg_name: str) -> None:
    pkg = importlib.import_module(pkg_name)
    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.startswith("_") and mod.name not in ("base",):
            importlib.import_module(f"{pkg_name}.{mod.name}")


def load_all() -> Registry[ExperimentSpec]:
    _import_package_modules("symformer.experiments")
    return EXPERIMENTS
