"""MNIST-1D, generated offline by the mnist1d package (no download)."""

from __future__ import annotations

import torch

from symformer._rng import resolve_seed, seeded_generator
from symformer._validation import check_int
from symformer.data.base import Split, TensorData


def load_mnist1d(patch: int = 4, seed: int | None = 0, num_samples: int = 5000) -> Split:
    """40-step signals cut into patches of `patch` steps -> tokens with 1-D positions.

    The package's own train/test split is kept (80/20); 20% of its train part becomes validation."""
    check_int("patch", patch, 1, 40)
    seed = resolve_seed(seed)  # one integer for the signals and the validation split
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = 42 + seed
    d = make_dataset(args)
    xtr = torch.tensor(d["x"], dtype=torch.float32)
    ytr = torch.tensor(d["y"], dtype=torch.long)
    xte = torch.tensor(d["x_test"], dtype=torch.float32)
    yte = torch.tensor(d["y_test"], dtype=torch.long)
    n_steps = (xtr.shape[1] // patch) * patch

    def tok(x: torch.Tensor) -> torch.Tensor:
        return x[:, :n_steps].reshape(x.shape[0], n_steps // patch, patch)

    perm = torch.randperm(len(ytr), generator=seeded_generator(seed))
    n_va = len(ytr) // 5
    va, tr = perm[:n_va], perm[n_va:]
    pos = torch.arange(n_steps // patch, dtype=torch.float32)[:, None]
    train = TensorData(tok(xtr)[tr], ytr[tr], pos)
    val = TensorData(tok(xtr)[va], ytr[va], pos)
    test = TensorData(tok(xte), yte, pos)
    return Split(train, val, test, {"n_classes": 10, "token_dim": patch, "coord_dim": 1, "n_tokens": n_steps // patch})
