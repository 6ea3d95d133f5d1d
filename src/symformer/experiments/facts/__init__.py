"""Experiment `facts`: fact-storing MLPs, their constructions, decodability rho, capacity and scaling. plan: sizes
and the recorded points; runs: the point functions; laws: the (c)-(f) laws and their claims; claims and report:
parts (a), (b) and the registered run. Constructions and decoders run on the CPU."""

from __future__ import annotations

from symformer.experiments.facts.report import run  # noqa: F401
