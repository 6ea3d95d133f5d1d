"""Boundary validation helpers: every message names the argument, what was given and what is expected."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any, Iterable, Iterator

import torch

from symformer._torch_compat import is_compiling

# ---------------------------------------------------------------- when checks may read tensor values
# Shape, dtype and device checks read only metadata and always run. Checks that read VALUES (finiteness, index
# ranges, the structure of a mask, value-keyed caches) copy a result to the host: on an accelerator that is a
# host sync, which stalls the CPU until the device catches up and breaks CUDA-graph capture and
# torch.compile(fullgraph=True). So they run where they are free: on CPU tensors, in eager mode ("auto"). The
# switch `set_value_checks` / `value_checks` / SYMFORMER_VALUE_CHECKS turns them on everywhere ("always", a
# debugging mode: syncs on a GPU, graph breaks under compile) or off everywhere ("never", what a GPU gets by
# default, so a CPU run under "never" makes exactly the host reads a GPU run makes).
VALUE_CHECK_MODES = ("auto", "always", "never")


def _mode_from_env() -> str:
    mode = os.environ.get("SYMFORMER_VALUE_CHECKS", "auto").strip().lower() or "auto"
    if mode not in VALUE_CHECK_MODES:
        raise ValueError(f"SYMFORMER_VALUE_CHECKS: got {mode!r}, expected one of {', '.join(VALUE_CHECK_MODES)}")
    return mode


_VALUE_CHECKS = [_mode_from_env()]


def set_value_checks(mode: str) -> str:
    """Set when symformer's checks may read tensor values: "auto" (CPU tensors in eager mode; the default),
    "always" (every device, a host sync each on an accelerator; a graph break each under torch.compile) or
    "never". Returns the previous mode. Process-wide, like torch.cuda.set_sync_debug_mode."""
    if mode not in VALUE_CHECK_MODES:
        fail("mode", mode, f"one of {', '.join(VALUE_CHECK_MODES)}")
    previous, _VALUE_CHECKS[0] = _VALUE_CHECKS[0], mode
    return previous


def get_value_checks() -> str:
    return _VALUE_CHECKS[0]


@contextlib.contextmanager
def value_checks(mode: str) -> Iterator[None]:
    """`with symformer.value_checks("always"): ...` runs the value checks on every device inside the block."""
    previous = set_value_checks(mode)
    try:
        yield
    finally:
        _VALUE_CHECKS[0] = previous


def reads_values(x: torch.Tensor) -> bool:
    """Whether a check may read the values of `x` now (module comment above): never for a meta tensor (it has
    none) nor while torch.compile traces (a read would break the graph) unless the mode is "always"."""
    mode = _VALUE_CHECKS[0]
    if x.device.type == "meta" or mode == "never":
        return False
    if mode == "always":
        return True
    return x.device.type == "cpu" and not is_compiling()


def fail(name: str, given: Any, expected: str, exc: type[Exception] = ValueError) -> None:
    raise exc(f"{name}: got {given!r}, expected {expected}")


def check_tensor(
    name: str, x: Any, ndim: int | Iterable[int] | None = None, floating: bool = True, finite: bool = True
) -> torch.Tensor:
    """Type, rank, dtype and finiteness checks for a public tensor argument."""
    if not isinstance(x, torch.Tensor):
        fail(name, type(x).__name__, "a torch.Tensor", TypeError)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            fail(name, f"shape {tuple(x.shape)}", f"a tensor with {' or '.join(map(str, allowed))} dimensions")
    if floating and not x.is_floating_point():
        fail(name, f"dtype {x.dtype}", "a floating-point tensor", TypeError)
    if finite and x.is_floating_point() and x.numel() and reads_values(x) and not all_finite(x):
        fail(name, "a tensor with NaN or inf entries", "finite values")
    return x


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry is finite, in one cheap reduction in the common case. A floating-point sum is
    finite only if every entry is (NaN propagates, inf + finite is inf, inf + -inf is NaN, and no sum leaves
    inf), so a finite sum settles it (cheaper than aminmax, and than isfinite(x).all(), which allocates a
    bool tensor). A non-finite sum may be overflow of finite entries: then aminmax decides (all
    entries finite iff min and max are)."""
    if x.numel() == 0 or x.device.type == "meta":  # a meta tensor has no values (HF builds models on meta)
        return True
    x = x.detach()
    if bool(torch.isfinite(x.sum())):
        return True
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def check_int(name: str, v: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        fail(name, v, "an integer", TypeError)
    if minimum is not None and v < minimum:
        fail(name, v, f"an integer >= {minimum}")
    if maximum is not None and v > maximum:
        fail(name, v, f"an integer <= {maximum}")
    return v


def check_float(
    name: str,
    v: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(name, v, "a number", TypeError)
    v = float(v)
    if not math.isfinite(v):
        fail(name, v, "a finite number")
    lo_bad = low is not None and (v <= low if low_open else v < low)
    hi_bad = high is not None and (v >= high if high_open else v > high)
    if lo_bad or hi_bad:
        lb = "(" if low_open else "["
        hb = ")" if high_open else "]"
        lo, hi = low if low is not None else "-inf", high if high is not None else "inf"
        fail(name, v, f"a number in {lb}{lo}, {hi}{hb}")
    return v


def check_choice(name: str, v: Any, choices: Iterable[str]) -> str:
    choices = list(choices)
    if v not in choices:
        fail(name, v, f"one of {', '.join(map(str, choices))}")
    return v


#: the kinds of device a run may be given (RunContext.device, `reproduce/bench --device`, a job's `device=`)
DEVICE_KINDS = ("cpu", "cuda", "mps")


def check_device(device: Any, name: str = "device", here: bool = True) -> str:
    """`device`: 'cpu', 'cuda' or 'cuda:N' where torch finds that CUDA device, 'mps' where torch finds Apple's
    Metal backend; returns it. Anything else, and a device this machine lacks, is a ValueError naming `name` (a job
    checks its device before its first model build, which can take an hour; the CLI before any work). here=False
    checks the form only: a cluster's driver (a login node) need not have the GPUs its jobs run on."""
    try:
        where = torch.device(device) if isinstance(device, str) else None
    except RuntimeError:  # "cuda:x", "gpu": not a device string torch parses
        where = None
    if where is None or where.type not in DEVICE_KINDS:
        fail(name, device, "'cpu' or 'cuda' (or 'cuda:N', 'mps')")
    if not here:
        return device
    if where.type == "cuda" and not torch.cuda.is_available():
        fail(name, device, "'cpu' here: torch finds no CUDA device on this machine")
    if where.type == "cuda" and where.index is not None and where.index >= torch.cuda.device_count():
        fail(name, device, f"'cuda:N' with N < {torch.cuda.device_count()}, the CUDA devices torch finds here")
    if where.type == "mps" and not torch.backends.mps.is_available():
        fail(name, device, "'cpu' here: torch finds no MPS (Apple Metal) device on this machine")
    return device


def check_attention_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, finite_kv: bool = True, finite_q: bool = True
) -> None:
    """SDPA-shaped inputs: q (B, H, Nq, Dh), k (B, H, Nk, Dh), v (B, H, Nk, Dv).

    finite_kv=False skips the finiteness scan of k and v for a core that checks a cheaper quantity that
    any non-finite key or value reaches (PLASH checks its M x d Stage I summaries) and then calls
    `check_finite_kv` to name the culprit; finite_q=False does the same for q (FAVOR+ tests its output)."""
    check_tensor("q", q, 4, finite=finite_q)
    check_tensor("k", k, 4, finite=finite_kv)
    check_tensor("v", v, 4, finite=finite_kv)
    if k.shape[-1] != q.shape[-1]:
        fail("k", f"head dim {k.shape[-1]}", f"the head dim of q ({q.shape[-1]})")
    if k.shape[-2] == 0:
        fail("k", f"shape {tuple(k.shape)}", "at least one key (N_k >= 1)")
    if v.shape[-2] != k.shape[-2]:
        fail("v", f"{v.shape[-2]} positions", f"the {k.shape[-2]} positions of k")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        fail("k", f"batch/head dims {tuple(k.shape[:2])}", f"those of q {tuple(q.shape[:2])}")


def check_finite_kv(k: torch.Tensor, v: torch.Tensor, culprit: str, derived: str) -> None:
    """Raise after `derived` (computed from k and v) came out non-finite: name the input holding a NaN/inf,
    else `culprit` ("k" or "v"), the input whose finite values overflowed."""
    check_tensor("k", k)
    check_tensor("v", v)
    fail(culprit, f"finite values whose {derived} overflow to inf/NaN", "keys and values of moderate magnitude")
