"""The plan of experiment `plash`: hash draws for the sketch checks and the ETTh1 forecasting protocol, typed.
The protocol's fields go into every forecasting job's arguments, so its record names and signatures are those of
the recorded runs (results/plash/runs)."""

from __future__ import annotations

from dataclasses import dataclass

from symformer.experiments.base import RunContext
from symformer.models.informer import PAPER_SIZE, SMALL_SIZE

PAPER_SKETCH = "Prop. C.4 / eq. (47)-(48): any k >= 1, any D, 3-wise h and 4-wise s"
PAPER_CERT = (
    "Sec. H.5: K = {1}, D = 256, tau = 1, N_q = 32, N_k = 64, h = 4, d = 32, 200 draws, sigma ~ U[0.004, "
    "0.08]; 15 x 15 log grid tau_g in [631, 1585], eps_out in [520, 853]"
)
PAPER_FORECAST = (
    "Informer backbone (512 / 8 heads / 2+1 layers / d_ff 2048, ProbSparse replaced), ETTh1 horizons "
    "{24, 48, 168, 336, 720}, Adam 1e-4 decayed, batch 32, 6 epochs, attention dropout 0.05"
)
# Table 1, ETTh1 (MSE, MAE) averaged over the horizons.
PAPER_ETTH1 = {
    "softmax (Vanilla)": (0.5553, 0.5480),
    "favor (Performer)": (0.5065, 0.5192),
    "plash M=64 D=128": (0.5747, 0.5585),
    "plash best M=256 D=512": (0.4553, 0.4960),
}
HORIZONS = (24, 48, 168, 336, 720)
RECORDED_HORIZONS = (24, 48, 168)
METHODS = ("softmax", "favor", "plash")
#: quick size: small enough that quick `plash` (three 24-step Informers, trained and tested) is a smoke run on one core
QUICK_SIZE = {"d_model": 32, "n_heads": 2, "e_layers": 2, "d_layers": 1, "d_ff": 64}
#: per-method attention options; FAVOR+ has no attention matrix, so its attention dropout is 0 (explicit)
METHOD_KWARGS = {"softmax": {}, "favor": {"dropout": 0.0}, "plash": {"M": 64, "D_k": 128}}
QUICK_PLASH = {"M": 16, "D_k": 32}


def method_kwargs(method: str, quick: bool) -> dict:
    return dict(QUICK_PLASH) if (method == "plash" and quick) else dict(METHOD_KWARGS[method])


@dataclass(frozen=True)
class ForecastPlan:
    """The forecasting setting of one run: Informer size, horizons, seeds and budget."""

    size: dict
    horizons: tuple[int, ...]
    seeds: tuple[int, ...]
    epochs: int
    patience: int = 3
    lr: float = 1e-4
    # quick: a fixed random subset of the training windows per run and evenly spaced validation windows for
    # early stopping; the test set is always complete
    train_windows: int | None = None
    val_windows: int | None = None

    def as_dict(self) -> dict:
        """The protocol as results.json's config shows it (the keys of the recorded reports)."""
        return {
            "size": dict(self.size),
            "horizons": self.horizons,
            "seeds": self.seeds,
            "epochs": self.epochs,
            "patience": self.patience,
            "lr": self.lr,
            "train_windows": self.train_windows,
            "val_windows": self.val_windows,
        }

    def run_key(self, method: str, pred_len: int, seed: int, attention_kwargs: dict) -> str:
        """The record name of one forecasting run (runs/<key>.json)."""
        tag = "_".join(f"{k}{v}" for k, v in sorted(attention_kwargs.items()) if k != "dropout")
        return (
            f"etth1_informer_{method}{'_' + tag if tag else ''}_h{pred_len}_s{seed}_d{self.size['d_model']}"
            f"_e{self.epochs}" + ("_quick" if self.train_windows else "")
        )


def protocol(ctx: RunContext) -> ForecastPlan:
    """This run's forecasting plan: the paper's Informer under --full, else the quick or the recorded size."""
    full_size = bool(ctx.extra.get("full", False))  # `reproduce --full`: the paper's Informer size
    size = PAPER_SIZE if full_size else (QUICK_SIZE if ctx.quick else SMALL_SIZE)
    if ctx.quick:
        return ForecastPlan(
            size=dict(size),
            horizons=(24,),
            seeds=(ctx.seed,),
            epochs=ctx.options.get("quick_epochs", 3),
            train_windows=ctx.options.get("quick_train_windows", 1024),
            val_windows=512,
        )
    return ForecastPlan(
        size=dict(size), horizons=RECORDED_HORIZONS, seeds=tuple(ctx.seed + i for i in range(3)), epochs=6
    )


@dataclass(frozen=True)
class PlashPlan:
    seed: int
    quick: bool
    sketch_draws: int
    forecast: ForecastPlan
    cert_eta: float = 0.99

    @classmethod
    def from_context(cls, ctx: RunContext) -> "PlashPlan":
        return cls(ctx.seed, ctx.quick, 2000 if ctx.quick else 20000, protocol(ctx))
