"""What differs between the torch releases symformer supports (2.3 and later), in one place.

torch 2.4 gave autocast one API for every device type (`torch.amp.is_autocast_available`,
`torch.is_autocast_enabled(device_type)`, `torch.get_autocast_dtype(device_type)`). torch 2.3 has one per device
(`is_autocast_cpu_enabled` / `get_autocast_cpu_dtype`; the argument-less `is_autocast_enabled` /
`get_autocast_gpu_dtype` are CUDA's). Calling the 2.4 names on 2.3 raises AttributeError or TypeError, and the
argument-less call answers for CUDA even on a CPU tensor, so every check goes through `autocast_dtype`.

torch 2.6 added `torch.library.triton_op` / `wrap_triton`, through which torch.compile(fullgraph=True) traces a
Triton kernel; on older releases the fused kernels (symformer.kernels) report themselves unsupported and the torch
path runs (`TRITON_OP`).
"""

from __future__ import annotations

import torch

_PER_DEVICE_API = hasattr(torch, "get_autocast_dtype")  # torch >= 2.4
#: torch >= 2.6: a Triton kernel registered with torch.library.triton_op compiles with fullgraph=True
TRITON_OP = hasattr(torch.library, "triton_op") and hasattr(torch.library, "wrap_triton")


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype `torch.autocast` casts to on `device_type` ("cpu", "cuda", ...), or None where it is off (or
    where this torch has no autocast for that device)."""
    if _PER_DEVICE_API:
        if not torch.amp.is_autocast_available(device_type) or not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    return None


def autocast_enabled(device_type: str) -> bool:
    """Whether `torch.autocast` is on for `device_type`."""
    return autocast_dtype(device_type) is not None


def is_compiling() -> bool:
    """Whether torch.compile (dynamo) is tracing the caller: `torch.compiler.is_compiling` (2.3 has it; older
    releases only the private `torch._dynamo.is_compiling`)."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:  # pragma: no cover - torch < 2.3
        from torch._dynamo import is_compiling as fn
    return bool(fn())
