"""The plan of experiment `facts`: its sizes (quick or full) and its points as recorded jobs, each with its expected
cost (the order the jobs run in)."""

from __future__ import annotations

from symformer.experiments.facts import runs as facts_runs
from symformer.experiments.facts.methods import METHODS
from symformer.experiments.jobs import Job

PAPER = {"gd_vs_binjl": 20.0, "gdgd_vs_gd": 4.0, "ntk_lo": 5.0, "ntk_hi": 150.0}
GD_METHODS = ["bin+jl", "bin+gd", "gd+gd", "ntk", "ntk-mo", "gd-swiglu", "gd-relu"]


def config(quick: bool) -> dict:
    """Grids of each part. quick: one seed, small (d, F); full: the sizes of issue #11 and Fig. 2 at d <= 128."""
    if quick:
        return {
            "dims_a": [32, 64],
            "d_two_hot": 8,
            "grid": {32: [64, 256], 64: [256, 1024]},
            "by_d": {32: [m for m in GD_METHODS if m != "gd-relu"], 64: ["bin+jl"]},
            "seeds_per_point": 1,
            # (c): 3 kappas x (raw, whitened) + 2 offsets = 8 points per method (the GD searches dominate)
            "laws": {"d": 16, "F": 64, "seeds": 1, "kappas": [1.0, 100.0, 1e4], "offsets": [1.0, 3.0]},
            "whiten": {"dims": [16, 32, 64], "kappas": [1.0, 1e2, 1e4]},
            "ntk_kappas": [1.0, 3.0, 10.0, 30.0, 100.0],
            "solver": {"dims": [16, 32], "kappas": [1.0, 1e2, 1e3, 1e4], "F": 128, "anchors": 8},
            "beta_d": False,
        }
    return {
        "dims_a": [32, 64],
        "d_two_hot": 16,
        "grid": {32: [64, 128, 256], 64: [256, 512, 1024], 128: [1024, 2048, 4096]},
        "by_d": {32: GD_METHODS, 64: GD_METHODS, 128: ["bin+jl", "bin+gd", "ntk", "gd-swiglu", "gd+gd"]},
        "seeds_per_point": 2,
        "laws": {
            "d": 32,
            "F": 256,
            "seeds": 2,
            "kappas": [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4],
            "offsets": [1.0, 2.0, 4.0],
        },
        "whiten": {"dims": [16, 32, 64, 128], "kappas": [1.0, 1e2, 1e3, 1e4]},
        "ntk_kappas": [1.0, 3.0, 10.0, 30.0, 100.0],
        "solver": {"dims": [16, 32, 64], "kappas": [1.0, 1e2, 1e3, 1e4], "F": 256, "anchors": 64},
        # (d) at the paper's F = beta d^2, beta = 0.25 (App. A.1.1); the quick plan keeps F = 4d
        "beta_d": True,
    }


def _key(*parts: str) -> str:
    # record names allow letters, digits, '.', '_', '-', '=' (method names carry '+'; kappas are written :g)
    return "_".join(parts).replace("+", "-")


def _job(key: str, point, kwargs: dict, checkpoints: bool = False) -> Job:
    """A point of runs.py as a recorded job under the name its records carry."""
    return Job(key, facts_runs.recorded(point), kwargs, checkpoints=checkpoints)


def _gd_cost(method: str) -> float:
    return 20.0 if METHODS[method].trained else 1.0


def _construction_jobs(cfg: dict, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """Parts (a) and (b): the constructions per d, the two-hot keys, and the scaling grid."""
    qs = dict(quick=quick, seed=seed)
    a = [(_job(_key("a", f"d={d}"), facts_runs.construction_point, dict(d=d, **qs)), d**3 / 4) for d in cfg["dims_a"]]
    d2 = cfg["d_two_hot"]
    a.append((_job(_key("a_two-hot", f"d={d2}"), facts_runs.two_hot_point, dict(d=d2, seed=seed)), 1.0))
    # the searches with GD trainings keep their evaluations and training checkpoints (work_dir) as they go
    b = [
        (
            _job(
                _key("b", f"d={d}", f"F={F}", m),
                facts_runs.scaling_point,
                dict(d=d, F=F, method=m, n_seeds=cfg["seeds_per_point"], **qs),
                checkpoints=METHODS[m].trained,
            ),
            F * d * _gd_cost(m),
        )
        for d, Fs in cfg["grid"].items()
        for F in Fs
        for m in cfg["by_d"][d]
    ]
    return {"a": a, "b": b}


def _law_jobs(cfg: dict, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """Parts (c)-(f): the rho-size law (raw, whitened, offset), whitening, NTK and the solver check."""
    law, wh, sv = cfg["laws"], cfg["whiten"], cfg["solver"]
    qs = dict(quick=quick, seed=seed)
    pt = dict(d=law["d"], F=law["F"], n_seeds=law["seeds"], **qs)
    cost = law["F"] * law["d"] * 20.0
    rho = facts_runs.rho_size_point
    c = [
        (_job(_key("c", fam, f"k={k:g}"), rho, dict(kappa=k, family=fam, **pt), True), cost)
        for k in law["kappas"]
        for fam in ("raw", "whitened")
    ]
    offset = dict(kappa=law["kappas"][0], family="offset", **pt)
    c += [(_job(_key("c_offset", f"t={t:g}"), rho, dict(shift=t, **offset), True), cost) for t in law["offsets"]]
    wF = (lambda d: d * d // 4) if cfg["beta_d"] else (lambda d: 4 * d)  # noqa: E731
    d_jobs = [
        (_job(_key("d", f"d={d}", f"k={k:g}"), facts_runs.whiten_point, dict(d=d, F=wF(d), kappa=k, **qs)), wF(d) * d)
        for d in wh["dims"]
        for k in wh["kappas"]
    ]
    ntk = dict(d=law["d"], F=law["F"], **qs)
    e = [
        (_job(_key("e", f"k={k:g}"), facts_runs.ntk_point, dict(kappa=k, **ntk)), law["F"] * law["d"] * 5.0)
        for k in cfg["ntk_kappas"]
    ]
    solver = dict(F=sv["F"], n_anchors=sv["anchors"], seed=seed)
    f = [
        (_job(_key("f", f"d={d}", f"k={k:g}"), facts_runs.solver_point, dict(d=d, kappa=k, **solver)), 1.0)
        for d in sv["dims"]
        for k in sv["kappas"]
    ]
    return {"c": c, "d": d_jobs, "e": e, "f": f}


def plan(cfg: dict, quick: bool, seed: int) -> dict[str, list[tuple[Job, float]]]:
    """{part: [(job, rough cost)]}; the cost orders the jobs longest first (GD trainings dominate)."""
    return {**_construction_jobs(cfg, quick, seed), **_law_jobs(cfg, quick, seed)}
