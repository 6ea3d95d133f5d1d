"""16-bit training steps (issue 40 item 5): every positional x attention combination of symformer's own models takes a
finite bfloat16 step, under autocast and after `.to(torch.bfloat16)`, whose loss is within 2% of the float32 step's
on the same batch and init (experiments.precision.train_checks)."""

import math

import pytest
import torch

from symformer._torch_compat import autocast_enabled
from symformer.experiments.precision.train_checks import ROUTES, TRAIN_COMBINATIONS, train_step_comparison


# Combinations that fail on this branch only because another part's 16-bit fix is pending (solve / LU / FFT have no
# bfloat16 CPU kernels). The coordinator removes entries as those branches merge; strict=False, so a fixed one passes.
def _cases():
    for pos, att in TRAIN_COMBINATIONS:
        for route in ROUTES:
            yield pytest.param(pos, att, route, id=f"{pos}-{att}-{route}")


def test_matrix_covers_every_registered_part():
    """TRAIN_COMBINATIONS names every registered positional part and the three attention kinds of the issue."""
    import symformer  # noqa: F401  (registers the parts)
    from symformer.registry import POSITIONAL

    assert {p for p, _ in TRAIN_COMBINATIONS} == set(POSITIONAL.names())
    assert {a for _, a in TRAIN_COMBINATIONS} == {"softmax", "favor", "plash"}


@pytest.mark.parametrize("positional,attention,route", list(_cases()))
def test_bf16_step_close_to_float32(positional, attention, route):
    r = train_step_comparison(positional, attention, route)
    assert r["finite"], r
    assert math.isfinite(r["loss32"]) and r["loss32"] > 0
    assert r["loss_rel_diff"] <= 0.02, r  # issue 40: the 16-bit loss within 2% of the float32 step's
    # a loose sanity bound on the whole gradient (~25 u, u = 2^-8 the bfloat16 unit roundoff): rounding drift is
    # 0.5e-2 to 7e-2 here; a gradient that is wrong (a rounded position, an overflowed normaliser) is off by O(1)
    assert r["grad_rel_err"] <= 0.1, r


def test_comparison_is_pure_and_seeded():
    """Same arguments, same numbers; the global RNG is left as it was; the seed changes the init."""
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = train_step_comparison("rope", "softmax", "autocast")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert train_step_comparison("rope", "softmax", "autocast") == a
    assert train_step_comparison("rope", "softmax", "autocast", seed=1)["loss32"] != a["loss32"]


def test_comparison_detects_a_wrong_step(monkeypatch):
    """The bound can fail: a 16-bit step whose logits are perturbed by a few percent is reported as off."""
    from symformer.experiments.precision import train_checks

    real = train_checks.step

    def noisy(model, x, y, route):
        if route is None:
            return real(model, x, y, route)
        with torch.no_grad():
            model.head.weight.mul_(1.2)
        return real(model, x, y, route)

    monkeypatch.setattr(train_checks, "step", noisy)
    assert train_checks.train_step_comparison("rope", "softmax", "cast")["loss_rel_diff"] > 0.02


@pytest.mark.parametrize("name,value", [("positional", "alibi"), ("attention", "linear"), ("route", "fp8")])
def test_bad_arguments_name_themselves(name, value):
    kw = {"positional": "rope", "attention": "softmax", "route": "cast", name: value}
    with pytest.raises(ValueError, match=name):
        train_step_comparison(**kw)


# ---------------------------------------------------------------- the Trainer's precision option (`symformer train`)
def _digits_run(precision, tmp_path=None, callbacks=None, positional="rope", device="cpu"):
    from symformer.data import load_digits_patches
    from symformer.models import TransformerConfig, ViTClassifier
    from symformer.runner.devices import split_on
    from symformer.train import Classification, TrainConfig, Trainer

    s = split_on(load_digits_patches(), device)
    torch.manual_seed(0)
    model = ViTClassifier(
        TransformerConfig(d_model=16, n_heads=2, n_layers=1, coord_dim=2, positional=positional, mlp="relu"), 4, 10
    ).to(device)
    cfg = TrainConfig(epochs=2, batch_size=32, lr=3e-3, precision=precision, schedule="constant")
    t = Trainer(
        model,
        Classification(),
        s.train.subset(torch.arange(128)),
        s.val.subset(torch.arange(64)),
        cfg,
        callbacks=callbacks,
        out_dir=tmp_path,
    )
    return t, t.fit()


@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16"])
def test_trainer_precision(precision, device, tmp_path):
    seen = []

    class Probe(torch.nn.Module):  # records whether the forward ran under autocast
        def forward(self, x):
            seen.append(autocast_enabled(device))
            return x

    from symformer.train import Callback

    class Watch(Callback):
        def on_train_start(self, trainer):
            trainer.raw_model.embed.register_forward_hook(lambda m, i, o: Probe()(o))

    t, final = _digits_run(precision, tmp_path, [Watch()], device=device)
    assert math.isfinite(t.state.history[-1]["train_loss"]) and 0 <= final["val_accuracy"] <= 1
    assert t.state.history[-1]["train_loss"] < t.state.history[0]["train_loss"] * 1.05  # it trains
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert {p.dtype for p in t.raw_model.parameters()} == {want}
    assert all(v.dtype == want for st in t.optimizer.state.values() for k, v in st.items() if k != "step")
    assert set(seen) == {precision == "bf16-autocast"}  # training and evaluation forwards alike
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ck["config"]["precision"] == precision


def test_trainer_precision_close_to_float32():
    """Two epochs of 4 steps: the bfloat16 runs' final training loss within 5% of the float32 run's."""
    ref = _digits_run("fp32")[0].state.history[-1]["train_loss"]
    for precision in ("bf16-autocast", "bf16"):
        got = _digits_run(precision)[0].state.history[-1]["train_loss"]
        assert abs(got - ref) <= 0.05 * ref, (precision, got, ref)


def test_teleport_in_a_bf16_trainer_passes_the_invariance_check(recwarn):
    """The teleport callback's loss runs in the trainer's precision and its invariance check uses the bfloat16
    tolerance, so invariant elements are applied, not skipped."""
    import symformer.teleport  # noqa: F401  (registers the callback)
    from symformer.registry import CALLBACKS

    for precision in ("bf16-autocast", "bf16"):
        cb = CALLBACKS.build("teleport", alpha=0.5, samples=8, epoch=1, steps=2, max_cumulative_ratio=None, ffn=True)
        _digits_run(precision, callbacks=[cb], positional="rope")
        assert len(cb.log) == 2 and all(r["skipped"] == 0 and r["applied"] for r in cb.log), (precision, cb.log)
    assert not [w for w in recwarn if "teleport: skipped" in str(w.message)]


def test_precision_option_reaches_symformer_train():
    """`symformer train --set train.precision=bf16-autocast` builds a TrainConfig with it; a bad value names the key."""
    from symformer.train.presets import build, resolve

    spec = resolve("digits-vit", None, ["train.precision=bf16-autocast"])
    assert build(spec)[3].precision == "bf16-autocast"
    from symformer.train import TrainConfig

    with pytest.raises(ValueError, match="precision: got 'fp16'"):
        TrainConfig(precision="fp16")


# ---------------------------------------------------------------- the *_bf16 bench rows' accuracy check
class _Exact(torch.nn.Module):  # returns its input: no arithmetic, no error
    def forward(self, q, k, pos):
        return q, k


class _Sloppy(torch.nn.Module):  # angles in the input's dtype: bfloat16 rounds pos * 1000.3 to a multiple of 32
    def forward(self, q, k, pos):
        return q * torch.cos(pos.to(q.dtype) * 1000.3), k


class _Crash(torch.nn.Module):
    def forward(self, q, k, pos):
        raise RuntimeError("no bfloat16 kernel")


def test_bf16_bench_row_measures_error_against_float64():
    from pathlib import Path

    from symformer.benchmarks._precision import bf16_ratios, bf16_row
    from symformer.benchmarks.base import BenchContext

    ctx = BenchContext(Path("unused"))
    q, k = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
    pos = torch.arange(8.0)[:, None]
    exact = bf16_row("exact", "rotate q,k", _Exact, [q, k], (pos,), 0, ctx, 0.01, "tiny")
    assert [r["mode"] for r in exact] == ["fwd", "fwd+bwd"] and exact[0]["err_vs_bound"] == 0
    assert exact[0]["out_dtype"] == "bfloat16" and exact[0]["median_s"] > 0 and exact[0]["fp32_median_s"] > 0
    sloppy = bf16_row("sloppy", "rotate q,k", _Sloppy, [q, k], (pos,), 0, ctx, 0.01, "tiny")
    assert sloppy[0]["err_vs_bound"] > 10
    crash = bf16_row("crash", "rotate q,k", _Crash, [q, k], (pos,), 0, ctx, 0.01, "tiny")
    assert len(crash) == 1 and crash[0]["median_s"] is None and "no bfloat16 kernel" in crash[0]["error"]
    r = bf16_ratios(exact + sloppy + crash)
    assert r["exact_bf16_err_vs_bound"] == 0 and r["sloppy_bf16_err_vs_bound"] > 1
    assert "crash_bf16_err_vs_bound" not in r
