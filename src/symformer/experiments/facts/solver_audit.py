"""The decodability solver against cvxpy and the hull LP on EVERY fact set that `reproduce facts` computes rho on
(issue 45: "rho_solver_false_non_vertices 0, and the solver's agreement with cvxpy kept at <= 1e-6, on every fact
set of the run"). Part (f) checks 12 sets of its own; parts (a)-(e) compute rho on other sets without a check.

`fact_sets` derives the sets from the plan itself: it calls every point function of `plan.jobs` with the expensive
parts stubbed out and notes each matrix passed to `decodability`, named by the calls that made it (make_fact_set,
sample_embeddings, laws.whitened, laws.offset, with their arguments). A change of the plan or of a point's seeds
therefore changes the audited sets with it. Sets with the same values (sha256 of the float64 matrix) are audited
once. `audit` records one job per set (run_jobs: atomic records, --resume) under OUT/facts/solver_check/ and writes
the summary OUT/facts/solver_check.json. Each set's check rebuilds the set from its recipe and refuses one whose
digest moved.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch

from symformer._rng import generator
from symformer._validation import check_int
from symformer.experiments.facts import laws as facts_laws
from symformer.experiments.facts import runs as facts_runs
from symformer.experiments.facts.plan import FactsPlan, jobs
from symformer.facts import embeddings
from symformer.facts.decodability import Decodability, decodability
from symformer.facts.reference import solver_check
from symformer.results import write_json
from symformer.runner.jobs import Job, one_thread, recorded_plan, run_jobs

TOL = 1e-6  # issue 45: |rho_i - cvxpy| <= 1e-6 on every fact set
VERSION = "1"  # of what a set's check computes: a --resume refuses a folder of another version (PLAN.json)
# anchors per set: a seeded random sample plus the anchors of smallest rho_i (rho itself, and every claimed
# non-vertex first, where a false non-vertex would show); a set with no more values than that is checked whole
ANCHORS = {True: (8, 4), False: (32, 8)}
# the calls whose results a point computes rho on, by where runs.py looks them up
BUILDERS = {
    "make_fact_set": (facts_runs, "make_fact_set"),
    "sample_embeddings": (facts_runs, "sample_embeddings"),
    "whitened": (facts_laws, "whitened"),
    "offset": (facts_laws, "offset"),
}
_SHORT = {"n_facts": "F", "kappa": "k", "seed": "s"}


def _digest(V: torch.Tensor) -> str:
    V = V.detach().double().contiguous()
    return hashlib.sha256(str(tuple(V.shape)).encode() + V.numpy().tobytes()).hexdigest()[:16]


@dataclass
class _TracedSearch:
    """What a stubbed capacity search returns while the plan is traced: no size found."""

    size: None = None
    params: None = None
    bits_per_param: None = None
    info_bits: None = None
    evaluations: dict = field(default_factory=dict)


class _TracedMLP:
    """What a stubbed MLP build returns while the plan is traced."""

    accuracy = 0.0

    def n_params(self) -> int:
        return 0


def _stubs(seen: dict, got: list) -> dict:
    """Stand-ins for the point's expensive calls; `decodability` notes its input (by the recipe `seen` holds)."""

    def rho(V, *a, **kw):
        if id(V) not in seen:
            raise RuntimeError("solver audit: a point computes rho on a matrix not made by " + ", ".join(BUILDERS))
        got.append((seen[id(V)], V))
        n, d = V.shape
        return Decodability(1.0, torch.ones(n, dtype=torch.float64), torch.zeros(n, d, dtype=V.dtype), [])

    search = _TracedSearch()
    return {
        (facts_runs, "decodability"): rho,
        (facts_runs, "method_capacity"): lambda *a, **kw: search,
        (facts_runs, "build_fact_mlp"): lambda *a, **kw: _TracedMLP(),
        (facts_runs, "coherence"): lambda *a, **kw: 0.0,
        (facts_laws, "ntk_search"): lambda *a, **kw: {"params": None, "params_at_cap": None, "reason": "traced"},
        (facts_runs, "solver_check"): lambda *a, **kw: {},
    }


def _recorder(name: str, fn, seen: dict, keep: list):
    """`fn` that also files its result (and a FactSet's values) under its recipe {builder, args}."""
    sig = inspect.signature(fn)

    def wrapped(*a, **kw):
        out = fn(*a, **kw)
        args = {k: seen.get(id(v), v) for k, v in sig.bind(*a, **kw).arguments.items()}
        recipe = {"builder": name, "args": args}
        for obj in (out, getattr(out, "values", None)):
            if obj is not None:
                seen[id(obj)] = recipe
                keep.append(obj)  # alive until the trace ends: ids are not reused
        return out

    return wrapped


def trace(job: Job) -> list[tuple[dict, torch.Tensor]]:
    """[(recipe, values)] of every matrix the point `job` computes rho on, in call order (nothing is solved)."""
    fn = getattr(job.fn, "fn", job.fn)
    seen, keep, got = {}, [], []
    state = torch.get_rng_state()  # a point seeds the global stream: leave the caller's as it was
    try:
        # one thread, as run_jobs runs a point: the whitened sets' rounding depends on the thread count
        with ExitStack() as stack, one_thread():
            for name, (mod, attr) in BUILDERS.items():
                stack.enter_context(mock.patch.object(mod, attr, _recorder(name, getattr(mod, attr), seen, keep)))
            for (mod, attr), stub in _stubs(seen, got).items():
                stack.enter_context(mock.patch.object(mod, attr, stub))
            fn(**job.kwargs)
    finally:
        torch.set_rng_state(state)
    return got


def build(recipe: dict) -> torch.Tensor:
    """The values a recipe of `trace` makes, rebuilt by the same calls."""
    args = {k: build(v) if isinstance(v, dict) and "builder" in v else v for k, v in recipe["args"].items()}
    mod, attr = BUILDERS[recipe["builder"]]
    return getattr(mod, attr)(**args)


def _values(obj) -> torch.Tensor:
    return obj.values if isinstance(obj, embeddings.FactSet) else obj


def set_key(recipe: dict) -> str:
    """A record name for a recipe: F=256_d=32_k=100_s=7_whitened, emb_n=240_d=16_s=1, ..."""
    args, name = recipe["args"], recipe["builder"]
    inner = [set_key(v) for v in args.values() if isinstance(v, dict)]
    own = [f"{_SHORT.get(k, k)}={v:g}" if isinstance(v, float) else f"{_SHORT.get(k, k)}={v}" for k, v in args.items()]
    own = [o for o, v in zip(own, args.values()) if not isinstance(v, dict)]
    parts = inner + ([] if name == "make_fact_set" else ["emb" if name == "sample_embeddings" else name]) + own
    return "_".join(parts).replace("+", "")


def fact_sets(quick: bool, seed: int = 0) -> list[dict]:
    """Every distinct set the facts plan computes rho on: [{key, recipe, digest, n, d, used_by}], in plan order."""
    out: dict[str, dict] = {}
    for part_jobs in jobs(FactsPlan.for_run(quick), quick, seed).values():
        for job, _ in part_jobs:
            for i, (recipe, V) in enumerate(trace(job)):
                dg = _digest(V)
                entry = out.setdefault(dg, {"key": set_key(recipe), "recipe": recipe, "digest": dg})
                entry.update(n=V.shape[0], d=V.shape[1])
                entry.setdefault("used_by", []).append(f"{job.key}#{i}")
    sets = list(out.values())
    keys = [s["key"] for s in sets]
    if len(set(keys)) != len(keys):
        raise RuntimeError(f"solver audit: two sets share a record name among {sorted(keys)}")
    return sets


def check_set(recipe: dict, digest: str, n_random: int, n_lowest: int, seed: int) -> dict:
    """One set's check (a job): our rho_i on all values, then `solver_check` on a seeded sample of anchors plus the
    n_lowest smallest rho_i. CPU seconds (process_time) of both steps are recorded."""
    V = _values(build(recipe))
    if _digest(V) != digest:
        raise RuntimeError(f"solver audit: the set {set_key(recipe)} rebuilt to digest {_digest(V)}, not {digest}")
    t0 = time.process_time()
    info = decodability(V)
    t1 = time.process_time()
    n = V.shape[0]
    pick = torch.randperm(n, generator=generator(f"solver-audit:{digest}", seed))[:n_random]
    lowest = torch.sort(info.rho_i, stable=True).indices[:n_lowest]
    anchors = sorted(set(pick.tolist()) | set(lowest.tolist()))
    out = {"n": n, "d": V.shape[1], "rho": info.rho, "max_gap": info.max_gap, "not_vertices": len(info.not_vertices)}
    try:
        out.update(solver_check(V, info.rho_i, anchors, detail=True))
    except Exception as e:  # noqa: BLE001  (an undecided hull LP: recorded as this set's error, counted)
        out.update(anchors=len(anchors), error=f"{type(e).__name__}: {e}")
    out["cpu_seconds"] = {"rho": round(t1 - t0, 3), "check": round(time.process_time() - t1, 3)}
    return out


def summarise(sets: list[dict], results: dict[str, dict], quick: bool, seed: int) -> dict:
    """The audit's numbers over the sets with a record in `results` (all of them after a complete audit)."""
    done = [s for s in sets if s["key"] in results]
    rows = {s["key"]: results[s["key"]] for s in done}
    ok = {k: r for k, r in rows.items() if "error" not in r}
    worst = max(ok, key=lambda k: ok[k]["max_abs_err"], default=None)
    total = lambda f: sum(int(r.get(f, 0)) for r in ok.values())  # noqa: E731
    summary = {
        "quick": quick,
        "seed": seed,
        "sets": len(sets),
        "sets_recorded": len(done),
        "anchors": sum(int(r["anchors"]) for r in rows.values()),
        "rho_solver_max_abs_err": None if worst is None else ok[worst]["max_abs_err"],
        "worst_set": worst,
        "rho_solver_false_non_vertices": total("false_non_vertices"),
        "false_vertices": total("false_vertices"),
        "max_duality_gap": max((r["max_gap"] for r in rows.values()), default=None),
        "cvxpy_failed": total("cvxpy_failed"),
        "cvxpy_lp_disagree": total("cvxpy_lp_disagree"),
        "not_vertices": total("not_vertices"),
        "errors": {k: r["error"] for k, r in rows.items() if "error" in r},
        "tolerance": TOL,
        "cpu_hours": sum(sum(r["cpu_seconds"].values()) for r in rows.values()) / 3600,
    }
    summary["holds"] = (
        len(done) == len(sets)
        and not summary["errors"]
        and summary["rho_solver_false_non_vertices"] == 0
        and summary["false_vertices"] == 0
        and (summary["rho_solver_max_abs_err"] or 0.0) <= TOL
    )
    summary["per_set"] = {
        s["key"]: {"n": s["n"], "d": s["d"], "used_by": s["used_by"], **_short(rows.get(s["key"]))} for s in sets
    }
    return summary


def _short(r: dict | None) -> dict:
    if r is None:
        return {"recorded": False}
    keep = ("max_abs_err", "false_non_vertices", "false_vertices", "anchors", "max_gap", "rho", "cvxpy_failed", "error")
    return {k: r[k] for k in keep if k in r}


def audit(
    out: Path,
    quick: bool = False,
    seed: int = 0,
    n_jobs: int = 1,
    resume: bool = False,
    anchors: tuple[int, int] | None = None,
    sets: list[dict] | None = None,
    log=None,
) -> dict:
    """Check every set (`fact_sets(quick, seed)` unless `sets` is given) and write OUT/facts/solver_check.json."""
    n_random, n_lowest = ANCHORS[quick] if anchors is None else anchors
    check_int("anchors", n_random, 0)
    check_int("lowest", n_lowest, 0)
    check_int("jobs", n_jobs, 1)
    sets = fact_sets(quick, seed) if sets is None else sets
    kw = dict(n_random=n_random, n_lowest=n_lowest, seed=seed)
    # costliest first (cvxpy and the LP scale with |V| d)
    jobs = [Job(s["key"], check_set, dict(recipe=s["recipe"], digest=s["digest"], **kw)) for s in sets]
    jobs.sort(key=lambda j: -next(s["n"] * s["d"] for s in sets if s["key"] == j.key))
    record_dir = Path(out) / "facts" / "solver_check"
    protocol = {"audit": "facts solver check", "version": VERSION, "quick": quick, "seed": seed, **kw}
    stats: dict = {}
    with recorded_plan(record_dir, protocol, resume):
        results = run_jobs(jobs, record_dir, n_jobs, resume, stats, log)
    summary = {**summarise(sets, results, quick, seed), "ran": stats.get("ran", 0), "reused": stats.get("reused", 0)}
    write_json(Path(out) / "facts" / "solver_check.json", summary)
    return summary
