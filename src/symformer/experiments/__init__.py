"""Registered experiments, one module per paper. Modules in this package are imported on
first use, so a new experiment registers itself without editing the CLI."""

from __future__ import annotations

from symformer.experiments.base import EXPERIMENTS, RunContext, experiment, load_all  # noqa: F401
