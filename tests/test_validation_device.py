"""symformer._validation.check_device: the one device check of the runner (`reproduce/bench --device`) and of the
jobs (a job's `device=`), which accepts what both accepted before (cpu, cuda, cuda:N) and mps."""

import pytest
import torch

from symformer._validation import check_device


@pytest.mark.parametrize("device", ["cpu", "cpu:0"])
def test_the_cpu_is_always_there(device):
    assert check_device(device) == device
    assert check_device(device, "--device", here=False) == device


@pytest.mark.parametrize("bad", ["gpu", "tpu", "cuda:x", "cuda:-1", "CUDA", "", "meta", 0, None, torch.device("cpu")])
def test_anything_else_is_one_line_naming_the_option(bad):
    with pytest.raises(ValueError, match=r"^--device: got .*, expected 'cpu' or 'cuda' \(or 'cuda:N', 'mps'\)$"):
        check_device(bad, "--device")
    with pytest.raises(ValueError, match=r"^device: got .*, expected 'cpu' or 'cuda'"):
        check_device(bad, here=False)  # the form is checked also where the device is not


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"], ids=["plain", "index-0", "index-3"])
def test_cuda_in_both_forms_is_accepted_by_its_form(device):
    assert check_device(device, "--device", here=False) == device  # a cluster's driver: its nodes have the GPUs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"], ids=["plain", "index-1"])  # a "cuda" id marks a GPU test
def test_cuda_without_a_cuda_device_is_refused(device):
    with pytest.raises(
        ValueError, match=rf"^--device: got '{device}', expected 'cpu' here: torch finds no CUDA device"
    ):
        check_device(device, "--device")


@pytest.mark.cuda
def test_cuda_devices_torch_finds_are_accepted_and_the_others_refused():
    n = torch.cuda.device_count()
    assert check_device("cuda") == "cuda" and check_device(f"cuda:{n - 1}") == f"cuda:{n - 1}"
    with pytest.raises(ValueError, match=rf"^device: got 'cuda:{n}', expected 'cuda:N' with N < {n}"):
        check_device(f"cuda:{n}")


def test_mps_only_where_torch_finds_it():
    if torch.backends.mps.is_available():
        assert check_device("mps") == "mps"
    else:
        with pytest.raises(ValueError, match=r"^device: got 'mps', expected 'cpu' here: torch finds no MPS"):
            check_device("mps")
    assert check_device("mps", here=False) == "mps"
