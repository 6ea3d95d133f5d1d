"""symformer.stats: the one home of fits, R^2, means and standard errors (issue 18 item 3)."""

from __future__ import annotations

import math

import pytest

from symformer.stats import fit_exponent, mean_se, mean_std


def test_fit_exponent_recovers_a_power_law():
    xs = [2.0, 4.0, 8.0, 16.0, 32.0]
    assert fit_exponent(xs, [3.0 * x**-0.5 for x in xs]) == pytest.approx(-0.5, abs=1e-12)
    assert fit_exponent(xs, [0.1 * x**2 for x in xs]) == pytest.approx(2.0, abs=1e-12)


def test_mean_se_and_mean_std():
    r = mean_se([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and r["n"] == 3 and r["se"] == pytest.approx(1 / math.sqrt(3), rel=1e-12)
    assert mean_std([1.0, float("nan"), 3.0]) == (2.0, pytest.approx(math.sqrt(2.0)))
    assert mean_std([5.0]) == (5.0, 0.0)
    assert all(math.isnan(v) for v in mean_std([float("nan")]))
