"""The fact MLP slot (fact-storing-mlps.txt Sec. 5.1 and 5.4): the registered MLP part `mlp="fact"`, which holds a
frozen fact-storing MLP (any `symformer.facts.FactMLP`), and MLP swapping (`swap_fact_mlp`), which replaces it whole.

A part like the rotary and attention parts: any model built from named parts takes it (`TransformerConfig(mlp=
"fact")`), and so does the fact-recall transformer (`symformer.facts.lm`)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from symformer._validation import check_int, fail
from symformer.registry import MLP


def check_fact_mlp(mlp: nn.Module, d_model: int, name: str = "fact_mlp") -> nn.Module:
    """A fact MLP (with its width attribute d, as every `symformer.facts.FactMLP`) of width d_model."""
    width = getattr(mlp, "d", None)
    if not isinstance(mlp, nn.Module) or width is None:
        fail(name, type(mlp).__name__, "a FactMLP (with its width attribute d)", TypeError)
    if width != d_model:
        fail(name, f"an MLP of width d={width}", f"the model width d_model={d_model}")
    return mlp


class FactSlot(nn.Module):
    """An MLP slot holding a frozen fact MLP (any `symformer.facts.FactMLP`). `swap` replaces it whole.

    Precision: a construction is built in float64 (or float32) and stays so; a 16-bit host runs a copy of it cast
    once to the host's dtype (a single rounding of every weight, never a 16-bit intermediate), or to the
    construction's `min_dtype` where it declares one (the central-difference encoder: its difference of two silu
    values cancels below 16-bit rounding), the input cast up and the output back. The slot knows the host's dtype
    from a scalar buffer that `.to()` / `.half()` / `.bfloat16()` cast with the host (not in a state_dict).
    Swapped into a 16-bit host, the copy is made at `swap`; swapped in first and the host cast after, the copy is
    made at the cast from the construction as it was; the caller's construction object keeps its dtype either way.
    Float32 and float64 hosts run the construction as it is (in its own dtype, the output cast to the input's)."""

    def __init__(self, d_model: int, d_ff: int | None = None):
        super().__init__()
        self.d_model = check_int("d_model", d_model, 1)
        self.mlp: nn.Module | None = None
        self.register_buffer("host_probe", torch.zeros(()), persistent=False)

    @property
    def host_dtype(self) -> torch.dtype:
        return self.host_probe.dtype

    def swap(self, mlp: nn.Module) -> nn.Module | None:
        """Put `mlp` in the slot (frozen; in a 16-bit host a copy, cast once) and return the MLP it replaces."""
        check_fact_mlp(mlp, self.d_model)
        for p in mlp.parameters():
            p.requires_grad_(False)
        old, self.mlp = self.mlp, _for_host(mlp, self.host_probe)
        return old

    def _apply(self, fn, recurse: bool = True):
        mlp = self.mlp
        if mlp is None or fn(self.host_probe).dtype == self.host_probe.dtype:
            return super()._apply(fn, recurse)  # a move to another device: as any module
        self.mlp = None  # a cast of the host: the construction is cast from its own dtype, by _for_host
        try:
            super()._apply(fn, recurse)
        finally:
            self.mlp = mlp
        self.mlp = _for_host(mlp, self.host_probe) if _is_16bit(self.host_dtype) else copy.deepcopy(mlp)._apply(fn)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mlp is None:
            fail("fact_mlp", None, "a fact MLP in the slot (call swap(mlp) first)")
        return self.mlp(x).to(x.dtype)


def _for_host(mlp: nn.Module, probe: torch.Tensor) -> nn.Module:
    """`mlp` itself for a float32/float64 host; for a 16-bit host a copy cast once to the host's dtype or to the
    construction's `min_dtype` (FactSlot)."""
    if not _is_16bit(probe.dtype):
        return mlp
    want = probe.dtype
    if getattr(mlp, "min_dtype", None) is not None:
        want = torch.promote_types(want, mlp.min_dtype)
    if all(p.dtype == want and p.device == probe.device for p in mlp.parameters()):
        return mlp
    return copy.deepcopy(mlp).to(device=probe.device, dtype=want)


def _is_16bit(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and torch.finfo(dtype).bits == 16


@MLP.register("fact")
def fact_slot(d_model: int, d_ff: int | None = None) -> FactSlot:
    """`mlp="fact"`: an empty slot; fill it with `symformer.facts.swap_fact_mlp(model, mlp)`."""
    return FactSlot(d_model, d_ff)


def swap_fact_mlp(model: nn.Module, mlp: nn.Module) -> list[nn.Module | None]:
    """Swap `mlp` into every FactSlot of `model` (MLP swapping, Sec. 5.4); returns the replaced MLPs."""
    slots = [m for m in model.modules() if isinstance(m, FactSlot)]
    if not slots:
        fail("model", type(model).__name__, "a model with a fact MLP slot (mlp='fact')")
    check_fact_mlp(mlp, slots[0].d_model)
    mlp = _for_host(mlp, slots[0].host_probe)  # one cast copy shared by every slot of a 16-bit host
    return [s.swap(mlp) for s in slots]
