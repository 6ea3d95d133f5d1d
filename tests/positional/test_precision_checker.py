"""The 16-bit precision checker (experiments.precision.rotation_checks.rotation_errors, bound 2 eps max|q|) run on
library code that breaks the precision rules, not on a hand-rounded copy (issue 58 item 9): a RoPE or STRING built in
16 bits without the float32 master (their frequencies rounded to bfloat16, what building a part under a 16-bit
default dtype did before the master) is far outside the bound, through the same call the precision tests make."""

from __future__ import annotations

import pytest
import torch

from symformer.experiments.precision.rotation_checks import rotation_errors


def _no_float32_master(monkeypatch):
    """Parameters in torch's default dtype, as nn.Linear would: a part built under bfloat16 holds 16-bit beta."""
    from symformer.positional import rope, string

    for mod in (rope, string):
        monkeypatch.setattr(mod, "master_dtype", torch.get_default_dtype)


@pytest.mark.parametrize("part", ["rope", "rope_interleaved", "string"])
def test_checker_flags_parts_built_without_the_float32_master(part, monkeypatch):
    assert rotation_errors(part, torch.bfloat16, "built", n=8192)["forward"] <= 1.0
    _no_float32_master(monkeypatch)
    res = rotation_errors(part, torch.bfloat16, "built", n=8192)
    assert res["forward"] > 10, res
