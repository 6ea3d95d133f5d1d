"""The plan of experiment `fact-recall`: its options and constants, and its recorded jobs (the SSFR searches, the
usability points and the LMs), each keyed by the fields it runs with."""

from __future__ import annotations

from dataclasses import dataclass

from symformer._validation import check_choice
from symformer.experiments.base import RunContext
from symformer.experiments.fact_recall.lm_runs import LM_RUN
from symformer.experiments.fact_recall.search import SSFR_SEARCH, USABILITY_POINT
from symformer.facts.capacity import KNOB
from symformer.runner.jobs import Job

PAPER_SETTING_SSFR = "d=128, F in 2^8..2^14, 4 seeds (max), AdamW lr 2e-4 for 4.8M sequences, 5 MLP kinds"
START = {"gd-swiglu": 2, "gd-relu": 2, "bin+jl": 16, "bin+gd": 8, "ntk": 256}
OPTIONS = {
    "kinds": (["bin+jl"], "SSFR MLP kinds in quick mode (full: bin+jl, bin+gd, gd-swiglu, gd-relu, ntk)"),
    "full_facts": ([256, 512, 1024, 2048, 4096], "SSFR fact-set sizes F in full mode"),
    "seeds": (1, "seeds per SSFR size in full mode (the paper: 4, max over seeds)"),
    "lm_facts": (1024, "books in the full-mode LM (quick: 128)"),
    "paper_budget": (False, "full mode: train SSFR transformers the paper's way (AdamW 2e-4, 4.8M sequences)"),
    "usability_trainings": (
        "one",
        "SSFR trainings per usability point: 'one' (lr 1e-3, seed 0) or 'paper' (best "
        "of 5 lrs x 4 seeds, App. A.2.4: 640 jobs, 20x the cost)",
    ),
}


KAPPAS = (1.1, 10.0, 100.0, 1000.0)
ALPHAS = (0.0, 0.01, 0.022, 0.046, 0.1, 0.22, 0.46, 1.0)
PAPER_LRS = (2e-6, 2e-5, 2e-4, 2e-3, 2e-2)  # App. A.2.4, 4 seeds each, the best transformer kept
PAPER_SEEDS = 4


LM_FRACTIONS = [0.02, 0.05, 0.1, 0.2]


def start_size(kind: str, n_facts: int) -> int:
    """Where a size search begins. Hidden-size kinds (GD, NTK): the F = 256 start scaled with F (their sizes grow
    about like F), since the search halves as well as doubles (search._smallest) and its answer does
    not depend on the start; it only skips the failing small sizes, each a 20,000-epoch GD build at F = 4096.
    Constructions: the code width m grows like log F, so their start stays."""
    base = START.get(kind, 8)
    return base if KNOB[kind] == "m" else base * max(1, n_facts // 256)


@dataclass(frozen=True)
class LMPlan:
    """App. A.3's book -> author LM: its size, budget and the edit splits it is trained with."""

    n_facts: int
    d: int
    mlp_hidden: int
    steps: int
    fractions: list[float]
    lr: float


@dataclass(frozen=True)
class FactRecallPlan:
    """What one run trains, from --quick and the experiment's options (OPTIONS)."""

    kinds: list[str]  # SSFR MLP kinds
    ssfr_facts: list[int]  # F of the SSFR searches
    ssfr_seeds: int  # seeds per SSFR size
    paper_budget: bool  # SSFR and LM transformers trained the paper's way (full mode only)
    paper_usability: bool  # usability points: the paper's best of 5 lrs x 4 seeds instead of one training
    lm: LMPlan

    @classmethod
    def from_context(cls, ctx: RunContext) -> "FactRecallPlan":
        quick, opts = ctx.quick, ctx.options
        paper = bool(opts["paper_budget"]) and not quick
        lm = LMPlan(
            n_facts=128 if quick else opts["lm_facts"],
            d=64 if quick else 128,
            mlp_hidden=256 if quick else 1024,
            # App. A.3.2 -> A.2.2: AdamW lr 2e-4 for 4.8M sequences (batch 128: 37,500 steps) under paper_budget
            steps=300 if quick else (4_800_000 // 128 if paper else 4000),
            fractions=[0.1] if quick else LM_FRACTIONS,
            lr=2e-4 if paper else 2e-3,
        )
        return cls(
            kinds=opts["kinds"] if quick else ["bin+jl", "bin+gd", "gd-swiglu", "gd-relu", "ntk"],
            ssfr_facts=[256] if quick else opts["full_facts"],
            ssfr_seeds=1 if quick else opts["seeds"],
            paper_budget=paper,
            paper_usability=paper_usability(ctx),
            lm=lm,
        )


def ssfr_jobs(ctx: RunContext) -> list[Job]:
    plan = FactRecallPlan.from_context(ctx)
    return [
        Job(
            f"ssfr_{k.replace('+', '-')}_F={F}",
            SSFR_SEARCH.on(ctx.device),
            dict(
                kind=k,
                n_facts=F,
                d=128,
                seeds=plan.ssfr_seeds,
                quick=ctx.quick,
                start=start_size(k, F),
                max_size=START.get(k, 8) * 2 ** (4 if ctx.quick else 9),
                bisect=not ctx.quick,
                paper_budget=plan.paper_budget,
            ),
            checkpoints=True,  # an F = 4096 search outlasts a session: points and trainings resume mid-job
        )
        for k in plan.kinds
        for F in plan.ssfr_facts
    ]


def paper_usability(ctx: RunContext) -> bool:
    """Whether usability_trainings asks for the paper's best of 5 lrs x 4 seeds ('paper') or one training ('one');
    any other value is a ValueError naming the option."""
    mode = ctx.options.get("usability_trainings", "one")
    return check_choice("fact-recall.usability_trainings", mode, ("one", "paper")) == "paper"


def usability_jobs(ctx: RunContext, h_star: int) -> list[Job]:
    """One job per (kappa, alpha); with `usability_trainings=paper` one per (kappa, alpha, lr, training seed)
    (App. A.2.4's 5 lrs x 4 seeds: 20x the cost), the task and MLPs those of ctx.seed."""
    h = max(1, round(1.1 * h_star))  # App. A.2.4: m = 1.1 h*
    base = dict(n_facts=256, d=128, h=h, seed=ctx.seed, quick=False)
    if not FactRecallPlan.from_context(ctx).paper_usability:
        return [
            Job(
                f"usab_k={k:g}_a={a:g}",
                USABILITY_POINT.on(ctx.device),
                dict(kappa=k, alpha=a, **base),
                checkpoints=True,
            )
            for k in KAPPAS
            for a in ALPHAS
        ]
    return [
        Job(
            f"usab_k={k:g}_a={a:g}_lr={lr:g}_s={s}",
            USABILITY_POINT.on(ctx.device),
            dict(kappa=k, alpha=a, **base, lr=lr, train_seed=ctx.seed + s),
            checkpoints=True,
        )
        for k in KAPPAS
        for a in ALPHAS
        for lr in PAPER_LRS
        for s in range(PAPER_SEEDS)
    ]


def lm_job(ctx: RunContext) -> Job:
    """App. A.3 LM, swap check and editing. Quick: 128 books, d = 64, 300 steps, the 10% split only."""
    lm = FactRecallPlan.from_context(ctx).lm
    kw = dict(
        n_facts=lm.n_facts,
        d=lm.d,
        mlp_hidden=lm.mlp_hidden,
        steps=lm.steps,
        fractions=lm.fractions,
        seed=ctx.seed,
        quick=ctx.quick,
        lr=lm.lr,
    )
    # checkpoints: the training, the swap check and each fraction resume
    return Job(f"lm_F={lm.n_facts}", LM_RUN.on(ctx.device), kw, checkpoints=True)


def top1_job(lm_job: Job) -> Job:
    """The same LM with top-1 (Switch) routing, swap check only: A.3.2 names a 2-expert MoE with an MLP router
    but not how it routes, and the swap result hinges on it (docs/fact_recall_protocol.md (a))."""
    return Job(
        f"{lm_job.key}_top1", lm_job.fn, {**lm_job.kwargs, "fractions": [], "router_top1": True}, checkpoints=True
    )
