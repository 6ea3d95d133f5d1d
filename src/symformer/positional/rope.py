"""RoPE for any coordinate dimension, in both pairing layouts.

Pairing "interleaved": coordinates (2u, 2u+1) form rotary pair u (RoFormer, GPT-J).
Pairing "half": coordinates (u, u + Dh/2) (GPT-NeoX / LLaMA "rotate-half").
The angle of pair u is theta_u(r) = beta_u . r (ESPR T2.4-T2.7 with U = I); 1-D RoPE is C = 1 with
log-spaced beta; "axial" splits the pairs among the C axes; "mixed" learns beta (RoPE-mixed).
"""
from __future__ import annotations


import torch
from torch import nn

from symformer._validation import check_choice, check_float, check_int, fail
from symformer.positional.base import RotaryPositional

PAIRINGS = ("interleaved", "half")


def rope_frequencies(head_dim: int, coord_dim: int = 1, base: float = 10000.0, mode: str = "axial") -> torch.Tensor:
    """beta of shape (Dh/2, C). Axial: pair u rotates with axis u % C at a log-spaced frequency."""
    m = head_dim // 2
    if mode == "axial":
        beta = torch.zeros(m, coord_dim, dtype=torch.float64)
        per_axis = -(-m // coord_dim)
        for u in range(m):
            axis, j = u % coord_dim, u // coord_dim
            beta[u, axis] = base ** (-j / per_axis)
        return beta
    if mode == "mixed":  # RoPE-mixed init: log-spaced magnitudes along random directions
        g = torch.Generator().manual_seed(0)
        mags = base ** (-torch.arange(m, dtype=torch.float64) / m)
        dirs = torch.randn(m, coord_dim, generator=g, dtype=torch.float64)
        dirs = dirs / dirs.norm(dim=-1, keepdim=True)
        return mags[:, None] * dirs
    fail("mode", mode, "'axial' or 'mixed'")
    raise AssertionError


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """Rotate each pair of x (..., Dh) by angles with cos/sin of shape broadcastable to (..., Dh/2)."""
    m = x.shape[-1] // 2
    if pairing == "half":
        x1, x2 = x[..., :m], x[..., m:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    xp = x.unflatten(-1, (m, 2))
    x1, x2 = xp[..., 0], xp[..., 1]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def pair_indices(head_dim: int, pairing: str) -> torch.Tensor:
    """(Dh/2, 2) coordinate indices of each rotary pair: what teleportation's H(d_h) must act on."""
    m = head_dim // 2
    u = torch.arange(m)
    if pairing == "half":
        return torch.stack((u, u + m), dim=-1)
    return torch.stack((2 * u, 2 * u + 1), dim=-1)


class RoPE(RotaryPositional):
    """Rotary position embedding on (B, H, N, Dh) queries/keys for C-dimensional positions."""

    def __init__(self, head_dim: int, coord_dim: int = 1, base: float = 10000.0, pairing: str = "half",
                 mode: str = "axial", learnable: bool = False, **_: object):
        super().__init__()
        check_int("head_dim", head_dim, 2)
        if head_dim % 2:
            fail("head_dim", head_dim, "an even head dimension (RoPE rotates pairs)")
        self.head_dim = head_dim
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        self.pairing = check_choice("pairing", pairing, PAIRINGS)
        self.mode = check_choice("mode", mode, ("axial", "mixed"))
        check_float("base", base, 1.0, low_open=True)
        beta = rope_frequencies(head_dim, coord_dim, base, mode).to(torch.get_default_dtype())
        if learnable:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """theta (..., N, Dh/2) = positions @ beta^T."""
        return positions.to(self.beta.dtype) @ self.beta.T

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        th = self.angles(positions)
        if th.ndim == 3:  # (B, N, m) -> (B, 1, N, m) to broadcast over heads
            th = th.unsqueeze(1)
        return th.cos().to(dtype), th.sin().to(dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                key_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        kp = self._check_qk(q, k, positions, key_positions)
        cq, sq = self._cos_sin(positions, q.dtype)
        if key_positions is None:
            ck, sk = cq, sq
        else:
            ck, sk = self._cos_sin(kp, k.dtype)
        return rotate_pairs(q, cq, sq, self.pairing), rotate_pairs(k, ck, sk, self.pairing)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        c, s = self._cos_sin(positions, x.dtype)
        return rotate_pairs(x, c, s, self.pairing)

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) of shape (..., N, Dh, Dh): column j is the rotation of basis vector e_j."""
        eye = torch.eye(self.head_dim, dtype=self.beta.dtype, device=self.beta.device)
        th = self.angles(positions)  # (..., N, m)
        c, s = th.cos()[..., None, :], th.sin()[..., None, :]
        # rotate every basis vector (rows of eye), giving R^T row by row
        rt = rotate_pairs(eye.expand(*th.shape[:-1], self.head_dim, self.head_dim), c, s, self.pairing)
        return rt.transpose(-1, -2)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, coord_dim={self.coord_dim}, pairing={self.pairing}, mode={self.mode}"


