"""One interface per kind of positional part.

* `AdditivePositional` adds a vector to each token embedding: `forward(x, positions) -> x`.
* `RotaryPositional` acts on queries and keys per attention layer: `forward(q, k, positions,
  key_positions=None) -> (q, k)` with q, k of shape (B, H, N, Dh) and positions (B, N, C) or (N, C);
  `matrix(positions)` returns the (..., N, Dh, Dh) rotations R(r) for analysis, and `scale` the
  logit scale the attention must use (None: 1/sqrt(Dh)).
"""
from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_tensor, fail


def check_positions(positions: torch.Tensor, coord_dim: int, n: int | None = None, name: str = "positions") -> torch.Tensor:
    check_tensor(name, positions, (2, 3))
    if positions.shape[-1] != coord_dim:
        fail(name, f"shape {tuple(positions.shape)}", f"a last dimension equal to the coordinate dimension C={coord_dim}")
    if n is not None and positions.shape[-2] != n:
        fail(name, f"{positions.shape[-2]} positions", f"one per token ({n})")
    return positions


class AdditivePositional(nn.Module):
    kind = "additive"
    coord_dim: int


class RotaryPositional(nn.Module):
    kind = "rotary"
    coord_dim: int
    head_dim: int

    @property
    def scale(self) -> float | None:
        return None

    def _check_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                  key_positions: torch.Tensor | None) -> torch.Tensor:
        check_tensor("q", q, 4)
        check_tensor("k", k, 4)
        for name, t in (("q", q), ("k", k)):
            if t.shape[-1] != self.head_dim:
                fail(name, f"head dim {t.shape[-1]}", f"head dim {self.head_dim}")
        check_positions(positions, self.coord_dim, q.shape[-2])
        kp = positions if key_positions is None else key_positions
        check_positions(kp, self.coord_dim, k.shape[-2], "key_positions")
        return kp


class NoPositional(nn.Module):
    kind = "none"

    def __init__(self):
        super().__init__()
