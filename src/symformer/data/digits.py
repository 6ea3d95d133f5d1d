"""scikit-learn digits as patch tokens with 2-D coordinates."""

from __future__ import annotations

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_int, fail
from symformer.data.base import Split, TensorData


def patchify(images: torch.Tensor, patch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images to patch tokens and their (row, col) grid positions.

    Args:
        images (B, H, W): single-channel images, or (B, C, H, W) C-channel ones; a remainder past a whole patch is
            cropped.
        patch (int): the patch side p.

    Returns:
        tokens (B, N, C p p): row-major patches, each flattened channel-major (c, py, px) as a Conv2d's weight
            (D, C, p, p) reads them (p p for (B, H, W) images).
        positions (N, 2): (row, col) of each patch, float in the images' dtype.

    Examples:
        >>> import torch
        >>> from symformer.data.digits import patchify
        >>> tokens, pos = patchify(torch.randn(2, 3, 32, 32), 4)
        >>> tokens.shape, pos.shape
        (torch.Size([2, 64, 48]), torch.Size([64, 2]))
    """
    check_int("patch", patch, 1)
    if images.ndim not in (3, 4):
        fail("images", f"shape {tuple(images.shape)}", "(B, H, W) or (B, C, H, W)")
    x = images if images.ndim == 4 else images.unsqueeze(1)
    b, c, h, w = x.shape
    gh, gw = h // patch, w // patch
    if gh < 1 or gw < 1:
        fail("patch", patch, f"at most the image size {(h, w)}")
    # (B, C, gh p, gw p) -> (B, gh, gw, C, p, p)
    t = x[:, :, : gh * patch, : gw * patch].reshape(b, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5)
    tokens = t.reshape(b, gh * gw, c * patch * patch)
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    pos = torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1).to(images.dtype)
    return tokens, pos


def upsample(images: torch.Tensor, size: int) -> torch.Tensor:
    """(B, H, W) images resized to (B, size, size) by bilinear interpolation (digits' 8 x 8 to 16 x 16, ...)."""
    check_int("size", size, 1)
    out = torch.nn.functional.interpolate(images.unsqueeze(1), size=(size, size), mode="bilinear", align_corners=False)
    return out.squeeze(1)


def pad_tokens(
    tokens: list[torch.Tensor], positions: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A padded batch of images of several sizes: the token lists (N_i, D) and their positions (N_i, C) padded to
    N = max N_i with zeros, and the boolean mask (B, N), True on real tokens.

    Args:
        tokens (list[Tensor]): (N_i, D) per image.
        positions (list[Tensor]): (N_i, C) per image.

    Returns:
        tokens (B, N, D), positions (B, N, C), mask (B, N).

    Examples:
        >>> import torch
        >>> from symformer.data.digits import pad_tokens
        >>> t, p, m = pad_tokens([torch.ones(4, 3), torch.ones(2, 3)], [torch.zeros(4, 2), torch.zeros(2, 2)])
        >>> t.shape, m.sum(-1).tolist()
        (torch.Size([2, 4, 3]), [4, 2])
    """
    if not tokens or len(tokens) != len(positions):
        fail("positions", f"{len(positions)} position tensors", f"one per token tensor ({len(tokens)}), at least one")
    for i, (t, p) in enumerate(zip(tokens, positions)):
        if t.ndim != 2 or p.ndim != 2 or t.shape[0] != p.shape[0]:
            fail(f"positions[{i}]", f"shape {tuple(p.shape)}", f"(N_i, C) with N_i = {t.shape[0]} tokens (N_i, D)")
    n = max(t.shape[0] for t in tokens)
    tok = torch.stack([torch.nn.functional.pad(t, (0, 0, 0, n - t.shape[0])) for t in tokens])
    pos = torch.stack([torch.nn.functional.pad(p, (0, 0, 0, n - p.shape[0])) for p in positions])
    mask = torch.arange(n)[None, :] < torch.tensor([t.shape[0] for t in tokens])[:, None]
    return tok, pos, mask


def load_digits_images(seed: int | None = 0) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Images scaled to [0, 1], labels, and a fixed 60/20/20 split of indices."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=seeded_generator(seed))
    n_tr, n_va = int(0.6 * len(y)), int(0.2 * len(y))
    idx = {"train": perm[:n_tr], "val": perm[n_tr : n_tr + n_va], "test": perm[n_tr + n_va :]}
    return x, y, idx


def load_digits_patches(patch: int = 2, seed: int | None = 0) -> Split:
    """Digits as (B, 64/patch^2, patch^2) tokens with (row, col) positions; split 60/20/20."""
    check_int("patch", patch, 1, 8)
    x, y, idx = load_digits_images(seed)
    tokens, pos = patchify(x, patch)
    parts = {k: TensorData(tokens[v], y[v], pos) for k, v in idx.items()}
    return Split(
        parts["train"],
        parts["val"],
        parts["test"],
        {"n_classes": 10, "token_dim": patch * patch, "coord_dim": 2, "n_tokens": tokens.shape[1]},
    )
