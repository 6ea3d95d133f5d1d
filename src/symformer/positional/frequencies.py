"""Initial rotary frequencies beta (Dh/2, C), or (H, Dh/2, C) per head: the angle of pair u at position r is
theta_u(r) = beta_u . r (ESPR T2.4-T2.7 with U = I).

* axial: pair u rotates with one axis only, at a log-spaced frequency. Two axis layouts: "interleaved" (pair u
  takes axis u mod C) and "blocks" (the first Dh/(2C) pairs take the first axis, the next ones the second, ...:
  timm's RotaryEmbeddingCat and rope-vit's compute_axial_cis for C = 2). `axis_order` names the axis each
  residue / block takes (x / y order).
* mixed (RoPE-Mixed, Heo et al. 2024, as naver-ai/rope-vit's init_random_2d_freqs defines it): per head, the
  magnitudes temperature^(-j / (Dh/4)), j < Dh/4, each used along two orthogonal directions (cos a, sin a) and
  (cos(a + pi/2), sin(a + pi/2)), one uniform random angle a per head: the first Dh/4 pairs take the first
  direction, the rest the second. For C != 2 the same blocks take the columns of a Haar-random orthogonal C x C
  matrix per head (C = 2 with the angle form is rope-vit's own).
* mixed_random: the earlier init, log-spaced magnitudes base^(-u / (Dh/2)) along independent random directions.
"""

from __future__ import annotations

import math

import torch

from symformer._rng import check_seed
from symformer._rng import generator as purpose_generator
from symformer._validation import check_choice, check_int, fail

AXIS_LAYOUTS = ("interleaved", "blocks")
MODES = ("axial", "mixed", "mixed_random")
#: the frequency base each mode starts from when none is given: rope-vit's temperature 10 for RoPE-Mixed
#: (rope_mixed_* models: rope_theta=10.0), 10^4 (RoFormer's) for the others
DEFAULT_BASE = {"axial": 10000.0, "mixed": 10.0, "mixed_random": 10000.0}


def check_axis_order(axis_order, coord_dim: int) -> tuple[int, ...]:
    """axis_order as a tuple: a permutation of range(coord_dim) (None: the identity)."""
    if axis_order is None:
        return tuple(range(coord_dim))
    order = tuple(axis_order) if isinstance(axis_order, (tuple, list)) else None
    if order is None or sorted(order) != list(range(coord_dim)) or not all(isinstance(a, int) for a in order):
        fail("axis_order", axis_order, f"a permutation of {tuple(range(coord_dim))} (the axis each block takes)")
    return order


def axial_frequencies(
    head_dim: int, coord_dim: int, base: float, axis_layout: str = "interleaved", axis_order=None
) -> torch.Tensor:
    """Axial beta (Dh/2, C) in float64: one axis per pair at a log-spaced frequency base^(-j / n), n = ceil(Dh/(2C)).

    Args:
        head_dim (int): Dh, even.
        coord_dim (int): C.
        base (float): the frequency base (timm's temperature; rope-vit's axial theta is 100).
        axis_layout (str): "interleaved" (pair u takes residue u mod C) or "blocks" (pair u takes block u // n).
        axis_order (tuple | None): the axis residue / block k rotates with (None: axis k).

    Returns:
        beta (Dh/2, C): float64, one nonzero entry per row.

    Examples:
        >>> from symformer.positional.frequencies import axial_frequencies
        >>> axial_frequencies(8, 2, 100.0, "blocks", axis_order=(1, 0)).tolist()
        [[0.0, 1.0], [0.0, 0.1], [1.0, 0.0], [0.1, 0.0]]
    """
    check_choice("axis_layout", axis_layout, AXIS_LAYOUTS)
    order = check_axis_order(axis_order, coord_dim)
    m = head_dim // 2
    per_axis = -(-m // coord_dim)
    beta = torch.zeros(m, coord_dim, dtype=torch.float64)
    for u in range(m):
        k, j = (u % coord_dim, u // coord_dim) if axis_layout == "interleaved" else (u // per_axis, u % per_axis)
        beta[u, order[k]] = base ** (-j / per_axis)
    return beta


def random_mixed_frequencies(head_dim: int, coord_dim: int, base: float, seed: int | None) -> torch.Tensor:
    """mode "mixed_random": log-spaced magnitudes along independent random directions (Dh/2, C), float64, drawn
    from `_rng.generator("rope.mixed", seed)` (None: torch's global generator)."""
    m = head_dim // 2
    g = None if check_seed(seed) is None else purpose_generator("rope.mixed", seed)
    mags = base ** (-torch.arange(m, dtype=torch.float64) / m)
    dirs = torch.randn(m, coord_dim, generator=g, dtype=torch.float64)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    return mags[:, None] * dirs


def rope_vit_directions(angles: torch.Tensor) -> torch.Tensor:
    """(H, 2, 2) orthonormal directions per head from rope-vit's angle a: columns (cos a, sin a) and
    (cos(a + pi/2), sin(a + pi/2))."""
    cols = [torch.stack((torch.cos(a), torch.sin(a)), -1) for a in (angles, angles + math.pi / 2)]
    return torch.stack(cols, -1)  # (H, 2 coords, 2 directions)


def rope_vit_frequencies(
    head_dim: int,
    coord_dim: int = 2,
    n_heads: int | None = None,
    temperature: float = 10.0,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies as rope-vit draws them: beta (H, Dh/2, C) (n_heads None: (Dh/2, C), one head).

    Pair u of block k = u // n (n = ceil(Dh / (2C)); Dh/4 pairs per block for C = 2) has magnitude
    temperature^(-(u mod n) / n) along direction k of its head: for C = 2 the directions (cos a, sin a) and
    (cos(a + pi/2), sin(a + pi/2)) with one angle a ~ U(0, 2 pi) per head; for C != 2 the columns of a Haar-random
    orthogonal matrix per head.

    Args:
        head_dim (int): Dh, even.
        coord_dim (int): C.
        n_heads (int | None): H, one random angle each (None: a single head, beta (Dh/2, C)).
        temperature (float): the magnitudes' base (rope-vit: 10).
        seed (int | None): draws from `_rng.generator("rope.mixed", seed)` (None: torch's global generator).
        generator (torch.Generator | None): draw from this generator instead (seed then unused).

    Returns:
        beta (H, Dh/2, C) or (Dh/2, C): float64.

    Examples:
        >>> import torch
        >>> from symformer.positional.frequencies import rope_vit_frequencies
        >>> beta = rope_vit_frequencies(8, 2, n_heads=3, seed=0)
        >>> beta.shape, torch.allclose(beta.norm(dim=-1)[0], torch.tensor([1.0, 10**-0.5, 1.0, 10**-0.5]).double())
        (torch.Size([3, 4, 2]), True)
        >>> float((beta[:, 0] * beta[:, 2]).sum(-1).abs().max()) < 1e-15  # block directions are orthogonal
        True
    """
    h = 1 if n_heads is None else check_int("n_heads", n_heads, 1)
    m = head_dim // 2
    n = -(-m // coord_dim)
    g = generator or (None if check_seed(seed) is None else purpose_generator("rope.mixed", seed))
    if coord_dim == 2:
        dirs = rope_vit_directions(torch.rand(h, generator=g, dtype=torch.float64) * (2 * math.pi))
    else:
        qm, r = torch.linalg.qr(torch.randn(h, coord_dim, coord_dim, generator=g, dtype=torch.float64))
        dirs = qm * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar: fix the QR's signs
    u = torch.arange(m)
    mags = temperature ** (-(u % n).to(torch.float64) / n)  # (m,)
    beta = mags[None, :, None] * dirs[:, :, u // n].transpose(-1, -2)  # (H, C, m) picked per pair -> (H, m, C)
    return beta[0] if n_heads is None else beta
