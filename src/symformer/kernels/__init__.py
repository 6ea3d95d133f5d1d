"""Fused Triton kernels for the parts and cores (the `triton` extra), each beside its torch reference.

`use_kernel` decides per call which path runs (`kernel=` argument, `SYMFORMER_KERNELS` environment variable:
"auto", "triton" or "torch"); docs/performance.md documents the switch and the fallbacks. Nothing here imports
Triton at import time: modules that define kernels import it only where `triton_available()`.

Kernels: `rotary` (the table-based rotations of RoPE, STRING, partial rotary: `rotary.rotate`, `rotary.rotate_`,
`rotary.rotate_reference`).
"""

from symformer.kernels._dispatch import ENV, KERNEL_CHOICES, interpreting, kernel_mode, triton_available, use_kernel

__all__ = ["ENV", "KERNEL_CHOICES", "interpreting", "kernel_mode", "triton_available", "use_kernel"]
