"""The SSFR size search (Sec. 5.1, App. A.2.3) and one capacity/usability point (Sec. 5.2-5.3, App. A.2.4-A.2.5)
of experiment `fact-recall`: recorded jobs (module-level, JSON in and out)."""

from __future__ import annotations

import math

from symformer._validation import check_device
from symformer.experiments.fact_recall.runs import TARGET, _memo, build_point_mlp, ssfr_point
from symformer.facts.capacity import KNOB
from symformer.facts.embeddings import random_fact_map
from symformer.facts.lm.ssfr import make_ssfr
from symformer.runner.jobs import JobFunction

#: bisection stops once the bracket (largest failing size, smallest passing size] is within 1/16 of its upper end
#: (at least 1): the answer is within 6.25% of the threshold, invisible on Fig. 3's log axes. App. A.2.3 does not
#: say how fine its binary search goes; finer steps would measure seed noise (1 seed per size here) at the cost
#: of a 20,000-epoch GD build per failing size at F = 4096 (sizes below 32 still bisect to 1).
SIZE_RESOLUTION = 16


def _ok(points: list[dict]) -> bool:
    """App. A.2.3: the maximum fact-adaptive accuracy over seeds reaches the target."""
    return max((p["fact_adaptive_accuracy"] or 0.0) for p in points) >= TARGET


def _smallest(ok, start: int, max_size: int, bisect: bool, floor: int = 1) -> int | None:
    """Smallest integer in [floor, max_size] passing `ok` (assumed monotone): doubling from `start` while it
    fails, or (with bisect) halving down to `floor` while it passes, then bisection. Under monotonicity the
    answer does not depend on `start`, only the number of calls does (each failing GD size at F = 4096 is a
    20,000-epoch build). Bisection stops at SIZE_RESOLUTION."""
    lo, hi = 0, start
    passed = ok(hi)
    while passed and bisect and hi > floor:
        nxt = max(hi // 2, floor)
        if not ok(nxt):
            lo = nxt
            break
        hi = nxt
    while not passed:
        if hi >= max_size:
            return None
        lo, hi = hi, min(2 * hi, max_size)
        passed = ok(hi)
    while bisect and lo > 0 and hi - lo > max(1, hi // SIZE_RESOLUTION):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def code_width(
    kind: str,
    n_facts: int,
    d: int,
    seeds: int,
    start: int,
    max_size: int,
    bisect: bool,
    quick: bool = True,
    work_dir: str | None = None,
) -> int | None:
    """Smallest decoder width m at which, for some seed, both built MLPs (f and f') store >= 99% of their
    facts: the storage requirement alone, found from MLP builds (no transformer is trained), built with the
    same budget as the points that use it."""

    def ok(m: int) -> bool:
        return _memo(
            work_dir, dict(code_width=kind, m=m, n_facts=n_facts, d=d, seeds=seeds, quick=quick), lambda: stores(m)
        )

    def stores(m: int) -> bool:
        for s in range(seeds):
            task = make_ssfr(n_facts, d, seed=s)
            # both must store: the second is built only when the first does (the outcome is the same)
            if build_point_mlp(kind, m, task, task.facts, s, quick).accuracy < TARGET:
                continue
            f2 = random_fact_map(n_facts, seed=10_000 + s)
            if build_point_mlp(kind, m, task, f2, s + 1, quick).accuracy >= TARGET:
                return True
        return False

    return _smallest(ok, start, max_size, bisect)


def ssfr_search(
    kind: str,
    n_facts: int,
    d: int,
    seeds: int,
    quick: bool,
    start: int,
    max_size: int,
    bisect: bool = True,
    paper_budget: bool = False,
    work_dir: str | None = None,
    device: str = "cpu",
) -> dict:
    """Smallest MLP hidden size whose max-over-seeds fact-adaptive accuracy is >= 99% (App. A.2.3).
    GD / NTK MLPs: the knob is h. Constructions (h = m h~): m is fixed at the smallest code width that
    stores the facts (`code_width`), then the gadget width h~ is searched from its minimum ceil(F/d)
    (Alg. 3: d h~ >= |K|) upward. Reading: the paper searches "the hidden size h" without saying how h
    splits into m codes x h~ units; at the minimum h~ the gadget system is square and its interpolant has
    a Lipschitz constant (eq. 8) in the thousands, which no transformer can use (Sec. 5.3).
    `device`: where each point's transformer trains (ssfr_point); the code-width builds run on the CPU."""
    check_device(device)
    seen: dict[int, list[dict]] = {}
    constructed = KNOB[kind] == "m"
    m = code_width(kind, n_facts, d, seeds, start, max_size, bisect, quick, work_dir) if constructed else None

    def ok(size: int) -> bool:
        if size not in seen:
            knob, ht = (m, size) if constructed else (size, None)
            seen[size] = [
                ssfr_point(
                    kind,
                    knob,
                    n_facts,
                    d,
                    s,
                    quick,
                    paper_budget=paper_budget,
                    h_tilde=ht,
                    work_dir=work_dir,
                    device=device,
                )
                for s in range(seeds)
            ]
        return _ok(seen[size])

    if constructed and m is None:
        hi = None
    elif constructed:
        base = math.ceil(n_facts / d)
        hi = _smallest(ok, base, base * (8 if quick else 32), bisect, floor=base)
    else:
        hi = _smallest(ok, start, max_size, bisect)
    pts = [p for ps in seen.values() for p in ps]
    faa = max((p["fact_adaptive_accuracy"] or 0.0) for p in pts) if pts else 0.0
    params = None if hi is None else max(p["params"] for p in seen[hi])
    below = max((s for s in seen if (hi is None or s < hi) and not _ok(seen[s])), default=None)
    return {
        "kind": kind,
        "n_facts": n_facts,
        "d": d,
        "m": m,
        "h_tilde": hi if constructed else None,
        "min_size": None if hi is None else (m * hi if constructed else hi),
        "min_params": params,
        # the bracket's lower end: the largest size tried that failed below min_size (within SIZE_RESOLUTION of
        # it), or the largest tried when none passed
        "max_failing_size": None if below is None else (m * below if constructed else below),
        "paper_budget": paper_budget,
        "best_fact_adaptive_accuracy": faa,
        "points": pts,
    }


def usability_point(
    kappa: float,
    alpha: float,
    n_facts: int,
    d: int,
    h: int,
    seed: int,
    quick: bool,
    work_dir: str | None = None,
    lr: float | None = None,
    train_seed: int | None = None,
    device: str = "cpu",
) -> dict:
    """Sec. 5.2-5.3: a GD SwiGLU MLP (cross-entropy) at width h on embeddings whitened with strength alpha;
    capacity, fact-adaptive accuracy, usability = accuracy / capacity, and the Lipschitz estimate (eq. 8).
    `lr`, `train_seed`: the SSFR training's learning rate and seed (None: the run's default, `seed`); `device`: where
    the transformer trains (ssfr_point)."""
    rec = ssfr_point(
        "gd-swiglu",
        h,
        n_facts,
        d,
        seed,
        quick,
        kappa=kappa,
        whiten=alpha,
        lipschitz=True,
        work_dir=work_dir,
        lr=lr,
        train_seed=train_seed,
        device=device,
    )
    cap = rec["capacity_new"]
    faa = rec["fact_adaptive_accuracy"] or 0.0
    rec["usability"] = faa / cap if cap > 0 else None
    return rec


# the names the recorded runs carry (results/fact-recall/runs): the functions lived in experiments/fact_recall_runs.py
SSFR_SEARCH = JobFunction(ssfr_search, "symformer.experiments.fact_recall_runs.ssfr_search")
USABILITY_POINT = JobFunction(usability_point, "symformer.experiments.fact_recall_runs.usability_point")
