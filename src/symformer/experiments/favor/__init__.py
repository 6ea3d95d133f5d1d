"""Experiment `favor`: positive random features on rotated queries and keys (ESPR Tier 7). plan: the typed plan;
monte_carlo_check: T7.3-T7.5; runs: output error against softmax and performer-pytorch; lm: the char LM; claims and
report: the verdicts and the registered experiment."""

from __future__ import annotations

from symformer.experiments.favor.lm import lm_part, train_lm  # noqa: F401
from symformer.experiments.favor.monte_carlo_check import grid_points, monte_carlo, single_draw_variance  # noqa: F401
from symformer.experiments.favor.plan import FavorPlan  # noqa: F401
from symformer.experiments.favor.report import run  # noqa: F401
from symformer.experiments.favor.runs import output_errors, performer_diff, rotated_inputs  # noqa: F401
