"""Registered benchmark suites: timed side by side in one process; rows plus ratios."""

from __future__ import annotations

from symformer.benchmarks.base import SUITES, BenchContext, BenchResult, load_all, suite  # noqa: F401
