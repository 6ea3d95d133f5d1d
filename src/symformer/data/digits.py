"""scikit-learn digits as patch tokens with 2-D coordinates."""

from __future__ import annotations

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_int
from symformer.data.base import Split, TensorData


def patchify(images: torch.Tensor, patch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H, W) -> tokens (B, N, patch*patch) and positions (N, 2) = (row, col) of each patch."""
    b, h, w = images.shape
    gh, gw = h // patch, w // patch
    t = images[:, : gh * patch, : gw * patch].reshape(b, gh, patch, gw, patch).permute(0, 1, 3, 2, 4)
    tokens = t.reshape(b, gh * gw, patch * patch)
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    pos = torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1).to(images.dtype)
    return tokens, pos


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
