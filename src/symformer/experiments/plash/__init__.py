"""Experiment `plash`: sketch moments (Prop. C.4, ANW bound), the certification simulation of Fig. 2/4 and ETTh1
forecasting inside an Informer-faithful backbone. plan: the typed plan; checks and checks_report: sketches and
certificates; forecast: the recorded forecasting jobs; claims and report: the verdicts and the registered run."""

from __future__ import annotations

from symformer.experiments.plash.checks import cert_simulation, sketch_checks, tau_star  # noqa: F401
from symformer.experiments.plash.claims import band_verdict, horizon_average, relative_difference  # noqa: F401
from symformer.experiments.plash.forecast import forecast_job  # noqa: F401
from symformer.experiments.plash.plan import ForecastPlan, PlashPlan, method_kwargs, protocol  # noqa: F401
from symformer.experiments.plash.report import forecast_runs, run  # noqa: F401
