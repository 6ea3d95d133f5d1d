"""The plan of experiment `teleport`: which data sets, PEs, seeds, learning rates and extra arms one run trains
(a typed plan: its fields are the keys of results.json's config, as the recorded reports show them), and the arms'
own records."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from symformer._validation import check_int
from symformer.experiments.teleport.runs import ALPHA_GRID, PAPER_LR
from symformer.positional import rotary_parts

#: settings of a part under more than one label: RoPE under both pairings, since its group's 2x2 blocks sit on
#: different coordinates in each
PE_VARIANTS: dict[str, dict[str, dict]] = {
    "rope": {"rope-interleaved": {"pairing": "interleaved"}, "rope-half": {"pairing": "half"}}
}


def pe_settings() -> dict[str, tuple[str, dict]]:
    """Part (a)'s positional settings: a label for the report -> the registered part and its keyword arguments; the
    parts without a rotation (none, sinusoidal, learned), then every registered rotary part (positional.rotary_parts(),
    registration order), read when called."""
    names = ("none", "sinusoidal", "learned", *rotary_parts())
    return {label: (name, kw) for name in names for label, kw in PE_VARIANTS.get(name, {name: {}}).items()}


DATASETS = ("mnist1d", "digits")


@dataclass(frozen=True)
class TeleportPlan:
    datasets: list[str]
    seeds: list[int]
    epochs: dict[str, int]
    lr: dict[str, float] | None  # fixed SGD lr per data set (quick), or None: chosen on validation per arm
    lr_grid: list[float] | None
    lr_seeds: list[int]
    pes: list[str]
    trials: int  # random group elements per PE kind in the invariance check
    paper_lr: bool  # also train both arms at the paper's lr 0.015
    epoch2: bool  # also teleport at the start of epoch 2
    ablation: list[float]  # alphas of the unguarded ablation at fixed |K| (MNIST-1D, RoPE)
    ablation_seeds: list[int]
    demo_seeds: list[int]  # seeds of the guard demonstration (alpha 0.65 with and without the guard)
    extras_on: list[str]  # data sets with the Zhao et al. and AdamW arms
    zhao_pes: list[str]
    adamw: bool
    seed: int = 0  # the run's --seed: every list of training seeds starts there

    @classmethod
    def for_run(cls, quick: bool, seed: int = 0) -> "TeleportPlan":
        """The quick or full plan; the training seeds are seed, seed + 1, ... (seed 0: the recorded runs' seeds)."""
        check_int("seed", seed, 0)
        plan = cls._unseeded(quick)
        shift = {f: [seed + s for s in getattr(plan, f)] for f in ("seeds", "lr_seeds", "ablation_seeds", "demo_seeds")}
        return replace(plan, seed=seed, **shift)

    @classmethod
    def _unseeded(cls, quick: bool) -> "TeleportPlan":
        if quick:
            # lr fixed for quick mode (a development sweep on the RoPE baseline); the full run selects it per arm
            # on validation. The guard demonstration runs the Teleporter's default alpha 0.65 with and without the
            # guard.
            return cls(
                datasets=["mnist1d"],
                seeds=[0],
                epochs={"mnist1d": 3},
                lr={"mnist1d": 0.05},
                lr_grid=None,
                lr_seeds=[],
                pes=["learned", "rope"],
                trials=1,
                paper_lr=False,
                epoch2=False,
                ablation=[],
                ablation_seeds=[0],
                demo_seeds=[0],
                extras_on=["mnist1d"],
                zhao_pes=["rope"],
                adamw=False,
            )
        return cls(
            datasets=list(DATASETS),
            seeds=[0, 1, 2, 3, 4],
            epochs={"mnist1d": 20, "digits": 30},
            lr=None,
            lr_grid=[0.015, 0.05, 0.15],
            lr_seeds=[0, 1, 2],
            pes=["learned", "rope", "string"],
            trials=20,
            paper_lr=True,
            epoch2=True,
            ablation=list(ALPHA_GRID),
            ablation_seeds=[0, 1, 2],
            demo_seeds=[0, 1, 2],
            extras_on=["mnist1d", "digits"],
            zhao_pes=["learned", "rope"],
            adamw=True,
        )

    def as_config(self) -> dict[str, str]:
        return {f.name: str(getattr(self, f.name)) for f in fields(self) if f.name != "seed"}  # config has "seed"


@dataclass(frozen=True)
class Arm:
    """One arm of a (data set, PE) cell. `label` names it in the metrics ("<ds>/<pe>/<label>/<optimizer>") and in
    its records; `method` is train_arm's arm (base | tele | zhao); `guarded`: the ratio guard is on; `paper_lr`:
    the arm and its baseline train at the paper's lr 0.015 (App. E) instead of the validated one."""

    label: str
    method: str = "tele"
    guarded: bool = False
    paper_lr: bool = False

    @property
    def is_baseline(self) -> bool:
        return self.method == "base"

    @property
    def baseline(self) -> str:
        """The label of the baseline this arm is paired with (the same seeds, the same lr rule)."""
        return BASE_PAPER_LR.label if self.paper_lr else BASE.label


BASE = Arm("base", method="base")
BASE_PAPER_LR = Arm(f"base_lr{PAPER_LR}", method="base", paper_lr=True)
TELE = Arm("tele")
GUARDED = Arm("guarded", guarded=True)
GUARDED_EPOCH2 = Arm("guarded_e2", guarded=True)
TELE_PAPER_LR = Arm(f"tele_lr{PAPER_LR}", paper_lr=True)
GUARDED_PAPER_LR = Arm(f"guarded_lr{PAPER_LR}", guarded=True, paper_lr=True)
ZHAO = Arm("zhao", method="zhao")
GUARD_DEMO = Arm("guard_a0.65", guarded=True)  # the Teleporter's default alpha 0.65 with the guard ...
UNGUARDED_DEMO = Arm("tele_a0.65")  # ... and without it


def ablation_arm(alpha: float) -> Arm:
    """An unguarded arm at radius `alpha` and fixed |K| (Table 2 style)."""
    return Arm(f"abl_a{alpha}")
