"""Experiment `facts-hebbian`: the fact-storing MLP constructions of the paper's later version ("MLPs are Hebbians",
the authors' HazyResearch/hebbian-mlps) side by side with ours, under both their baseline protocols and ours.
plan: the grid and its jobs; runs: the point function; report: metrics, claims and the registered run."""

from __future__ import annotations

from symformer.experiments.facts_hebbian.report import run  # noqa: F401
