"""Packed sequences in the "symformer_<core>" attention functions (issue 61): several documents in one row, each
attending to itself only, as transformers packs them.

transformers marks packing two ways, and both reach an attention function through its keyword arguments:
- `position_ids` that restart (a position that is not its predecessor's + 1 starts a document: transformers'
  find_packed_sequence_indices rule), e.g. `DataCollatorWithFlattening()`;
- `cu_seq_lens_q` / `cu_seq_lens_k`, flash-attention's cumulative lengths over the flattened batch, from
  `DataCollatorWithFlattening(return_flash_attn_kwargs=True)`.

The boundaries go to the core as document indices (attention.boundaries), so FAVOR+'s prefix sums and PLASH's blocks
restart at each document. Reading restarts off position_ids reads values (a host sync on an accelerator), so it runs
where value checks run (_validation.reads_values: the CPU in eager mode by default); elsewhere pass the flash kwargs,
which need no read. Restarting positions inside a left-padded row (the padding's) are padding, not packing: a mask
that drops keys keeps the key-padding path. Packing with a cache (a decoding state, a KV cache) is refused: a
document's state would not continue the next one's, and transformers defines no packing with a cache either.
"""

from __future__ import annotations

import torch

from symformer._validation import fail, reads_values
from symformer.attention.boundaries import block_causal_mask, doc_from_cu_seqlens, doc_from_position_ids

_CACHE = (
    "use_cache=False and no past_key_values: packed sequences with a cache are not defined (a document's decoding "
    "state would continue into the next document; transformers defines no packing with a cache either)"
)


def _from_flash_kwargs(kwargs: dict, batch: int, nq: int) -> torch.Tensor | None:
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None and cu_k is None:
        return None
    cu = cu_q if cu_q is not None else cu_k
    if cu_q is not None and cu_k is not None and reads_values(cu_q):
        if cu_q.shape != cu_k.shape or not bool((cu_q == cu_k).all()):
            fail("cu_seq_lens_k", "boundaries other than cu_seq_lens_q", "the same boundaries (self-attention)")
    return doc_from_cu_seqlens(cu, batch, nq)


def packed_documents(kwargs: dict, attention_mask, batch: int, nq: int, nk: int, cached: bool, causal: bool):
    """The (B|1, N) document indices of a packed call (module doc), or None for an unpacked one.

    Args:
        kwargs (dict): the attention function's keyword arguments (position_ids, cu_seq_lens_q, cu_seq_lens_k).
        attention_mask (B, 1, Nq, Nk) | None: transformers' mask (boolean, or additive 0 / -inf).
        batch (int): B.
        nq (int): queries.
        nk (int): keys.
        cached (bool): the layer decodes with a state or a KV cache.
        causal (bool): the attention module is causal.

    Returns:
        doc (B|1, N) | None: int64 document indices; ValueError for packing with a cache, a non-causal module, or
        boundaries that disagree with position_ids or the mask.
    """
    pos = kwargs.get("position_ids")
    doc = _from_flash_kwargs(kwargs, batch, nq)
    mask = None if attention_mask is None else _as_bool(attention_mask)
    if doc is None:
        if not isinstance(pos, torch.Tensor) or pos.shape[-1] != nq or nq < 2 or not reads_values(pos):
            return None
        doc = doc_from_position_ids(pos)
        if not bool((doc[:, -1] > 0).any()):
            return None  # no restart: one document per row
        if mask is not None and reads_values(mask) and not _packing_mask(mask, doc):
            return None  # restarts among a padded row's positions: key padding (mask_structure reads it)
    elif isinstance(pos, torch.Tensor) and pos.shape[-1] == nq and reads_values(pos):
        if not bool((doc_from_position_ids(pos) == doc).all()):
            fail("position_ids", "restarts other than the cu_seq_lens_q boundaries", "0 at each document start")
    if cached or nq != nk:
        fail("past_key_values", "a cache with packed sequences", _CACHE)
    if not causal:
        fail("attention_mask", "packed sequences in a non-causal attention", "a causal (decoder) model")
    if mask is not None and reads_values(mask) and not _packing_mask(mask, doc):
        fail("attention_mask", "a mask other than the packed documents' causal blocks", "the packed documents' mask")
    return doc


def _as_bool(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask == 0


def _packing_mask(mask: torch.Tensor, doc: torch.Tensor) -> bool:
    """A mask that packing explains: the documents' causal blocks, or plain causal (all keys kept)."""
    if mask.ndim != 4 or mask.shape[-1] != mask.shape[-2] or mask.shape[-1] != doc.shape[-1]:
        return False
    blocks = block_causal_mask(doc).to(mask.device)
    if bool((mask == blocks).all()):
        return True
    n = mask.shape[-1]
    return bool((mask == torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()).all())
