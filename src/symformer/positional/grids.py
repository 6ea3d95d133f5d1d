"""Patch-grid positions for images, (N, 2) in row-major patch order: what a rotary part takes as `positions`.

Three normalisations: "integer" (row, col) indices (rope-vit's init_t_xy, timm's in_pixels=False grid),
"pixel" (each axis in [-1, 1], timm's in_pixels=True grid) and "centred" (indices minus the grid's centre). A
change of image size at inference either keeps the new grid's own positions (relative offsets stay in patch
units: RoPE extrapolates) or rescales them to the training range (`ref_size`: timm / EVA's ref_feat_shape scheme,
t * ref / size: the positions interpolate).
"""

from __future__ import annotations

import torch

from symformer._validation import check_choice, check_int, fail

GRID_KINDS = ("integer", "pixel", "centred")
ORDERS = ("yx", "xy")


def _size(name: str, size) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        fail(name, size, "an int or a (height, width) pair of ints")
    return check_int(f"{name}[0]", size[0], 1), check_int(f"{name}[1]", size[1], 1)


def grid_positions(
    size,
    kind: str = "integer",
    order: str = "yx",
    ref_size=None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Positions of an (H, W) patch grid, (H*W, 2), row-major (patch i*W + j is row i, column j).

    Args:
        size (int | tuple[int, int]): the grid (H, W) in patches (an int: square).
        kind (str): "integer" (0..H-1, 0..W-1), "pixel" (each axis linspace(-1, 1)) or "centred" (indices minus
            (H-1)/2, (W-1)/2).
        order (str): "yx" ((row, col), the default of every helper here) or "xy" ((col, row), rope-vit's (t_x, t_y)).
        ref_size (int | tuple | None): the training grid: "integer" / "centred" positions are rescaled by
            ref / size per axis (timm's ref_feat_shape), so a larger image spans the training range; None: the
            grid's own positions. "pixel" grids span [-1, 1] at every size already.
        dtype (torch.dtype): float dtype of the result.
        device: its device.

    Returns:
        positions (H*W, 2).

    Examples:
        >>> from symformer.positional.grids import grid_positions
        >>> grid_positions((2, 3)).tolist()
        [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0], [1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]
        >>> grid_positions(2, "pixel", order="xy").tolist()
        [[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]]
        >>> grid_positions(4, ref_size=2)[:, 1].tolist()[:4]  # a 4-wide grid rescaled to a 2-wide training range
        [0.0, 0.5, 1.0, 1.5]
    """
    h, w = _size("size", size)
    check_choice("kind", kind, GRID_KINDS)
    check_choice("order", order, ORDERS)
    axes = []
    for i, s in enumerate((h, w)):
        if kind == "pixel":
            t = torch.linspace(-1.0, 1.0, s, dtype=torch.float64)
        else:
            t = torch.arange(s, dtype=torch.float64) - ((s - 1) / 2 if kind == "centred" else 0.0)
            if ref_size is not None:
                t = t * (_size("ref_size", ref_size)[i] / s)
        axes.append(t)
    rows, cols = torch.meshgrid(axes[0], axes[1], indexing="ij")
    pos = (rows, cols) if order == "yx" else (cols, rows)
    return torch.stack([p.reshape(-1) for p in pos], dim=-1).to(dtype=dtype, device=device)


def with_prefix(positions: torch.Tensor, n_prefix: int) -> torch.Tensor:
    """Positions for n_prefix class / register tokens followed by the patches: the prefix tokens get position 0
    (a rotation by angle 0 is the identity, so no rotary part moves them), (n_prefix + N, C) or batched.

    Args:
        positions (N, C): the patches' positions, or (B, N, C).
        n_prefix (int): class / register tokens in front (>= 0).

    Returns:
        positions (n_prefix + N, C), or (B, n_prefix + N, C).

    Examples:
        >>> import torch
        >>> from symformer.positional.grids import with_prefix
        >>> with_prefix(torch.ones(2, 2), 1).tolist()
        [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    """
    check_int("n_prefix", n_prefix, 0)
    if positions.ndim not in (2, 3):
        fail("positions", f"shape {tuple(positions.shape)}", "(N, C) or (B, N, C)")
    zeros = positions.new_zeros(*positions.shape[:-2], n_prefix, positions.shape[-1])
    return torch.cat((zeros, positions), dim=-2)
