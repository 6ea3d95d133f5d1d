"""The kernel switch: the argument, the environment variable, the fallbacks and the refusals (kernels/_dispatch.py)."""

import pytest
import torch

from symformer.kernels import _dispatch, use_kernel


def test_torch_always_wins(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not use_kernel("rotary", [torch.zeros(2)], kernel="torch")
    monkeypatch.setenv("SYMFORMER_KERNELS", "torch")
    assert not use_kernel("rotary", [torch.zeros(2)])


def test_auto_keeps_cpu_tensors_on_the_torch_path(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not use_kernel("rotary", [torch.zeros(2)], kernel="auto")
    assert not use_kernel("rotary", [torch.zeros(2)])


def test_the_argument_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("SYMFORMER_KERNELS", "triton")
    assert not use_kernel("rotary", [torch.zeros(2)], kernel="torch")


def test_bad_choices_name_the_argument(monkeypatch):
    with pytest.raises(ValueError, match="kernel.*'cuda'.*one of auto, triton, torch"):
        use_kernel("rotary", [torch.zeros(2)], kernel="cuda")
    monkeypatch.setenv("SYMFORMER_KERNELS", "fast")
    with pytest.raises(ValueError, match="SYMFORMER_KERNELS.*'fast'"):
        use_kernel("rotary", [torch.zeros(2)])


def test_forced_kernel_on_cpu_without_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(_dispatch, "triton_available", lambda: True)
    with pytest.raises(ValueError, match="kernel.*CUDA tensors, or CPU tensors under TRITON_INTERPRET=1"):
        use_kernel("rotary", [torch.zeros(2)], kernel="triton")


def test_forced_kernel_without_triton_is_refused(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_available", lambda: False)
    with pytest.raises(ValueError, match="Triton does not import"):
        use_kernel("rotary", [torch.zeros(2)], kernel="triton")


def test_forced_kernel_on_unsupported_input_is_refused_and_auto_warns_once(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_dispatch, "triton_available", lambda: True)
    with pytest.raises(ValueError, match="kernel.*head dim 320 above 256"):
        use_kernel("rotary", [torch.zeros(2)], kernel="triton", unsupported="head dim 320 above 256")
    assert use_kernel("rotary", [torch.zeros(2)], kernel="triton")
    # "auto" on CUDA tensors that the kernel cannot take: the torch path, one warning per op and reason
    monkeypatch.setattr(_dispatch, "_where", lambda tensors: "cuda")
    monkeypatch.setattr(_dispatch, "_WARNED", set())
    with pytest.warns(UserWarning, match="rotary kernel does not take float64"):
        assert not use_kernel("rotary", [torch.zeros(2)], unsupported="float64")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not use_kernel("rotary", [torch.zeros(2)], unsupported="float64")
    assert use_kernel("rotary", [torch.zeros(2)])


def test_the_choice_compiles_without_a_graph_break():
    def f(x):
        return x * 2 if use_kernel("rotary", [x]) else x + 1

    assert torch._dynamo.explain(f)(torch.zeros(3)).graph_break_count == 0
