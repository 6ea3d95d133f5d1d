"""Character-level text (tiny Shakespeare): contiguous 90/5/5 split, fixed-length windows."""

from __future__ import annotations

import torch

from symformer._validation import check_int
from symformer.data.base import Split, TensorData
from symformer.data.files import need_rows, read_text
from symformer.data.paths import data_file


def encode_text(text: str) -> tuple[torch.Tensor, list[str]]:
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([stoi[c] for c in text], dtype=torch.long), vocab


def windows(ids: torch.Tensor, block: int, stride: int) -> TensorData:
    n = (len(ids) - 1 - block) // stride + 1
    starts = torch.arange(n) * stride
    offs = torch.arange(block + 1)
    w = ids[starts[:, None] + offs[None, :]]
    return TensorData(w[:, :-1], w[:, 1:], torch.arange(block, dtype=torch.float32)[:, None])


def _split_sizes(n: int) -> tuple[int, int, int]:
    a, b = int(0.9 * n), int(0.95 * n)
    return a, b - a, n - b


def min_chars(block: int) -> int:
    """Fewest characters whose 90/5/5 split holds one window of block + 1 characters in every part."""
    n = 20 * (block + 1)
    while min(_split_sizes(n)) < block + 1:
        n += 1
    return n


def load_char_text(
    block: int = 64,
    data_dir=None,
    filename: str = "tinyshakespeare.txt",
    max_chars: int | None = None,
    stride: int | None = None,
) -> Split:
    """Contiguous train/val/test thirds of 90/5/5 so no window crosses a split boundary."""
    check_int("block", block, 2)
    path = data_file(filename, data_dir)
    text = read_text(path, "a text corpus")  # empty or not UTF-8: one line naming the byte offset
    need = min_chars(block)
    if max_chars is not None:
        check_int("max_chars", max_chars, need)
    need_rows(
        path,
        len(text),
        need,
        f"block={block} needs a window of {block + 1} characters in each of the 90/5/5 train/val/test parts",
        unit="characters",
    )
    ids, vocab = encode_text(text)
    if max_chars is not None:
        ids = ids[:max_chars]
    n = len(ids)
    a, b = int(0.9 * n), int(0.95 * n)
    stride = stride or block
    parts = [windows(ids[:a], block, stride), windows(ids[a:b], block, block), windows(ids[b:], block, block)]
    return Split(
        *parts, {"vocab_size": len(vocab), "vocab": vocab, "coord_dim": 1, "n_tokens": block, "boundaries": (a, b, n)}
    )
