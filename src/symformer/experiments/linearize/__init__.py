"""Experiment `linearize` (issue 64): plan (sizes, quick or full), runs (the job functions), report (metrics, claims,
figure, the registered run)."""

from __future__ import annotations

from symformer.experiments.linearize.report import run  # noqa: F401
