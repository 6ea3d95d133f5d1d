"""Experiment `precision`: every part in bfloat16 and float16 against a float64 reference. plan: dtypes,
routes, goals and the typed plan; rotation_checks, hf_checks and train_checks: the measurements; claims and report:
the verdicts and the registered run. The checks are numerics against float64 and run on the CPU."""

from __future__ import annotations

from symformer.experiments.precision.plan import PrecisionPlan  # noqa: F401
from symformer.experiments.precision.report import run  # noqa: F401
