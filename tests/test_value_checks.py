"""The value-check switch (docs/performance.md, "GPU"): bad modes are refused naming the argument, the context
restores the previous mode, and the environment variable is read and checked at import."""

import os
import subprocess
import sys

import pytest
import torch

import symformer
from symformer._validation import reads_values


def test_bad_modes_are_refused_and_the_mode_is_kept():
    before = symformer.get_value_checks()
    with pytest.raises(ValueError, match="^mode: got 'sometimes', expected one of auto, always, never$"):
        symformer.set_value_checks("sometimes")
    with pytest.raises(ValueError, match="^mode: got None, expected one of auto, always, never$"):
        with symformer.value_checks(None):
            pass
    assert symformer.get_value_checks() == before


def test_context_restores_the_previous_mode_after_an_error():
    before = symformer.get_value_checks()
    with pytest.raises(RuntimeError):
        with symformer.value_checks("never"):
            assert not reads_values(torch.ones(1))
            raise RuntimeError("inside")
    assert symformer.get_value_checks() == before and reads_values(torch.ones(1))
    assert not reads_values(torch.ones(1, device="meta"))


def test_environment_variable_sets_and_checks_the_mode():
    code = "import symformer; print(symformer.get_value_checks())"
    env = {**os.environ, "SYMFORMER_VALUE_CHECKS": "Never"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "never"
    env["SYMFORMER_VALUE_CHECKS"] = "sometimes"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "SYMFORMER_VALUE_CHECKS: got 'sometimes', expected one of auto, always, never" in (
        bad.stderr
    )
