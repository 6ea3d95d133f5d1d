"""The shape of experiments/ (issue 43 items 4 and 5): one subpackage per registered experiment, no module over 300
lines, no seeding outside _rng; job functions keep their recorded names and carry the device outside the
signature; parts combine without overwriting each other; data moves to a device with every tensor it carries."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
import torch

from symformer.data.base import TensorData
from symformer.experiments.base import combined, load_all
from symformer.results import ExperimentResult
from symformer.runner.devices import tensor_data_on
from symformer.runner.jobs import Job, JobFunction

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "src" / "symformer" / "experiments"
MAX_LINES = 300
REGISTERED = (
    "espr",
    "extrapolation",
    "fact-recall",
    "facts",
    "facts-hebbian",
    "favor",
    "hf",
    "linearize",
    "plash",
    "precision",
    "resolution",
    "teleport",
)


def modules_over(limit: int, root: Path = EXPERIMENTS_DIR) -> list[str]:
    return [
        f"{p.relative_to(root)}: {n} lines"
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > limit
    ]


def test_no_experiment_module_over_300_lines():
    assert modules_over(MAX_LINES) == []


def test_the_size_check_can_fail(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 301)
    (tmp_path / "short.py").write_text("x = 1\n" * 300)
    assert modules_over(MAX_LINES, tmp_path) == ["long.py: 301 lines"]


def test_every_registered_experiment_is_a_package():
    """The registry imports experiments/'s packages: a folder without __init__.py would register nothing."""
    registry = load_all()
    assert sorted(registry.names()) == sorted(REGISTERED)
    folders = [p for p in EXPERIMENTS_DIR.iterdir() if p.is_dir() and any(p.glob("*.py"))]
    assert [p.name for p in folders if not (p / "__init__.py").is_file()] == []
    for name in registry.names():
        spec = registry.get(name)
        module = spec.fn.__module__  # symformer.experiments.<package>.report
        package = module.split(".")[2]
        assert (EXPERIMENTS_DIR / package / "__init__.py").is_file(), (name, module)


def test_no_seeding_outside_rng():
    """Issue 43 item 5 inside experiments/: every draw goes through symformer._rng."""
    pattern = re.compile(r"manual_seed\(|torch\.Generator\(")
    bad = [str(p.relative_to(EXPERIMENTS_DIR)) for p in EXPERIMENTS_DIR.rglob("*.py") if pattern.search(p.read_text())]
    assert bad == []


def where(device: str = "cpu") -> str:
    return device


def no_device(x: int = 1) -> int:
    return x


def test_job_function_keeps_the_recorded_name_and_leaves_the_device_out_of_the_signature():
    fn = JobFunction(where, "symformer.experiments.old_module.where")
    on_gpu = fn.on("cuda")
    assert Job("k", on_gpu, {}).signature() == Job("k", fn, {}).signature()
    assert Job("k", fn, {}).signature()["fn"] == "symformer.experiments.old_module.where"
    assert fn() == "cpu" and on_gpu() == "cuda" and on_gpu(device="meta") == "meta"
    assert on_gpu == fn.on("cuda") and on_gpu != fn and Job("k", on_gpu) == Job("k", fn.on("cuda"))
    assert JobFunction(no_device, "a.b").on("cuda")(x=3) == 3  # a function without `device` gets none
    back = pickle.loads(pickle.dumps(on_gpu))  # workers receive it by pickle
    assert back.name == on_gpu.name and back() == "cuda"


def test_combined_merges_parts_and_refuses_a_key_given_twice():
    a = ExperimentResult(metrics={"x": 1}, notes=["a"], figures=["a.png"])
    b = ExperimentResult(metrics={"y": 2}, config={"c": 1}, notes=["b"])
    got = combined(a, b)
    assert got.metrics == {"x": 1, "y": 2} and got.notes == ["a", "b"] and got.config == {"c": 1}
    with pytest.raises(ValueError, match="'x'"):
        combined(a, ExperimentResult(metrics={"x": 3}))


def test_tensor_data_moves_with_its_extra_tensors():
    data = TensorData(torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(3, 1))
    data.x_time = torch.zeros(4, 3, 2)  # ETT's time marks ride along
    assert tensor_data_on(data, "cpu") is data  # the CPU path is untouched
    moved = tensor_data_on(data, "meta")
    assert {moved.x.device.type, moved.y.device.type, moved.pos.device.type, moved.x_time.device.type} == {"meta"}
