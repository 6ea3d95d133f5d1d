"""Which path runs an op: its fused Triton kernel or its torch reference (design.md: one switch, a fallback with
one warning).

The choice, per call:
- `kernel="torch"` (argument) or `SYMFORMER_KERNELS=torch` (environment): the torch reference, always.
- `"auto"` (the default): the kernel for CUDA tensors when Triton imports and the kernel supports the inputs;
  on other inputs the torch reference, with one warning per op and reason where the inputs were CUDA tensors the
  kernel cannot take. CPU tensors never take the kernel in "auto": there the torch path is the CPU path.
- `"triton"`: the kernel, or a ValueError naming `kernel` when it cannot run (no Triton, no CUDA tensor and no
  interpreter, an unsupported input). Under `TRITON_INTERPRET=1` a forced kernel runs on CPU tensors: how the
  tests compare each kernel with its reference on a machine without a GPU.

The argument wins over the environment. Only tensor metadata is read, so the choice makes no host sync and
torch.compile folds it into a constant.
"""

from __future__ import annotations

import os
import warnings
from typing import Iterable

import torch

from symformer._validation import fail

KERNEL_CHOICES = ("auto", "triton", "torch")
ENV = "SYMFORMER_KERNELS"
_WARNED: set[tuple[str, str]] = set()


_TRITON: list[bool] = []  # filled once; a plain list, not functools.lru_cache, which dynamo warns about when traced


def triton_available() -> bool:
    """Whether Triton imports (the `triton` extra: `pip install symformer[triton]`)."""
    if not _TRITON:
        try:
            import triton  # noqa: F401  # optional dependency: the kernels exist only where it imports
        except ImportError:
            _TRITON.append(False)
        else:
            _TRITON.append(True)
    return _TRITON[0]


def interpreting() -> bool:
    """Whether Triton runs its kernels in the interpreter (TRITON_INTERPRET=1): on CPU tensors, for tests."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def kernel_mode(kernel: str | None = None) -> str:
    """The mode in force: the argument when given, else SYMFORMER_KERNELS, else "auto"."""
    if kernel is None:
        given = os.environ.get(ENV, "auto").strip().lower() or "auto"
        if given not in KERNEL_CHOICES:
            fail(ENV, given, f"one of {', '.join(KERNEL_CHOICES)}")
        return given
    if not isinstance(kernel, str) or kernel not in KERNEL_CHOICES:
        fail("kernel", kernel, f"None or one of {', '.join(KERNEL_CHOICES)}")
    return kernel


def _where(tensors: Iterable[torch.Tensor]) -> str:
    devices = {t.device.type for t in tensors}
    if devices == {"cuda"}:
        return "cuda"
    if devices == {"cpu"} and interpreting():
        return "interpreter"
    return "none"


def use_kernel(
    op: str, tensors: Iterable[torch.Tensor], kernel: str | None = None, unsupported: str | None = None
) -> bool:
    """True when `op` should run its Triton kernel on `tensors`.

    Args:
        op: the op's name, for messages ("rotary", "favor_causal", ...).
        tensors: the inputs the kernel would read (their devices decide).
        kernel: None (read SYMFORMER_KERNELS), "auto", "triton" or "torch".
        unsupported: why the kernel cannot take these inputs ("head dim 320 above 256"), or None when it can.

    Example:
        >>> use_kernel("rotary", [torch.zeros(2, 4)], kernel="torch")
        False
    """
    mode = kernel_mode(kernel)
    if mode == "torch":
        return False
    tensors = list(tensors)
    where = _where(tensors)
    if mode == "auto":
        if where != "cuda" or not triton_available():
            return False
        if unsupported is not None:
            _warn_once(op, unsupported)
            return False
        return True
    if not triton_available():
        fail(
            "kernel",
            kernel or f"{ENV}=triton",
            "'torch' or 'auto' here: Triton does not import (pip install symformer[triton])",
        )
    if where == "none":
        found = sorted({t.device.type for t in tensors})
        fail("kernel", "triton", f"CUDA tensors, or CPU tensors under TRITON_INTERPRET=1, for {op} (got {found})")
    if unsupported is not None:
        fail("kernel", "triton", f"inputs the {op} kernel supports; {unsupported}")
    return True


def _warn_once(op: str, reason: str) -> None:
    if (op, reason) in _WARNED:
        return
    _WARNED.add((op, reason))
    warnings.warn(f"symformer: the {op} kernel does not take {reason}; running the torch path", stacklevel=3)
