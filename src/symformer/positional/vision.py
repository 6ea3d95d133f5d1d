"""Converters from timm's and rope-vit's rotary embeddings to RoPE parts with the same rotation.

Both use interleaved pairs (2u, 2u + 1) (timm's apply_rot_embed_cat with half=False, rope-vit's complex view).
* Axial (timm RotaryEmbeddingCat, rope-vit compute_axial_cis): the first Dh/4 pairs rotate with one axis, the
  rest with the other, at temperature^(-j / (Dh/4)) (timm in_pixels=False; rope-vit theta 100), or at
  pixel_freq_bands on a [-1, 1] grid (timm in_pixels=True). Their tables are computed, not stored (timm's `bands`
  is a non-persistent buffer): `timm_axial` / `rope_vit_axial` take the configuration.
* Mixed (timm RotaryEmbeddingMixed `freqs` (2, depth, H, Dh/2); rope-vit `freqs` (2, depth, H * Dh/2)): angle
  t_x fx + t_y fy per layer, head and pair (rope-vit and timm's grid_indexing "xy": t_x the column; timm "ij":
  t_x the row): one RoPE(mode="mixed", n_heads=H) per layer, beta[h, u] = (row frequency, column frequency) for
  our (row, col) positions (`position_order` "yx"), swapped for (col, row) ones ("xy").
Never unpickles: a state dict, or a safetensors file path.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from symformer._validation import check_choice, check_float, check_int, fail
from symformer.positional.base import LOW_PRECISION
from symformer.positional.rope import RoPE

POSITION_ORDERS = ("yx", "xy")
TIMM_ROPE_KEYS = ("freqs", "bands", "t_x", "t_y", "pos_embed")  # RotaryEmbeddingMixed / RotaryEmbeddingCat


def load_state_dict(state_dict) -> dict[str, torch.Tensor]:
    """A state dict as given, or read from a .safetensors path (safetensors: no pickle)."""
    if isinstance(state_dict, (str, Path)):
        if not str(state_dict).endswith(".safetensors"):
            fail("state_dict", str(state_dict), "a state dict, or the path of a .safetensors file (no pickle)")
        from safetensors.torch import load_file  # optional dependency (installed with transformers)

        return load_file(str(state_dict))
    if not isinstance(state_dict, dict):
        fail("state_dict", type(state_dict).__name__, "a dict of tensors or a .safetensors path", TypeError)
    return state_dict


def _frequency_tensor(t: torch.Tensor) -> torch.Tensor:
    """The state dict's frequencies at no lower precision than float32 (16-bit ones become float32 masters)."""
    return t.float() if t.dtype in LOW_PRECISION else t


def _mixed_part(f_row: torch.Tensor, f_col: torch.Tensor, position_order: str) -> RoPE:
    """RoPE(mode="mixed", n_heads=H, interleaved pairs) whose beta (H, m, 2) is (f_row, f_col) for (row, col)
    positions or (f_col, f_row) for (col, row) ones: f_row, f_col (H, m) the frequencies of the row / column."""
    h, m = f_row.shape
    part = RoPE(2 * m, 2, pairing="interleaved", mode="mixed", n_heads=h)
    beta = torch.stack((f_row, f_col) if position_order == "yx" else (f_col, f_row), dim=-1)
    part.beta = nn.Parameter(_frequency_tensor(beta.detach().clone()))
    return part


def _check_freqs(freqs, key: str, ndim: int, what: str) -> torch.Tensor:
    if not isinstance(freqs, torch.Tensor) or freqs.ndim != ndim or freqs.shape[0] != 2:
        got = f"shape {tuple(freqs.shape)}" if isinstance(freqs, torch.Tensor) else type(freqs).__name__
        fail("state_dict", f"{key!r} of {got}", what)
    if not freqs.is_floating_point():
        fail("state_dict", f"{key!r} of dtype {freqs.dtype}", "floating frequencies")
    return freqs


def from_timm_state_dict(
    state_dict, prefix: str = "rope.", grid_indexing: str = "ij", position_order: str = "yx"
) -> list[RoPE]:
    """RoPE parts, one per layer, for timm's RotaryEmbeddingMixed frequencies `{prefix}freqs` (2, depth, H, Dh/2).

    Args:
        state_dict (dict | str | Path): a timm model's (or its rope module's, with prefix "") state dict, or a
            .safetensors path.
        prefix (str): where the rope module sits ("rope." in timm's Eva).
        grid_indexing (str): the module's grid_indexing: "ij" (Eva's rope_grid_indexing default: t_x is the row)
            or "xy" (RotaryEmbeddingMixed's own default: t_x is the column).
        position_order (str): the order of the positions our parts will take: "yx" ((row, col), `grid_positions`'
            default) or "xy" ((col, row), timm's t_x, t_y).

    Returns:
        parts (list[RoPE]): layer l's RoPE(mode="mixed", n_heads=H, pairing="interleaved").

    Raises:
        ValueError: no `{prefix}freqs`, another shape, or names under `prefix` timm's rope modules do not have.

    Examples:
        >>> import torch
        >>> from symformer.positional.vision import from_timm_state_dict
        >>> parts = from_timm_state_dict({"rope.freqs": torch.randn(2, 3, 4, 8)})  # depth 3, 4 heads, Dh 16
        >>> len(parts), parts[0].beta.shape
        (3, torch.Size([4, 8, 2]))
    """
    sd = load_state_dict(state_dict)
    check_choice("position_order", position_order, POSITION_ORDERS)
    check_choice("grid_indexing", grid_indexing, ("ij", "xy"))
    unknown = sorted(k for k in sd if k.startswith(prefix) and k[len(prefix) :] not in TIMM_ROPE_KEYS)
    if unknown:
        fail("state_dict", f"names {unknown}", f"names {[prefix + k for k in TIMM_ROPE_KEYS]} under {prefix!r}")
    key = prefix + "freqs"
    if key not in sd:
        fail("state_dict", f"no {key!r}", f"{key!r} (RotaryEmbeddingMixed; for RotaryEmbeddingCat use timm_axial)")
    freqs = _check_freqs(sd[key], key, 4, "shape (2, depth, num_heads, head_dim / 2)")
    fx, fy = freqs[0], freqs[1]  # (depth, H, m) each: the frequencies of t_x and of t_y
    f_row, f_col = (fx, fy) if grid_indexing == "ij" else (fy, fx)
    return [_mixed_part(f_row[layer], f_col[layer], position_order) for layer in range(freqs.shape[1])]


def from_rope_vit(state_dict, n_heads: int, key: str = "freqs", position_order: str = "yx") -> list[RoPE]:
    """RoPE parts, one per layer, for rope-vit's RoPE-Mixed frequencies `freqs` (2, depth, H * Dh/2).

    Args:
        state_dict (dict | str | Path): a rope_vit_models state dict (its 'model' entry), or a .safetensors path.
        n_heads (int): H (rope-vit stores the heads flattened).
        key (str): the frequencies' name.
        position_order (str): "yx" ((row, col)) or "xy" ((t_x, t_y)), the positions our parts will take.

    Returns:
        parts (list[RoPE]): layer l's RoPE(mode="mixed", n_heads=H, pairing="interleaved").

    Examples:
        >>> import torch
        >>> from symformer.positional.vision import from_rope_vit
        >>> parts = from_rope_vit({"freqs": torch.randn(2, 12, 6 * 32)}, n_heads=6)
        >>> len(parts), parts[0].head_dim, parts[0].beta.shape
        (12, 64, torch.Size([6, 32, 2]))
    """
    sd = load_state_dict(state_dict)
    check_int("n_heads", n_heads, 1)
    check_choice("position_order", position_order, POSITION_ORDERS)
    if key not in sd:
        fail("state_dict", f"no {key!r}", f"{key!r} (rope_mixed models; axial ones store none: use rope_vit_axial)")
    freqs = _check_freqs(sd[key], key, 3, "shape (2, depth, num_heads * head_dim / 2)")
    if freqs.shape[-1] % n_heads:
        fail("n_heads", n_heads, f"a divisor of the frequencies' last dimension {freqs.shape[-1]}")
    f = freqs.unflatten(-1, (n_heads, -1))  # (2, depth, H * m) -> (2, depth, H, m)
    return [_mixed_part(f[1, layer], f[0, layer], position_order) for layer in range(f.shape[1])]  # t_x: columns


def _axial_part(head_dim: int, bands: torch.Tensor, x_first: bool, position_order: str) -> RoPE:
    """Blocks layout: pairs [0, Dh/4) rotate with the first grid axis of the source, the rest with the second."""
    first = 1 if (position_order == "yx") == x_first else 0  # our coordinate that the first block reads
    part = RoPE(head_dim, 2, pairing="interleaved", mode="axial", axis_layout="blocks", axis_order=(first, 1 - first))
    with torch.no_grad():
        beta = torch.zeros(head_dim // 2, 2, dtype=torch.float64)
        beta[: head_dim // 4, first] = bands
        beta[head_dim // 4 :, 1 - first] = bands
        part.beta.copy_(beta.to(part.beta.dtype))
    return part


def timm_axial(
    head_dim: int,
    temperature: float = 10000.0,
    in_pixels: bool = True,
    max_res: int = 224,
    linear_bands: bool = False,
    grid_indexing: str = "ij",
    position_order: str = "yx",
) -> RoPE:
    """The RoPE of timm's RotaryEmbeddingCat (its frequencies are computed from the configuration, not stored).

    Args:
        head_dim (int): Dh, a multiple of 4.
        temperature (float): in_pixels=False: bands temperature^(-j / (Dh/4)).
        in_pixels (bool): True: timm's pixel_freq_bands (linspace(1, max_res/2) or log-spaced, times pi) on a
            grid_positions(kind="pixel") grid; False: temperature bands on an integer grid.
        max_res (int): in_pixels: the highest frequency's resolution.
        linear_bands (bool): in_pixels: linearly spaced bands.
        grid_indexing (str): timm's "ij" (the first block reads rows) or "xy" (columns).
        position_order (str): "yx" or "xy", the positions our part will take.

    Returns:
        part (RoPE): interleaved pairs, axis_layout "blocks".

    Examples:
        >>> from symformer.positional.vision import timm_axial
        >>> timm_axial(16, in_pixels=False).beta[:, 0].tolist()  # rows: the first Dh/4 pairs
        [1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513, 0.0, 0.0, 0.0, 0.0]
    """
    check_int("head_dim", head_dim, 4)
    if head_dim % 4:
        fail("head_dim", head_dim, "a multiple of 4 (Dh/4 bands per axis)")
    check_choice("grid_indexing", grid_indexing, ("ij", "xy"))
    check_choice("position_order", position_order, POSITION_ORDERS)
    n = head_dim // 4
    if in_pixels:
        top = check_float("max_res", max_res, 0.0, low_open=True) / 2
        if linear_bands:
            bands = torch.linspace(1.0, top, n, dtype=torch.float64)
        else:
            bands = 2 ** torch.linspace(0, math.log(max_res, 2) - 1, n, dtype=torch.float64)
        bands = bands * math.pi
    else:
        bands = check_float("temperature", temperature, 1.0, low_open=True) ** (
            -torch.arange(n, dtype=torch.float64) / n
        )
    return _axial_part(head_dim, bands, grid_indexing == "xy", position_order)


def rope_vit_axial(head_dim: int, theta: float = 100.0, position_order: str = "yx") -> RoPE:
    """The RoPE of rope-vit's compute_axial_cis (RoPE-Axial, theta 100): x (columns) on the first Dh/4 pairs.

    Args:
        head_dim (int): Dh, a multiple of 4.
        theta (float): the frequencies' base.
        position_order (str): "yx" ((row, col)) or "xy" ((t_x, t_y)), the positions our part will take.

    Returns:
        part (RoPE): interleaved pairs, axis_layout "blocks".

    Examples:
        >>> from symformer.positional.vision import rope_vit_axial
        >>> rope_vit_axial(8).beta.tolist()  # (row, col) positions: the first two pairs read the column
        [[0.0, 1.0], [0.0, 0.10000000149011612], [1.0, 0.0], [0.10000000149011612, 0.0]]
    """
    check_int("head_dim", head_dim, 4)
    if head_dim % 4:
        fail("head_dim", head_dim, "a multiple of 4 (Dh/4 frequencies per axis)")
    check_choice("position_order", position_order, POSITION_ORDERS)
    n = head_dim // 4
    bands = check_float("theta", theta, 1.0, low_open=True) ** (-torch.arange(n, dtype=torch.float64) / n)
    return _axial_part(head_dim, bands, True, position_order)
