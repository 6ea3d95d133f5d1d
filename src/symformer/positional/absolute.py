"""Additive absolute positional encodings: sinusoidal (any C) and learned (axial tables).

Precision (base.Float32Master): the learned tables are float32 masters; the encoding is computed and added in
float32 (float64 for float64 inputs) from positions never rounded to 16 bits, and the sum is rounded once to x's
dtype."""

from __future__ import annotations

import math

import torch
from torch import nn

from symformer._validation import check_int, fail, reads_values
from symformer.positional.base import (
    AdditivePositional,
    check_input_dtype,
    check_positions,
    compute_dtype,
    master_dtype,
)


def sinusoidal_table(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al. sinusoid of scalar positions (..., N) -> (..., N, dim)."""
    half = dim // 2
    freq = torch.exp(-math.log(base) * torch.arange(half, dtype=positions.dtype, device=positions.device) / half)
    ang = positions[..., None] * freq
    return torch.cat((ang.sin(), ang.cos()), dim=-1)


class SinusoidalPE(AdditivePositional):
    """Each of the C coordinates gets d_model/C dimensions of sinusoids.

    Args:
        d_model (int): the embedding width, a multiple of 2 C.
        coord_dim (int): C, the coordinates of a position.
        base (float): base of the sinusoids' log-spaced frequencies.

    Examples:
        >>> import torch
        >>> from symformer.positional import SinusoidalPE
        >>> pe = SinusoidalPE(d_model=8, coord_dim=2)
        >>> x, pos = torch.zeros(3, 4, 8), torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])  # (B, N, D), (N, C)
        >>> out = pe(x, pos)
        >>> out.shape
        torch.Size([3, 4, 8])
        >>> torch.allclose(out[0], pe.encoding(pos.float()))  # x + the encoding of each position
        True
        >>> out[0, 0].tolist()  # position (0, 0): sin 0 = 0, cos 0 = 1 for both coordinates
        [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    """

    def __init__(self, d_model: int, coord_dim: int = 1, base: float = 10000.0):
        super().__init__()
        check_int("d_model", d_model, 2)
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        per = d_model // coord_dim
        if per % 2 or per * coord_dim != d_model:
            fail("d_model", d_model, f"a multiple of 2*C = {2 * coord_dim} for a {coord_dim}-D sinusoidal encoding")
        self.d_model, self.per, self.base = d_model, per, base

    def encoding(self, positions: torch.Tensor) -> torch.Tensor:
        """The sinusoids of every coordinate, concatenated: [sin, cos] of coordinate 0, then of coordinate 1, ...

        Args:
            positions (..., N, C): float positions.

        Returns:
            pe (..., N, D): the encoding, in positions' dtype.
        """
        return torch.cat(
            [sinusoidal_table(positions[..., c], self.per, self.base) for c in range(self.coord_dim)], dim=-1
        )

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x plus the encoding of each token's position, added in float32 (float64) and rounded once.

        Args:
            x (B, N, D): token embeddings (or (N, D)), float16 / bfloat16 / float32 / float64.
            positions (N, C): the tokens' positions, integer or float32 / float64 (or (B, N, C)).

        Returns:
            out (B, N, D): x + PE(positions), in x's dtype.
        """
        check_input_dtype("x", x)
        check_positions(positions, self.coord_dim, x.shape[-2], batch=x.shape[0] if x.ndim == 3 else None)
        cd = compute_dtype(x.dtype)
        return (x.to(cd) + self.encoding(positions.to(cd))).to(x.dtype)


def _bad_indices(idx: torch.Tensor, positions: torch.Tensor, max_len: int) -> bool:
    """Whether a position is not an integer in [0, max_len): read on the host, so only where that is free
    (_validation.reads_values); elsewhere an index out of range is the device's own error."""
    out_of_range = bool((idx < 0).any()) or bool((idx >= max_len).any())
    return out_of_range or not torch.equal(idx.to(positions.dtype), positions)


class LearnedPE(AdditivePositional):
    """Sum of one learned table per axis, indexed by the (integer) coordinate: standard learned PE for
    C = 1, axial learned PE on grids.

    Args:
        d_model (int): the embedding width D.
        coord_dim (int): C, the coordinates of a position.
        max_len (int): positions along each axis are integers in [0, max_len).

    Examples:
        >>> import torch
        >>> from symformer.positional import LearnedPE
        >>> pe = LearnedPE(d_model=4, coord_dim=2, max_len=3)  # tables (C, max_len, D)
        >>> pos = torch.tensor([[0, 2], [1, 0]])  # (N, C)
        >>> out = pe(torch.zeros(1, 2, 4), pos)
        >>> torch.allclose(out[0, 0], pe.tables[0, 0] + pe.tables[1, 2])  # one row per axis, summed
        True
    """

    def __init__(self, d_model: int, coord_dim: int = 1, max_len: int = 1024):
        super().__init__()
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        self.max_len = check_int("max_len", max_len, 1)
        self.tables = nn.Parameter(torch.randn(coord_dim, max_len, d_model, dtype=master_dtype()) * 0.02)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x plus, per axis, the learned row of each token's coordinate, summed in float32 (float64), rounded once.

        Args:
            x (B, N, D): token embeddings (or (N, D)), float16 / bfloat16 / float32 / float64.
            positions (N, C): integer coordinates in [0, max_len) (or (B, N, C); integral floats are accepted).

        Returns:
            out (B, N, D): x + sum_c tables[c, positions[..., c]], in x's dtype.
        """
        check_input_dtype("x", x)
        check_positions(positions, self.coord_dim, x.shape[-2], batch=x.shape[0] if x.ndim == 3 else None)
        idx = positions.round().long() if positions.is_floating_point() else positions.long()
        if reads_values(positions) and _bad_indices(idx, positions, self.max_len):  # the CPU's check (a host read)
            fail(
                "positions",
                "non-integer or out-of-range coordinates",
                f"integers in [0, {self.max_len}) for a learned table",
            )
        out = x.to(compute_dtype(x.dtype, self.tables.dtype))  # the sum in float32 (float64), rounded once
        for c in range(self.coord_dim):
            out = out + self.tables[c][idx[..., c]]
        return out.to(x.dtype)
