"""Character-level text (tiny Shakespeare): contiguous 90/5/5 split, fixed-length windows."""

from __future__ import annotations

import torch

from symformer._validation import check_choice, check_int
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


def document_starts(ids: torch.Tensor, newline: int | None) -> torch.Tensor:
    """(N,) boolean: True at each document's first character; a document is a paragraph, the text after a blank line
    (two newlines), so the documents concatenated are the text."""
    starts = torch.zeros(len(ids), dtype=torch.bool)
    starts[0] = True
    if newline is not None and len(ids) > 2:
        starts[2:] = (ids[:-2] == newline) & (ids[1:-1] == newline)
    return starts


def packed_rows(ids: torch.Tensor, starts: torch.Tensor, block: int) -> TensorData:
    """Rows of `block` characters cut from the text, each with its documents' ids (`segments`: positions and
    attention restart at each paragraph); a target in another document than its input (a paragraph's last
    character) is -100, ignored, so no row learns across documents. A paragraph cut by a row end continues as a
    new document in the next row."""
    n = (len(ids) - 1) // block
    doc = starts.long().cumsum(0)
    x, y = ids[: n * block].view(n, block), ids[1 : n * block + 1].view(n, block).clone()
    seg = doc[: n * block].view(n, block)
    y[doc[1 : n * block + 1].view(n, block) != seg] = -100
    return TensorData(x, y, torch.arange(block, dtype=torch.float32)[:, None], seg)


def padded_rows(ids: torch.Tensor, starts: torch.Tensor, block: int) -> TensorData:
    """One document per row (a paragraph longer than `block` fills several), padded on the right with targets -100:
    the same documents and targets as packed_rows, at the cost of the padding (causal attention: a real token never
    sees the padding after it)."""
    bounds = torch.nonzero(starts).flatten().tolist() + [len(ids)]
    xs, ys = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):
        for s in range(a, b, block):
            x = ids[s : min(s + block, b)]
            y = ids[s + 1 : min(s + block + 1, b)]  # the paragraph's last character predicts nothing
            xs.append(torch.cat([x, x.new_zeros(block - len(x))]))
            ys.append(torch.cat([y, y.new_full((block - len(y),), -100)]))
    return TensorData(torch.stack(xs), torch.stack(ys), torch.arange(block, dtype=torch.float32)[:, None])


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
    layout: str = "windows",
) -> Split:
    """Contiguous train/val/test thirds of 90/5/5 so no window crosses a split boundary. layout: how the training
    part is cut, "windows" (every `stride` characters), "packed" (paragraphs packed in rows, packed_rows) or
    "padded" (one paragraph per padded row, padded_rows); validation and test are windows in every layout."""
    check_int("block", block, 2)
    check_choice("layout", layout, ("windows", "packed", "padded"))
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
    if layout != "windows":
        starts = document_starts(ids[:a], vocab.index("\n") if "\n" in vocab else None)
        parts[0] = (packed_rows if layout == "packed" else padded_rows)(ids[:a], starts, block)
    return Split(
        *parts, {"vocab_size": len(vocab), "vocab": vocab, "coord_dim": 1, "n_tokens": block, "boundaries": (a, b, n)}
    )
