"""The plan of experiment `facts`: its sizes (quick or full) and its points as recorded jobs, each with its expected
cost (the order the jobs run in)."""

from __future__ import annotations

from dataclasses import dataclass

from symformer.experiments.facts import runs as facts_runs
from symformer.experiments.facts.methods import METHODS
from symformer.runner.jobs import Job

PAPER = {"gd_vs_binjl": 20.0, "gdgd_vs_gd": 4.0, "ntk_lo": 5.0, "ntk_hi": 150.0}
GD_METHODS = ["bin+jl", "bin+gd", "gd+gd", "ntk", "ntk-mo", "gd-swiglu", "gd-relu"]


@dataclass(frozen=True)
class LawPlan:
    """(c) the rho-size law and (e) the NTK gain: one (d, F), `seeds` fact sets per point."""

    d: int
    F: int
    seeds: int
    kappas: list[float]
    offsets: list[float]  # shifts t of the coherence-only family


@dataclass(frozen=True)
class WhitenPlan:
    """(d) the whitening gain per (d, kappa)."""

    dims: list[int]
    kappas: list[float]


@dataclass(frozen=True)
class SolverPlan:
    """(f) the decodability solver against cvxpy and the hull LP."""

    dims: list[int]
    kappas: list[float]
    F: int
    anchors: int


@dataclass(frozen=True)
class FactsPlan:
    """The grids of each part (lists and dicts as the report's setting rows have always printed them)."""

    dims_a: list[int]
    d_two_hot: int
    grid: dict[int, list[int]]  # (b): d -> the F of its scaling points
    by_d: dict[int, list[str]]  # (b): d -> the methods searched there
    seeds_per_point: int
    laws: LawPlan
    whiten: WhitenPlan
    ntk_kappas: list[float]
    solver: SolverPlan
    beta_d: bool  # (d) at the paper's F = beta d^2, beta = 0.25 (App. A.1.1); False: F = 4d

    @classmethod
    def for_run(cls, quick: bool) -> "FactsPlan":
        """quick: one seed, small (d, F); full: the sizes of issue #11 and Fig. 2 at d <= 128."""
        if quick:
            return cls(
                dims_a=[32, 64],
                d_two_hot=8,
                grid={32: [64, 256], 64: [256, 1024]},
                by_d={32: [m for m in GD_METHODS if m != "gd-relu"], 64: ["bin+jl"]},
                seeds_per_point=1,
                # (c): 3 kappas x (raw, whitened) + 2 offsets = 8 points per method (the GD searches dominate)
                laws=LawPlan(d=16, F=64, seeds=1, kappas=[1.0, 100.0, 1e4], offsets=[1.0, 3.0]),
                whiten=WhitenPlan(dims=[16, 32, 64], kappas=[1.0, 1e2, 1e4]),
                ntk_kappas=[1.0, 3.0, 10.0, 30.0, 100.0],
                solver=SolverPlan(dims=[16, 32], kappas=[1.0, 1e2, 1e3, 1e4], F=128, anchors=8),
                beta_d=False,
            )
        return cls(
            dims_a=[32, 64],
            d_two_hot=16,
            grid={32: [64, 128, 256], 64: [256, 512, 1024], 128: [1024, 2048, 4096]},
            by_d={32: GD_METHODS, 64: GD_METHODS, 128: ["bin+jl", "bin+gd", "ntk", "gd-swiglu", "gd+gd"]},
            seeds_per_point=2,
            laws=LawPlan(
                d=32,
                F=256,
                seeds=2,
                kappas=[1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4],
                offsets=[1.0, 2.0, 4.0],
            ),
            whiten=WhitenPlan(dims=[16, 32, 64, 128], kappas=[1.0, 1e2, 1e3, 1e4]),
            ntk_kappas=[1.0, 3.0, 10.0, 30.0, 100.0],
            solver=SolverPlan(dims=[16, 32, 64], kappas=[1.0, 1e2, 1e3, 1e4], F=256, anchors=64),
            beta_d=True,
        )


def _key(*parts: str) -> str:
    # record names allow letters, digits, '.', '_', '-', '=' (method names carry '+'; kappas are written :g)
    return "_".join(parts).replace("+", "-")


def _job(key: str, point, kwargs: dict, checkpoints: bool = False) -> Job:
    """A point of runs.py as a recorded job under the name its records carry."""
    return Job(key, facts_runs.recorded(point), kwargs, checkpoints=checkpoints)


def _gd_cost(method: str) -> float:
    return 20.0 if METHODS[method].trained else 1.0


def _construction_jobs(plan: FactsPlan, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """Parts (a) and (b): the constructions per d, the two-hot keys, and the scaling grid."""
    qs = dict(quick=quick, seed=seed)
    a = [(_job(_key("a", f"d={d}"), facts_runs.construction_point, dict(d=d, **qs)), d**3 / 4) for d in plan.dims_a]
    d2 = plan.d_two_hot
    a.append((_job(_key("a_two-hot", f"d={d2}"), facts_runs.two_hot_point, dict(d=d2, seed=seed)), 1.0))
    # the searches with GD trainings keep their evaluations and training checkpoints (work_dir) as they go
    b = [
        (
            _job(
                _key("b", f"d={d}", f"F={F}", m),
                facts_runs.scaling_point,
                dict(d=d, F=F, method=m, n_seeds=plan.seeds_per_point, **qs),
                checkpoints=METHODS[m].trained,
            ),
            F * d * _gd_cost(m),
        )
        for d, Fs in plan.grid.items()
        for F in Fs
        for m in plan.by_d[d]
    ]
    return {"a": a, "b": b}


def _law_jobs(plan: FactsPlan, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """Parts (c)-(f): the rho-size law (raw, whitened, offset), whitening, NTK and the solver check."""
    law, wh, sv = plan.laws, plan.whiten, plan.solver
    qs = dict(quick=quick, seed=seed)
    pt = dict(d=law.d, F=law.F, n_seeds=law.seeds, **qs)
    cost = law.F * law.d * 20.0
    rho = facts_runs.rho_size_point
    c = [
        (_job(_key("c", fam, f"k={k:g}"), rho, dict(kappa=k, family=fam, **pt), True), cost)
        for k in law.kappas
        for fam in ("raw", "whitened")
    ]
    offset = dict(kappa=law.kappas[0], family="offset", **pt)
    c += [(_job(_key("c_offset", f"t={t:g}"), rho, dict(shift=t, **offset), True), cost) for t in law.offsets]
    wF = (lambda d: d * d // 4) if plan.beta_d else (lambda d: 4 * d)  # noqa: E731
    d_jobs = [
        (_job(_key("d", f"d={d}", f"k={k:g}"), facts_runs.whiten_point, dict(d=d, F=wF(d), kappa=k, **qs)), wF(d) * d)
        for d in wh.dims
        for k in wh.kappas
    ]
    ntk = dict(d=law.d, F=law.F, **qs)
    e = [
        (_job(_key("e", f"k={k:g}"), facts_runs.ntk_point, dict(kappa=k, **ntk)), law.F * law.d * 5.0)
        for k in plan.ntk_kappas
    ]
    solver = dict(F=sv.F, n_anchors=sv.anchors, seed=seed)
    f = [
        (_job(_key("f", f"d={d}", f"k={k:g}"), facts_runs.solver_point, dict(d=d, kappa=k, **solver)), 1.0)
        for d in sv.dims
        for k in sv.kappas
    ]
    return {"c": c, "d": d_jobs, "e": e, "f": f}


def jobs(plan: FactsPlan, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """{part: [(job, rough cost)]}; the cost orders the jobs longest first (GD trainings dominate)."""
    return {**_construction_jobs(plan, quick, seed), **_law_jobs(plan, quick, seed)}
