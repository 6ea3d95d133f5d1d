"""Pieces of the `plash` experiment and benchmark that run fast (the full runs are the CLI's job)."""
import math

from symformer.benchmarks.attention_plash import matmul_throughput
from symformer.experiments.base import load_all
from symformer.experiments.plash import sketch_checks


def test_experiment_registered_with_data_file():
    spec = load_all().get("plash")
    assert spec.data_files == ("ETTh1.csv",)


def test_sketch_checks_report_every_degree():
    out = sketch_checks(500, seed=0)
    for k in (1, 2, 3):
        assert math.isfinite(out["z"][k]) and abs(out["z"][k]) < 4.5  # eq. (47); |z| >= 4.5 has prob ~7e-6
        assert out["bound_uniform"][k] == 2 / 16
    # Prop. C.4's variance bound breaks for k >= 2 at the uniform vector (see test_sketch.py for the margin)
    assert out["var_uniform"][3] > out["bound_uniform"][3]


def test_matmul_throughput_positive():
    assert matmul_throughput(n=64) > 0
