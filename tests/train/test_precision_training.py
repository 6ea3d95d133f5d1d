"""16-bit training steps (issue 40 item 5): every positional x attention combination of symformer's own models takes a
finite bfloat16 step, under autocast and after `.to(torch.bfloat16)`, whose loss is within 2% of the float32 step's
on the same batch and init (experiments.precision_train)."""
import math

import pytest
import torch

from symformer.experiments.precision_train import ROUTES, TRAIN_COMBINATIONS, train_step_comparison

# Combinations that fail on this branch only because another part's 16-bit fix is pending (solve / LU / FFT have no
# bfloat16 CPU kernels). The coordinator removes entries as those branches merge; strict=False, so a fixed one passes.
PENDING_16BIT_FIXES = {
    ("string", "cast"): "pending positional/string.py 16-bit fix (Cayley solve in bfloat16)",
    ("circulant_string", "cast"): "pending positional/string.py 16-bit fix (circulant FFT in bfloat16)",
    ("espr", "cast"): "pending positional/espr.py 16-bit fix (LU / solve in bfloat16)",
}


def _cases():
    for (pos, att) in TRAIN_COMBINATIONS:
        for route in ROUTES:
            reason = PENDING_16BIT_FIXES.get((pos, route))
            marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
            yield pytest.param(pos, att, route, marks=marks, id=f"{pos}-{att}-{route}")


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
    from symformer.experiments import precision_train as pt
    real = pt.step

    def noisy(model, x, y, route):
        if route is None:
            return real(model, x, y, route)
        with torch.no_grad():
            model.head.weight.mul_(1.2)
        return real(model, x, y, route)
    monkeypatch.setattr(pt, "step", noisy)
    assert pt.train_step_comparison("rope", "softmax", "cast")["loss_rel_diff"] > 0.02


@pytest.mark.parametrize("name,value", [("positional", "alibi"), ("attention", "linear"), ("route", "fp8")])
def test_bad_arguments_name_themselves(name, value):
    kw = {"positional": "rope", "attention": "softmax", "route": "cast", name: value}
    with pytest.raises(ValueError, match=name):
        train_step_comparison(**kw)
