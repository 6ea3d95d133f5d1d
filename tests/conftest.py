from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


@pytest.fixture(autouse=True)
def _one_thread_per_worker():
    """Each xdist worker keeps one torch thread: an in-process CLI command sets the CPU count (cli._threads), and two
    workers of two threads on 2 cores stall each other's parallel regions (10x and more on small ops)."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_configure(config):
    torch.set_num_threads(1)
    # Triton decorates its own library functions (tl.zeros, tl.sum, ...) when it is imported, in the mode
    # TRITON_INTERPRET names then: set before anything imports it (torch._dynamo does), so the kernel tests can run
    # kernels on CPU tensors; the "auto" kernel choice never takes CPU tensors, so no other test changes path. Not
    # where CUDA is: there the `cuda` tests run the compiled kernels
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    # inductor's parity tests compile C++ in a pool of one process per core, which starves the other xdist worker:
    # one compile thread keeps each worker on its core
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if not os.environ.get("SYMFORMER_DATA") and SHARED_DATA.is_dir():
        os.environ["SYMFORMER_DATA"] = str(SHARED_DATA)


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip_cuda = pytest.mark.skip(reason="cuda: needs a CUDA device")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip_cuda)
    if config.getoption("--runslow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request) -> str:
    """Runs a test on the CPU and, where CUDA is present, again on the GPU (its `cuda` item is skipped otherwise)."""
    return request.param


@pytest.fixture
def data_dir() -> Path:
    d = Path(os.environ.get("SYMFORMER_DATA", SHARED_DATA))
    if not (d / "ETTh1.csv").is_file():
        pytest.skip(f"shared data not found at {d}")
    return d
