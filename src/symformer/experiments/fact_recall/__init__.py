"""Experiment `fact-recall`: fact-storing MLPs inside transformers (fact-storing-mlps.txt Sec. 5, App. A.2-A.3).
plan: options and the recorded jobs; runs, search and lm_runs: the job functions; claims and lm_claims: the
verdicts; report: the registered run."""

from __future__ import annotations

from symformer.experiments.fact_recall.report import run  # noqa: F401
