"""Causal PLASH decoding: the state of the chunked-prefix variant (PlashAttention.causal), exact against it.

The causal variant cuts the sequence into blocks of `causal_block` tokens, aligned to the first position the core
is given; a query in block b reads, in one softmax, the Stage II-III keys and values (K_g, V_g) of the Stage I sums
of blocks 0..b-1 and the raw keys of its own block up to itself. The state of one layer is therefore
- K~, V~: the sums A^T K, A^T V over the finished blocks (n, M, d), and how many kept keys they hold;
- K_g, V_g: Stages II-III of those sums (n, M, d), recomputed once per finished block: O(M^2 d + M d^2);
- the raw keys and values of the current block (at most causal_block of them) with their key-padding flags.
A new token costs O((causal_block + M) d) (its softmax over M summaries and at most causal_block keys), and the
memory is O((M + causal_block) d) per folded row (batch x head), whatever the context.

Key padding (ours; the paper's block has no masked form): a padded key's routing row A_j is zeroed, so it adds
nothing to K~, V~, and it is masked in the in-block softmax; a prefix without any kept key offers no summary; a
query that sees no kept key at all gets the output 0. PlashAttention.causal applies the same definition, so a
left-padded batch decodes exactly as its full causal forward with the same mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class PlashState:
    """The decoding state of one PLASH layer (module doc); tensors are folded (B H, ...) rows, heads = H."""

    pk: torch.Tensor | None = None
    pv: torch.Tensor | None = None
    count: torch.Tensor | None = None
    k_g: torch.Tensor | None = None
    v_g: torch.Tensor | None = None
    blk_k: torch.Tensor | None = None
    blk_v: torch.Tensor | None = None
    blk_keep: torch.Tensor | None = None
    length: int = 0
    heads: int = 1

    _FIELDS = ("pk", "pv", "count", "k_g", "v_g", "blk_k", "blk_v", "blk_keep")

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (getattr(self, f) for f in self._FIELDS) if t is not None)

    def _map(self, fn) -> None:
        for f in self._FIELDS:
            t = getattr(self, f)
            if t is not None:  # unfold the heads, act on the batch axis, fold back
                setattr(self, f, fn(t.unflatten(0, (-1, self.heads))).flatten(0, 1))

    def select(self, index: torch.Tensor) -> None:
        """Keep / reorder batch rows (beam search, finished sequences)."""
        self._map(lambda t: t.index_select(0, index.to(t.device)))

    def repeat_interleave(self, repeats: int) -> None:
        self._map(lambda t: t.repeat_interleave(repeats, 0))


def _append(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    return new if old is None else torch.cat((old, new), dim=1)


def _finish_block(core, state: PlashState) -> None:
    """Fold the full current block into K~, V~ and recompute K_g, V_g (once per causal_block tokens)."""
    a = core.routing(state.blk_k, state.blk_keep)  # (n, M, c)
    dk, dv = a @ state.blk_k, a @ state.blk_v
    kept = state.blk_keep.sum(-1)
    if state.pk is None:
        state.pk, state.pv, state.count = dk, dv, kept
    else:
        state.pk, state.pv, state.count = state.pk + dk, state.pv + dv, state.count + kept
    state.k_g, state.v_g = core.prefix_summaries(state.pk, state.pv)
    state.blk_k = state.blk_v = state.blk_keep = None


def plash_step(
    core,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None,
    state: PlashState,
    scale: float | None,
) -> torch.Tensor:
    """Outputs of L new folded queries q (n, L, d) continuing the sequence in `state` (which then holds the new
    keys); keep: (n, L) boolean key padding or None. Equal to the last L rows of core.causal over the whole
    sequence with the same mask."""
    n, length, _ = q.shape
    c = core.causal_block
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    keep = torch.ones(n, length, dtype=torch.bool, device=q.device) if keep is None else keep
    outs, i = [], 0
    while i < length:
        pos = state.length % c
        take = min(c - pos, length - i)
        qi = q[:, i : i + take]
        state.blk_k, state.blk_v = _append(state.blk_k, k[:, i : i + take]), _append(state.blk_v, v[:, i : i + take])
        state.blk_keep = _append(state.blk_keep, keep[:, i : i + take])
        # query t of this piece sits at block position pos + t: it sees the block's keys 0..pos + t
        visible = torch.ones(take, pos + take, dtype=torch.bool, device=q.device).tril(pos)
        ll = (qi @ state.blk_k.transpose(-1, -2)) * s
        ll = ll.masked_fill(~(visible & state.blk_keep[:, None, :]), float("-inf"))
        if state.k_g is None:  # block 0: no summary yet
            w = core._drop(torch.softmax(ll, dim=-1).nan_to_num(0.0))
            out = w @ state.blk_v
        else:
            lg = (qi @ state.k_g.transpose(-1, -2)) * s
            lg = lg.masked_fill((state.count == 0)[:, None, None], float("-inf"))
            w = core._drop(torch.softmax(torch.cat((lg, ll), dim=-1), dim=-1).nan_to_num(0.0))
            out = w[..., : core.M] @ state.v_g + w[..., core.M :] @ state.blk_v
        outs.append(out)
        state.length += take
        i += take
        if state.length % c == 0:
            _finish_block(core, state)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
