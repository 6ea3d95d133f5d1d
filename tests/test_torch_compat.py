"""symformer runs on torch >= 2.3 (`make test-oldest` runs this suite on 2.3.1). These tests pin, on the torch
installed here, the two release differences that broke it there: autocast's per-device API (torch 2.4) and
transformers 5 disabling PyTorch < 2.6."""

from __future__ import annotations

import warnings

import pytest
import torch

import symformer._torch_compat as compat


@pytest.fixture(params=["per-device", "torch-2.3"])
def api(request, monkeypatch):
    """Both branches of autocast_dtype: torch 2.4's API, and the per-device functions torch 2.3 has (still present,
    deprecated, in later releases)."""
    if request.param == "torch-2.3":
        if not hasattr(torch, "get_autocast_cpu_dtype"):
            pytest.skip("this torch no longer has the torch 2.3 autocast functions")
        monkeypatch.setattr(compat, "_PER_DEVICE_API", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the 2.3 names are deprecated from 2.4
        yield request.param


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_dtype_on_the_cpu(api, dtype):
    assert compat.autocast_dtype("cpu") is None and not compat.autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=dtype):
        assert compat.autocast_dtype("cpu") == dtype and compat.autocast_enabled("cpu")
        # CPU autocast says nothing about CUDA's (torch 2.3's argument-less is_autocast_enabled is CUDA's)
        assert compat.autocast_dtype("cuda") is None
    assert compat.autocast_dtype("cpu") is None


def test_autocast_dtype_of_a_device_without_autocast(api):
    assert compat.autocast_dtype("meta") is None


def test_parts_follow_cpu_autocast_on_both_apis(api):
    """A positional part's forward / rotate runs with CPU autocast off (positional.base._autocast_off), and FAVOR+
    and PLASH take their float32 route under it (attention.softmax.needs_float32), whichever API answers."""
    from symformer.attention.softmax import needs_float32
    from symformer.positional.base import _autocast_off

    seen = []
    method = _autocast_off(lambda self, x: seen.append(compat.autocast_enabled(x.device.type)) or x)
    q = torch.randn(1, 2, 64, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert needs_float32(q, q, q)
        method(None, q)
        assert compat.autocast_enabled("cpu")  # and back on after it
    assert seen == [False]
    assert not needs_float32(q, q, q)


def test_transformers_without_torch_is_refused_in_one_line(monkeypatch):
    """transformers 5 on torch < 2.6 imports but has no models: require_transformers says so (not transformers'
    multi-paragraph ImportError at the first model class), and the experiments that need it report the reason."""
    tf = pytest.importorskip("transformers")
    from symformer.experiments.base import load_all
    from symformer.integrations.hf._common import hf_unavailable, require_transformers

    monkeypatch.setattr(tf.utils, "is_torch_available", lambda: False)
    problem = hf_unavailable()
    assert problem is not None and "\n" not in problem
    assert f"cannot use torch {torch.__version__}" in problem and "PyTorch >= 2.6" in problem
    with pytest.raises(ImportError, match="PyTorch >= 2.6"):
        require_transformers()
    for name in ("hf", "precision"):
        assert "PyTorch >= 2.6" in load_all().get(name).missing_requirement()
