"""Parts of the `plash` experiment: tau_g crossing, mean/standard error, sketch moment checks, job keys."""

from __future__ import annotations

import math

import pytest

from symformer.experiments.base import RunContext
from symformer.experiments.plash.checks import sketch_checks, tau_star
from symformer.experiments.plash.forecast import forecast_job
from symformer.experiments.plash.plan import protocol
from symformer.stats import mean_se


def test_tau_star_interpolates_in_log_tau():
    taus = [1e3, 1e4, 1e5]
    assert tau_star(taus, [0.0, 0.0, 1.0]) == pytest.approx(10**4.5)
    assert tau_star(taus, [0.6, 1.0, 1.0]) == 1e3
    assert tau_star(taus, [0.0, 0.2, 0.4]) == math.inf


def test_mean_se():
    r = mean_se([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and r["se"] == pytest.approx(1 / math.sqrt(3)) and r["n"] == 3
    assert mean_se([0.5])["se"] == 0.0


def test_sketch_moments_anw_holds_and_prop_c4_fails_for_k3():
    sk = sketch_checks(3000, 0)
    assert max(abs(z) for z in sk["z"].values()) < 4.5  # unbiased (eq. 47)
    assert max(sk["anw_ratio"].values()) <= 1.0  # (2 + 3^k)/D holds
    # x = y = uniform, k = 3: the variance is several times Prop. C.4's 2/D (the bound's proof is wrong)
    assert sk["var_uniform"][3] / sk["bound_uniform"][3] > 1.5


def test_protocol_and_job_keys(tmp_path):
    quick = protocol(RunContext(out_dir=tmp_path, quick=True))
    assert quick.horizons == (24,) and len(quick.seeds) == 1 and quick.patience == 3
    full = protocol(RunContext(out_dir=tmp_path, quick=False))
    assert full.horizons == (24, 48, 168) and len(full.seeds) == 3 and full.train_windows is None
    paper = protocol(RunContext(out_dir=tmp_path, quick=False, extra={"full": True}))
    assert paper.size["d_model"] == 512 and paper.size["d_ff"] == 2048
    ctx = RunContext(out_dir=tmp_path, quick=False)
    keys = {
        forecast_job(ctx, m, h, s, full).key
        for m in ("softmax", "favor", "plash")
        for h in full.horizons
        for s in full.seeds
    }
    assert len(keys) == 27
    assert forecast_job(ctx, "favor", 24, 0, full).kwargs["attention_kwargs"] == {"dropout": 0.0}
