"""Experiment `espr`: the numerical audit of the ESPR derivation (audit, audit_tools, audit_exact, audit_tiers,
audit_series, audit_bounds, audit_tier8) and the OOD translation study (ood, ood_report); report registers it."""

from __future__ import annotations

from symformer.experiments.espr.report import ood_config, run  # noqa: F401
