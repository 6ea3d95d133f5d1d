"""The decoding contract: everything models/, integrations/hf/ and benchmarks/ may use of an attention core that
decodes token by token with a constant-size state (FAVOR+, PLASH). Nobody else asks `hasattr(core, "init_state")`,
compares class names or branches per core: a new decoding core is its file, its state, one `ATTENTION.register` line
and its tests, and it then runs in `models.CausalLM.generate`, HF `generate()` (as attn_implementation
"symformer_<name>") and the generation bench.

* `DecodingCore.init_state(batch=None, max_len=None) -> DecodingState`: an empty state. `batch` and `max_len` let a
  core allocate static shapes up front (torch.compile / CUDA graphs: the GPU-ready issue); a core that grows its state
  on the first step may ignore them.
* `DecodingCore.forward(q, k, v, attn_mask=None, is_causal=False, scale=None, state=None)`: SDPA's call; with a
  state (causal only) the L new queries continue the sequence the state holds, the state is updated in place, and
  the output equals the last L rows of the full causal forward over every token so far.
* `DecodingState.select(index)` keeps / reorders batch rows (beam search), `repeat_interleave(repeats)` expands them
  (num_return_sequences), `nbytes()` is the memory the state holds (constant in the context length).
* `DecodingCore.value_dim_equals_head_dim`: the core needs Dv = Dh (PLASH's mixer runs at one head size); a host
  pads narrower values (multi-head latent attention) with zero columns and slices them off the output.
* `DecodingCore.builds_lazily`: a host may build the core on a layer's first forward (FAVOR+: fixed random features,
  nothing to train); False where it has trainable parameters an optimizer must see from the start (PLASH), so a host
  requires the core to be configured before the forward. False by default: a new core is configured explicitly
  unless it says otherwise.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from symformer.attention.softmax import AttentionCore
from symformer.registry import ATTENTION


@runtime_checkable
class DecodingState(Protocol):
    """A core's recurrent state (module doc)."""

    def select(self, index: torch.Tensor) -> None: ...

    def repeat_interleave(self, repeats: int) -> None: ...

    def nbytes(self) -> int: ...


class DecodingCore(AttentionCore):
    """Base of the cores that decode with a constant-size state (module doc)."""

    value_dim_equals_head_dim = False
    builds_lazily = False

    def __init__(self, head_dim: int | None = None) -> None:
        """head_dim: the head size a host builds the core for (`ATTENTION.build(name, head_dim=, n_heads=, d_model=,
        **options)` passes the keys a constructor names); a core that needs none takes this constructor."""
        super().__init__()

    def init_state(self, batch: int | None = None, max_len: int | None = None) -> DecodingState:
        raise NotImplementedError(f"{type(self).__name__}.init_state")

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        scale: float | None = None,
        state: DecodingState | None = None,
    ) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


def decoding_cores() -> dict[str, type]:
    """name -> class of every registered attention core that decodes (ATTENTION entries subclassing DecodingCore), in
    registration order."""
    return {
        name: ATTENTION.get(name)
        for name in ATTENTION.registered()
        if isinstance(ATTENTION.get(name), type) and issubclass(ATTENTION.get(name), DecodingCore)
    }


__all__ = ["DecodingCore", "DecodingState", "decoding_cores"]
