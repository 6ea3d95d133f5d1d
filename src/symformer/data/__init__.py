"""Data loaders. Files are read from `--data-dir` / `SYMFORMER_DATA`; nothing is downloaded."""

from __future__ import annotations

from symformer.data.base import Split, TensorData, batches  # noqa: F401
from symformer.data.digits import load_digits_patches  # noqa: F401
from symformer.data.ett import load_ett  # noqa: F401
from symformer.data.mnist1d import load_mnist1d  # noqa: F401
from symformer.data.paths import ENV_VAR, MissingDataError, data_dir, data_file  # noqa: F401
from symformer.data.text import load_char_text  # noqa: F401

DATASETS = {
    "digits": ("scikit-learn load_digits: 1,797 8x8 images -> patch tokens with 2-D positions", None),
    "mnist1d": ("MNIST-1D built offline by mnist1d.data.make_dataset -> 1-D sequences", None),
    "shakespeare": ("tiny Shakespeare, character level", "tinyshakespeare.txt"),
    "etth1": ("ETTh1 hourly, Informer protocol 12/4/4 months", "ETTh1.csv"),
}
