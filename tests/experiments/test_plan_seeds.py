"""Every typed plan of the experiments carries the run's --seed into its full plan (issue 58 item 8): a full-plan
builder that drops `seed=seed` (and silently trains seed 0) fails here. Plans with a `seed` field must hold it; plans
with lists of seeds must start them there; plans without a seed are listed with where the seed goes instead."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import symformer.experiments as experiments
from symformer.experiments import base as ebase

SEED = 7


def _ctx(quick: bool, options: dict | None = None) -> ebase.RunContext:
    ctx = ebase.RunContext(Path("unused"), quick=quick, seed=SEED)
    ctx.options = dict(options or {})
    return ctx


def favor(quick):
    from symformer.experiments.favor.plan import FavorPlan

    p = FavorPlan.for_run(quick, SEED)
    assert p.seed == SEED and p.quick == quick


def precision(quick):
    from symformer.experiments.precision.plan import PrecisionPlan

    p = PrecisionPlan.for_run(quick, SEED, parts=("rope",), families=(), combinations=())
    assert p.seeds == ((SEED,) if quick else (SEED, SEED + 1, SEED + 2))


def plash(quick):
    from symformer.experiments.plash.plan import PlashPlan

    p = PlashPlan.from_context(_ctx(quick))
    assert p.seed == SEED and p.forecast.seeds[0] == SEED and len(set(p.forecast.seeds)) == len(p.forecast.seeds)


def teleport(quick):
    from symformer.experiments.teleport.plan import TeleportPlan

    p, p0 = TeleportPlan.for_run(quick, SEED), TeleportPlan.for_run(quick)
    assert p.seed == SEED and p0.seed == 0
    for f in ("seeds", "lr_seeds", "ablation_seeds", "demo_seeds"):  # seed 0: the recorded runs' seeds
        assert getattr(p, f) == [SEED + s for s in getattr(p0, f)], f
    assert p.as_config() == p0.as_config() | {
        k: str(getattr(p, k)) for k in ("seeds", "lr_seeds", "ablation_seeds", "demo_seeds")
    }


def extrapolation(quick):
    from symformer.experiments.extrapolation.plan import config_for

    c = config_for(quick, SEED)
    assert c.seeds == ((SEED,) if quick else (SEED, SEED + 1, SEED + 2))
    assert config_for(quick).seeds == tuple(s - SEED for s in c.seeds)


def resolution(quick):
    from symformer.experiments.resolution.plan import config_for

    c = config_for(quick, SEED)
    assert c.seeds == ((SEED,) if quick else (SEED, SEED + 1, SEED + 2))
    assert config_for(quick).seeds == tuple(s - SEED for s in c.seeds)


def espr(quick):
    from symformer.experiments.espr.report import ood_config

    c = ood_config(quick, SEED)
    assert c.seeds[0] == SEED and len(set(c.seeds)) == len(c.seeds)


def facts(quick):
    """FactsPlan holds no seed: `jobs(plan, quick, seed)` puts it in every job."""
    from symformer.experiments.facts.plan import FactsPlan, jobs

    for part, jcs in jobs(FactsPlan.for_run(quick), quick, SEED).items():
        for job, _ in jcs:
            assert job.kwargs["seed"] == SEED, (part, job.key)


def fact_recall(quick):
    """FactRecallPlan holds no seed: the LM and usability jobs read ctx.seed."""
    from symformer.experiments.fact_recall import plan as fr

    ctx = _ctx(quick, {k: default for k, (default, _) in fr.OPTIONS.items()})
    assert fr.lm_job(ctx).kwargs["seed"] == SEED
    assert {j.kwargs["seed"] for j in fr.usability_jobs(ctx, 64)} == {SEED}


def hf(quick):
    """HfPlan holds training sizes only; the report builds its models and checks from ctx.seed."""
    from symformer.experiments.hf import report
    from symformer.experiments.hf.plan import HfPlan

    assert not any("seed" in f for f in HfPlan.__dataclass_fields__)
    assert "seed=ctx.seed" in inspect.getsource(report)


def linearize(quick):
    """LinearizePlan holds sizes and budgets only; the report hands ctx.seed to every job (teacher, arms, scratch)."""
    from symformer.experiments.linearize import report
    from symformer.experiments.linearize.plan import LinearizePlan

    assert not any("seed" in f for f in LinearizePlan.__dataclass_fields__)
    assert LinearizePlan.for_run(quick) == LinearizePlan.for_run(quick)
    assert '"seed": ctx.seed' in inspect.getsource(report)


def facts_hebbian(quick):
    """facts_hebbian's Plan holds points and counts; its jobs draw fact sets from seed, seed + 1, ... of the run."""
    from symformer.experiments.facts_hebbian import plan as hp

    p = hp.Plan.for_run(quick)
    assert not any("seed" == f for f in hp.Plan.__dataclass_fields__)
    assert {job.kwargs["seed"] for job, _ in hp.jobs(p, quick, SEED)} == {SEED}


CHECKS = {
    "FavorPlan": favor,
    "PrecisionPlan": precision,
    "PlashPlan": plash,
    "TeleportPlan": teleport,
    "ExtrapolationConfig": extrapolation,
    "ResolutionConfig": resolution,
    "OODConfig": espr,
    "FactsPlan": facts,
    "FactRecallPlan": fact_recall,
    "HfPlan": hf,
    "LinearizePlan": linearize,
    "Plan": facts_hebbian,  # experiments/facts_hebbian/plan.py
}


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("plan", list(CHECKS))
def test_plan_keeps_the_seed(plan, quick):
    CHECKS[plan](quick)


def test_every_typed_plan_is_checked():
    """The typed plans: classes of experiments/<name>/plan.py with a for_run / from_context builder, and the
    configs that config_for / ood_config build. A new one must be added to CHECKS."""
    found = set()
    for info in pkgutil.iter_modules(experiments.__path__):
        if not info.ispkg:
            continue
        try:
            mod = importlib.import_module(f"symformer.experiments.{info.name}.plan")
        except ModuleNotFoundError:
            continue
        for name, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and ({"for_run", "from_context"} & set(vars(cls))):
                found.add(name)
    assert found <= set(CHECKS), sorted(found - set(CHECKS))
    assert {"FavorPlan", "PrecisionPlan", "PlashPlan", "TeleportPlan", "FactsPlan", "FactRecallPlan", "HfPlan"} <= found
