"""Plain-torch stand-ins for timm's 2-D rotary embeddings, the reference rows of the positional suite's 2-D timings
(issue 62): timm cannot import here (its torchvision wheel does not load with the CPU torch wheel).

Written from the formulas of timm's `timm/layers/pos_embed_sincos.py`, not copied from it:

* `TimmStyleAxial` (RotaryEmbeddingCat, frequency bands, no pixel mode): a fixed table per grid, sin and cos of
  theta (N, Dh/2) with every angle repeated for its two coordinates, (N, 2 Dh) in float32, built once;
  applied as x cos + rot(x) sin with rot(x) = (-x1, x0, -x3, x2, ...) (interleaved pairs).
* `TimmStyleMixed` (RotaryEmbeddingMixed, one layer): learnable freqs (2, H, Dh/2) in float32; every forward
  computes theta = t_x freqs_x + t_y freqs_y (H, N, Dh/2) in float32, its sin and cos repeated per coordinate and
  concatenated (H, N, 2 Dh), then x cos + rot(x) sin. Autograd differentiates it all (timm has no custom backward).

Both take our frequencies beta (`RoPE.beta`, (Dh/2, 2) or (H, Dh/2, 2)) and (N, 2) positions, so that their output
can be checked against our parts' (tests/positional/test_bench_positional.py) before their time is compared.
"""

from __future__ import annotations

import torch
from torch import nn


def rot_interleaved(x: torch.Tensor) -> torch.Tensor:
    """(-x1, x0, -x3, x2, ...): J applied to every interleaved pair of x (..., Dh)."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., Dh) -> (..., Dh/2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).reshape(x.shape)


def apply_sincos_cat(x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
    """x cos + rot(x) sin with emb = [sin, cos] (..., 2 Dh), each repeated per coordinate of a pair."""
    sin, cos = emb.chunk(2, dim=-1)
    return x * cos + rot_interleaved(x) * sin


def sincos_cat(theta: torch.Tensor) -> torch.Tensor:
    """[sin, cos] of theta (..., Dh/2), every angle repeated for the two coordinates of its pair: (..., 2 Dh)."""
    return torch.cat((theta.sin().repeat_interleave(2, -1), theta.cos().repeat_interleave(2, -1)), dim=-1)


class TimmStyleAxial(nn.Module):
    """Axial RoPE with a fixed float32 [sin, cos] table per position set (RotaryEmbeddingCat's cached embedding).

    Args:
        beta (Dh/2, 2): the frequency of each pair along each axis (one nonzero per row for axial RoPE).
        positions (N, 2): the grid the table is built for.
    """

    def __init__(self, beta: torch.Tensor, positions: torch.Tensor):
        super().__init__()
        theta = positions.to(torch.float32) @ beta.detach().to(torch.float32).T  # (N, 2) @ (2, Dh/2)
        self.register_buffer("emb", sincos_cat(theta))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_sincos_cat(q, self.emb), apply_sincos_cat(k, self.emb)


class TimmStyleMixed(nn.Module):
    """RoPE-Mixed with learnable per-head freqs (2, H, Dh/2), its table recomputed every forward in float32.

    Args:
        beta (H, Dh/2, 2): per-head frequencies (our RoPE(mode="mixed", n_heads=H).beta).
        positions (N, 2): t_x = positions[:, 0], t_y = positions[:, 1].
    """

    def __init__(self, beta: torch.Tensor, positions: torch.Tensor):
        super().__init__()
        self.freqs = nn.Parameter(beta.detach().to(torch.float32).permute(2, 0, 1).contiguous())  # (2, H, Dh/2)
        pos = positions.to(torch.float32)
        self.register_buffer("t_x", pos[:, 0].contiguous())
        self.register_buffer("t_y", pos[:, 1].contiguous())

    def embed(self) -> torch.Tensor:
        """[sin, cos] (H, N, 2 Dh) of theta = t_x freqs_x + t_y freqs_y, as outer products (N, 1) @ (H, 1, Dh/2)."""
        fx = self.t_x[:, None] @ self.freqs[0][:, None, :]  # (N, 1) @ (H, 1, Dh/2) -> (H, N, Dh/2)
        fy = self.t_y[:, None] @ self.freqs[1][:, None, :]
        return sincos_cat(fx + fy)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        emb = self.embed()
        return apply_sincos_cat(q, emb), apply_sincos_cat(k, emb)
