"""Document boundaries of packed sequences (issue 61): several documents concatenated in one row, each attending to
itself only, as flash-attention's varlen `cu_seqlens` and transformers' `DataCollatorWithFlattening` pack them.

Two ways to give them, as the cores and models take them:
- `cu_seqlens`: int32/int64 cumulative lengths, flash-attention's convention: (D + 1,) over the B * N tokens of the
  flattened rows (batch 1: one packed row), or (B, D + 1) per row; 0 first, strictly increasing, the total last.
- `segment_ids`: (B, N) integers (or (N,) for every row), one per token, non-decreasing along a row; a document
  starts wherever the id changes.

Both become one canonical form, `doc` (B|1, N) int64: the index of each token's document within its row (0, 0, 1,
1, 1, 2, ...). Everything else follows from it: the block-diagonal causal mask of the softmax cores, the restarting
positions of the rotary parts, the resets of FAVOR+'s prefix sums and PLASH's block grids (attention.packed).

No host sync: the conversions are tensor ops; the value checks (increasing, ending at the row length, agreeing
with position_ids) read values only where `_validation.reads_values` allows (CPU in eager mode by default), the
shape and dtype checks always run.
"""

from __future__ import annotations

import torch

from symformer._validation import check_tensor, fail, reads_values


def _integer(name: str, x, ndims: tuple[int, ...]) -> torch.Tensor:
    check_tensor(name, x, ndims, floating=False, finite=False)
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        fail(name, f"dtype {x.dtype}", "an integer tensor (torch.int32 or torch.int64)", TypeError)
    return x


def starts_to_doc(starts: torch.Tensor) -> torch.Tensor:
    """Document index (..., N) int64 of a boolean (..., N) start mask (the first token always starts one).

    Args:
        starts (..., N): True at each document's first token.
    """
    starts = starts.clone()
    starts[..., 0] = True
    return starts.long().cumsum(-1) - 1


def doc_from_cu_seqlens(cu_seqlens: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """(B, N) document indices from flash-attention's cumulative lengths (module doc), validated.

    Args:
        cu_seqlens (D + 1,) or (B, D + 1): int32 / int64 cumulative document lengths, 0 first, strictly increasing,
            ending at B * N (1-D) or N (per row).
        batch (int): B, the rows.
        length (int): N, the tokens per row.

    Returns:
        doc (B, N): int64, each token's document index within its row.

    Example:
        >>> import torch
        >>> doc_from_cu_seqlens(torch.tensor([0, 2, 5, 6], dtype=torch.int32), 1, 6)
        tensor([[0, 0, 1, 1, 1, 2]])
    """
    cu = _integer("cu_seqlens", cu_seqlens, (1, 2))
    total = batch * length if cu.ndim == 1 else length
    if cu.shape[-1] < 2:
        fail("cu_seqlens", f"shape {tuple(cu.shape)}", "at least 2 entries (0 and the total length)")
    if cu.ndim == 2 and cu.shape[0] != batch:
        fail("cu_seqlens", f"shape {tuple(cu.shape)}", f"(B={batch}, D + 1) per row, or (D + 1,) over all rows")
    if reads_values(cu):
        if bool((cu[..., 0] != 0).any()) or bool((cu[..., -1] != total).any()):
            fail("cu_seqlens", cu.tolist(), f"0 first and the total length {total} last (flash-attention's convention)")
        if bool((cu.diff(dim=-1) <= 0).any()):
            fail("cu_seqlens", cu.tolist(), "strictly increasing cumulative lengths (no empty documents)")
        if cu.ndim == 1 and bool((torch.isin(torch.arange(0, total, length, device=cu.device), cu) == 0).any()):
            fail("cu_seqlens", cu.tolist(), f"a document boundary at every row start (multiples of N={length})")
    cu = cu.long()
    starts = torch.zeros(cu.shape[:-1] + (total + 1,), dtype=torch.bool, device=cu.device)
    starts = starts.scatter(-1, cu[..., :-1].clamp(0, total), True)[..., :total]  # (D,) starts -> (total,) marks
    return starts_to_doc(starts.reshape(batch, length))


def doc_from_segment_ids(segment_ids: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """(B|1, N) document indices from (B, N) or (N,) segment ids (a document starts where the id changes).

    Args:
        segment_ids (B, N) or (N,): integer ids, non-decreasing along each row.
        batch (int): B, the rows.
        length (int): N, the tokens per row.

    Returns:
        doc (B|1, N): int64 document indices.

    Example:
        >>> import torch
        >>> doc_from_segment_ids(torch.tensor([[7, 7, 9, 9, 9, 12]]), 1, 6)
        tensor([[0, 0, 1, 1, 1, 2]])
    """
    seg = _integer("segment_ids", segment_ids, (1, 2))
    seg = seg.reshape(1, -1) if seg.ndim == 1 else seg
    if seg.shape[-1] != length or seg.shape[0] not in (1, batch):
        fail("segment_ids", f"shape {tuple(segment_ids.shape)}", f"(B={batch}, N={length}) or (N,)")
    change = seg.diff(dim=-1)
    if reads_values(seg) and bool((change < 0).any()):
        fail("segment_ids", "ids that decrease along a row", "non-decreasing ids (one contiguous run per document)")
    return starts_to_doc(torch.nn.functional.pad(change != 0, (1, 0), value=True))


def doc_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """(B, N) document indices from restarting positions: a document starts wherever a position is not its
    predecessor's + 1 (transformers' find_packed_sequence_indices rule).

    Args:
        position_ids (B, N) or (N,): integer token positions.

    Returns:
        doc (B|1, N): int64 document indices.
    """
    pos = _integer("position_ids", position_ids, (1, 2))
    pos = pos.reshape(1, -1) if pos.ndim == 1 else pos
    return starts_to_doc(torch.nn.functional.pad(pos.diff(dim=-1) != 1, (1, 0), value=True))


def document_ids(
    cu_seqlens: torch.Tensor | None, segment_ids: torch.Tensor | None, batch: int, length: int
) -> torch.Tensor | None:
    """The canonical (B|1, N) document indices from either argument (None: no boundaries); both is a ValueError."""
    if cu_seqlens is not None and segment_ids is not None:
        fail("cu_seqlens", "both cu_seqlens and segment_ids", "one of them (the same boundaries, two conventions)")
    if cu_seqlens is not None:
        return doc_from_cu_seqlens(cu_seqlens, batch, length)
    if segment_ids is not None:
        return doc_from_segment_ids(segment_ids, batch, length)
    return None


def positions_in_documents(doc: torch.Tensor) -> torch.Tensor:
    """(..., N) int64 index of each token within its document (positions restarting at 0 at each boundary).

    Args:
        doc (..., N): int64 document indices, non-decreasing.

    Example:
        >>> import torch
        >>> positions_in_documents(torch.tensor([[0, 0, 1, 1, 1, 2]]))
        tensor([[0, 1, 0, 1, 2, 0]])
    """
    idx = torch.arange(doc.shape[-1], device=doc.device).expand_as(doc)
    starts = torch.nn.functional.pad(doc.diff(dim=-1) != 0, (1, 0), value=True)
    return idx - torch.where(starts, idx, torch.zeros_like(idx)).cummax(-1).values


def check_positions_agree(doc: torch.Tensor, positions: torch.Tensor, name: str = "position_ids") -> None:
    """ValueError naming `name` when positions (B|1, N) do not restart at 0 at each document boundary and count up by
    1 inside each document (a value check: only where reads_values allows).

    Args:
        doc (B|1, N): int64 document indices.
        positions (B|1, N): integer positions.
        name (str): the argument the error names.
    """
    if not reads_values(positions):
        return
    want = positions_in_documents(doc)
    if want.shape[-1] != positions.shape[-1] or not bool((positions == want).all()):
        fail(name, "positions that disagree with the document boundaries", "0 at each document start, +1 per token")


def block_causal_mask(doc: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """(B|1, 1, N, N) boolean mask (True = attend): same document, and key <= query when causal.

    Args:
        doc (B|1, N): int64 document indices.
        causal (bool): also key <= query.

    Example:
        >>> import torch
        >>> block_causal_mask(torch.tensor([[0, 0, 1]]))[0, 0].int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [0, 0, 1]], dtype=torch.int32)
    """
    same = doc[..., :, None] == doc[..., None, :]
    if causal:
        n = doc.shape[-1]
        same = same & torch.ones(n, n, dtype=torch.bool, device=doc.device).tril()
    return same[:, None]


def expand_rows(doc: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """(B|1, N) -> (B H, N): the document indices of folded (batch, head) rows.

    Args:
        doc (B|1, N): int64 document indices.
        batch (int): B.
        heads (int): H.
    """
    return doc.expand(batch, doc.shape[-1]).repeat_interleave(heads, dim=0)


def check_packed_call(q: torch.Tensor, k: torch.Tensor, is_causal: bool, state, core: str) -> None:
    """What a linear core needs to honour document boundaries: causal attention of a full row (Nq = Nk), no
    decoding state (a packed row is a training or scoring input: the state of one document would not continue the
    next; transformers defines no packing with a cache either).

    Args:
        q (B, H, Nq, Dh): queries.
        k (B, H, Nk, Dh): keys.
        is_causal (bool): the call's causality.
        state: the call's decoding state (must be None).
        core (str): the core's name, for the message.
    """
    if state is not None:
        fail("state", "a decoding state with document boundaries", f"no state: {core} packs causal forwards only")
    if not is_causal:
        fail("is_causal", is_causal, f"True with document boundaries ({core} packs causal attention)")
    if q.ndim >= 2 and k.ndim >= 2 and q.shape[-2] != k.shape[-2]:
        fail("q", f"{q.shape[-2]} queries for {k.shape[-2]} keys", "one query per key with document boundaries")
