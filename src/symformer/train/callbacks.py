"""Trainer callbacks: hooks at step and epoch boundaries (teleportation plugs in here)."""

from __future__ import annotations

from typing import Any

from symformer._rng import check_seed, layer_kwargs
from symformer._validation import check_int, fail
from symformer.attention.favor import FavorAttention
from symformer.registry import CALLBACKS


class Callback:
    """Override any hook. State that must survive a resume goes through state_dict/load_state_dict."""

    def on_train_start(self, trainer) -> None: ...
    def on_epoch_start(self, trainer, epoch: int) -> None: ...
    def on_batch_start(self, trainer, idx) -> None: ...
    def on_after_backward(self, trainer, idx) -> None:
        """Gradients of the current batch are in .grad; the optimizer has not stepped yet."""

    def on_step_end(self, trainer, loss: float) -> None: ...
    def on_epoch_end(self, trainer, epoch: int, metrics: dict[str, Any]) -> None: ...
    def on_train_end(self, trainer) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Elapsed(Callback):
    """Training wall time summed over the parts of a resumed run: the seconds up to the last checkpoint travel in
    it (state_dict), so a run killed and resumed reports the time its result cost, not only the last part."""

    def __init__(self):
        self.before, self._t0 = 0.0, None

    def on_train_start(self, trainer) -> None:
        import time

        self._t0 = time.perf_counter()

    @property
    def seconds(self) -> float:
        import time

        return self.before + (0.0 if self._t0 is None else time.perf_counter() - self._t0)

    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.before = float(state["seconds"])


class EarlyStopping(Callback):
    """Stop when `monitor` has not improved for `patience` epochs and restore the best weights before the
    final evaluation (Informer's EarlyStopping: patience 3 on validation MSE, best checkpoint reloaded for
    the test). The best weights are kept in memory and in state_dict, so a resumed run restores them too."""

    def __init__(self, patience: int = 3, monitor: str = "val_loss", higher_is_better: bool = False):

        self.patience, self.monitor, self.higher = check_int("patience", patience, 1), monitor, higher_is_better
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.best_state: dict[str, Any] | None = None
        self.bad_epochs = 0

    def on_train_start(self, trainer) -> None:
        if self.bad_epochs >= self.patience:  # resumed after the stop
            trainer.stop_training = True

    def on_epoch_end(self, trainer, epoch: int, metrics: dict[str, Any]) -> None:
        if self.monitor not in metrics:
            fail("monitor", self.monitor, f"a metric among {', '.join(sorted(metrics))}")
        v = float(metrics[self.monitor])
        better = self.best is None or (v > self.best if self.higher else v < self.best)
        if better:
            self.best, self.best_epoch, self.bad_epochs = v, epoch, 0
            self.best_state = {k: t.detach().clone() for k, t in trainer.raw_model.state_dict().items()}
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                trainer.stop_training = True

    def on_train_end(self, trainer) -> None:
        if self.best_state is not None:
            trainer.raw_model.load_state_dict(self.best_state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "best_state": self.best_state,
            "bad_epochs": self.bad_epochs,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch = state["best"], state["best_epoch"]
        self.best_state, self.bad_epochs = state["best_state"], state["bad_epochs"]


def feature_modules(model) -> list:
    """Attention cores with redrawable random features (FAVOR+), in module order."""

    return [m for m in model.modules() if isinstance(m, FavorAttention)]


@CALLBACKS.register("redraw")
class FeatureRedraw(Callback):
    """Periodic redraws of the random features, outside `forward` (performer-pytorch's ProjectionUpdater): every
    `every` optimizer steps all FAVOR+ layers draw fresh features (every=None: fixed features). Every layer already
    has a seed of its own (the model builder derives them, models.layers); seed=None keeps those, an integer
    restarts layer i's sequence at the start of training from derived_seed("layer<i>", seed) (_rng.layer_kwargs)."""

    def __init__(self, model, every: int | None = None, seed: int | None = None):

        self.model, self.seed = model, check_seed(seed)
        self.every = None if every is None else check_int("every", every, 1)
        self.seeded, self.redraws = False, 0

    def on_train_start(self, trainer) -> None:
        if not self.seeded and self.seed is not None:  # a resumed run keeps the features restored from its checkpoint
            for i, m in enumerate(feature_modules(self.model)):
                m.reseed(layer_kwargs({"seed": self.seed}, i)["seed"])
        self.seeded = True

    def on_step_end(self, trainer, loss: float) -> None:
        if self.every is not None and trainer.state.step % self.every == 0:
            for m in feature_modules(self.model):
                m.redraw()
            self.redraws += 1

    def state_dict(self) -> dict[str, Any]:
        return {"seeded": self.seeded, "redraws": self.redraws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seeded, self.redraws = state["seeded"], state["redraws"]


class LearningCurve(Callback):
    """Evaluate `data` every `every` optimizer steps (and at the end); `points` is [(step, metrics)]."""

    def __init__(self, data, every: int):

        self.data, self.every, self.points = data, check_int("every", every, 1), []

    def _eval(self, trainer) -> None:
        self.points.append((trainer.state.step, trainer.evaluate(self.data)))

    def on_step_end(self, trainer, loss: float) -> None:
        if trainer.state.step % self.every == 0:
            self._eval(trainer)

    def on_train_end(self, trainer) -> None:
        if not self.points or self.points[-1][0] != trainer.state.step:
            self._eval(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"points": self.points}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.points = [tuple(p) for p in state["points"]]
