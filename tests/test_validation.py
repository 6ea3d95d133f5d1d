"""symformer._validation.all_finite: the fast finite-sum path against torch.isfinite on hard inputs."""

import pytest
import torch

from symformer._validation import all_finite, check_tensor


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_finite_entries_whose_sum_overflows_are_finite(dtype):
    big = torch.finfo(dtype).max
    x = torch.full((64,), big, dtype=dtype)
    assert not torch.isfinite(x.sum())  # the fast path cannot decide: aminmax must
    assert all_finite(x) and all_finite(-x)
    mixed = torch.stack((x, -x), -1).flatten()
    assert all_finite(mixed)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_any_non_finite_entry_is_found(dtype, bad):
    g = torch.Generator().manual_seed(0)
    for n in (1, 7, 1000, 70_001):  # sizes around the vectorised and parallel reduction widths
        for pos in (0, n // 2, n - 1):
            x = torch.randn(n, generator=g).to(dtype)
            x[pos] = bad
            assert not all_finite(x), (n, pos)
    x = torch.zeros(10, dtype=dtype)
    x[2], x[7] = float("inf"), -float("inf")  # inf + -inf: the sum is NaN
    assert not all_finite(x)
    x = torch.full((10,), torch.finfo(dtype).max, dtype=dtype)
    x[3] = bad  # overflow and a non-finite entry together
    assert not all_finite(x)


def test_agrees_with_isfinite_on_random_specials():
    g = torch.Generator().manual_seed(1)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e38, -3e38, 0.0])
    for _ in range(300):
        n = int(torch.randint(1, 50, (1,), generator=g))
        x = torch.randn(n, generator=g) * 10 ** float(torch.randint(0, 39, (1,), generator=g))
        hits = torch.rand(n, generator=g) < 0.1
        x[hits] = specials[torch.randint(0, 6, (int(hits.sum()),), generator=g)]
        assert all_finite(x) == bool(torch.isfinite(x).all())
    assert all_finite(torch.empty(0))


def test_check_tensor_names_the_argument_for_non_finite_values():
    with pytest.raises(ValueError, match="^q: .*finite"):
        check_tensor("q", torch.tensor([1.0, float("nan")]))
    assert check_tensor("q", torch.full((3,), 3e38)) is not None  # overflowing sum, finite entries


def test_meta_tensors_have_no_values_to_check():
    """HF's from_pretrained builds modules on the meta device: value checks must pass there, not call item()."""
    x = torch.empty(3, 3, device="meta")
    assert all_finite(x)
    assert check_tensor("x", x, 2) is x
    with pytest.raises(ValueError, match="^x: .*dimensions"):  # the shape is still checked
        check_tensor("x", x, 3)
