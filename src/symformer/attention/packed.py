"""Causal FAVOR+ and PLASH over packed rows (issue 61): each document of a row attends to itself only, exactly as
if it ran alone, in one vectorised pass (no loop over documents, no host read of the boundaries).

`doc` (rows, N) int64 is each token's document index, non-decreasing (attention.boundaries).

FAVOR+ (favor_causal_packed). The chunked prefix sums of favor_ops.favor_causal, with two changes: inside a chunk the
C x C kernel is masked to the same document; across chunks only the document that spans a chunk's first token can
have earlier keys, so each chunk carries ONE state, the phi(K)^T [V, 1] of that document's keys in earlier chunks.
It is a sum over earlier chunks of their keys of that document, formed by one (nc x nc) block-diagonal product, not
by subtracting running sums, so no other document's keys enter it even at rounding level. The key stabiliser is one
constant per (batch, head), common to every document of the row, so it still cancels (favor.py module doc).

PLASH (plash_causal_packed). The chunked-prefix variant with every document's block grid starting at its first
token, as the document alone has it (PlashAttention.causal; left padding starts it at the first real token). A
token at position p of its document lies in its document's block p // c; a document boundary p = c, 2c, ... inside
a document opens a summary slot: the Stage I sums A^T [K | V] of the document's keys before it, then Stages II-III
(the mixer). There are at most N // c such slots, the block count of the unpacked row, so the mixer does no more
work than unpacked, whatever the documents. Any c consecutive tokens hold at most one boundary (two in one
document are c apart; the next document's first is c after its start), so a grid block of the row reads at most
two slots and its exact part spans at most two grid blocks: both are computed and selected per token.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from symformer.attention.favor_ops import _quotient, _with_ones


def _pad_doc(doc: torch.Tensor, pad: int) -> torch.Tensor:
    return F.pad(doc, (0, pad), value=-1) if pad else doc  # padding rows: a document of their own (-1)


def favor_causal_packed(
    qf: torch.Tensor, kf: torch.Tensor, v: torch.Tensor, doc: torch.Tensor, chunk_size: int, padded: bool = False
) -> torch.Tensor:
    """Causal FAVOR+ of packed rows: y_i = sum_{j <= i, doc(j) = doc(i)} phi(q_i).phi(k_j) v_j / (the same with 1).

    Args:
        qf (B, H, N, m): query features.
        kf (B, H, N, m): key features (zero rows for padded keys).
        v (B, H, N, Dv): values.
        doc (B|1, N): int64 document indices, non-decreasing along each row.
        chunk_size (int): chunk length C of the prefix sums.
        padded (bool): some keys were zeroed by a key-padding mask (a query may see none: output 0).

    Returns:
        out (B, H, N, Dv).
    """
    b, h, n, m = qf.shape
    c = min(chunk_size, n)
    pad = (-n) % c
    vv = _with_ones(v)
    if pad:
        qf, kf, vv = (F.pad(t, (0, 0, 0, pad)) for t in (qf, kf, vv))
    nc = (n + pad) // c
    qc, kc, vc = (t.reshape(b, h, nc, c, t.shape[-1]) for t in (qf, kf, vv))  # (B, H, nc C, .) -> (B, H, nc, C, .)
    dc = _pad_doc(doc, pad).reshape(doc.shape[0], nc, c)  # (B|1, nc, C)
    same = (dc[..., :, None] == dc[..., None, :]) & torch.ones(c, c, dtype=torch.bool, device=qf.device).tril()
    local = (qc @ kc.transpose(-1, -2)).masked_fill(~same[:, None], 0.0)  # (B, H, nc, C, C) same document, j <= i
    out = local @ vc
    if nc > 1:
        first = dc[..., 0]  # (B|1, nc): the document of each chunk's first token
        # chunk j's keys of the document that reaches chunk j + 1's first token, as (B, H, nc - 1, m, Dv + 1)
        onward = (dc[:, :-1] == first[:, 1:, None]).to(kf.dtype)[:, None, :, :, None]
        part = (kc[:, :, :-1] * onward).transpose(-1, -2) @ vc[:, :, :-1]
        # state entering chunk r + 1 = sum over chunks j <= r reaching the same document: a block-diagonal product
        reach = (first[:, 1:, None] == first[:, None, 1:]) & torch.ones(
            nc - 1, nc - 1, dtype=torch.bool, device=qf.device
        ).tril()
        state = (reach[:, None].to(part.dtype) @ part.flatten(-2)).unflatten(-1, part.shape[-2:])
        reads = (dc[:, 1:] == first[:, 1:, None]).to(qf.dtype)[:, None, :, :, None]  # queries of that document
        out = torch.cat([out[:, :, :1], out[:, :, 1:] + (qc[:, :, 1:] * reads) @ state], 2)
    return _quotient(out.reshape(b, h, nc * c, -1)[:, :, :n], padded)


def plash_causal_packed(core, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale, doc: torch.Tensor):
    """PlashAttention.causal of packed rows (module doc): each document's outputs are those of the document alone.

    Args:
        core (PlashAttention): the core (its causal_block, routing, prefix_summaries, M).
        q, k, v (n, N, d): folded rows.
        scale (float | None): the readout's logit scale (None: 1/sqrt(d)).
        doc (n, N): int64 document indices, non-decreasing along each row.

    Returns:
        out (n, N, d).
    """
    n, length, d = q.shape
    c, big_m = core.causal_block, core.M
    nb = -(-length // c)
    pad = nb * c - length
    idx = torch.arange(length, device=q.device)
    first_tok = torch.where(F.pad(doc.diff(dim=-1) != 0, (1, 0), value=True), idx, 0).cummax(-1).values
    p = idx - first_tok  # (n, N): position within the document
    opens = (p > 0) & (p % c == 0)  # a summary slot opens at this token
    slot = opens.long().cumsum(-1)  # (n, N): the slot a query reads if p >= c (slots 1..G, G <= nb - 1)
    grid = (p % c == 0).long().cumsum(-1)  # (n, N): the document block of each token, unique along the row
    s = 1.0 / math.sqrt(d) if scale is None else scale

    def blocks(x, value=0.0):
        x = F.pad(x, (0, 0, 0, pad), value=value) if x.ndim == 3 else F.pad(x, (0, pad), value=value)
        return x.unflatten(1, (nb, c))  # (n, N, ...) -> (n, nb, c, ...)

    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    gb = blocks(grid, -1)  # padding rows: document block -1, read by no real query
    # exact part: the keys of the query's own document block up to itself, within this grid block and the last
    kk = torch.cat([F.pad(kb, (0, 0, 0, 0, 1, 0))[:, :-1], kb], 2)  # (n, nb, 2c, d): grid blocks b - 1 and b
    vk = torch.cat([F.pad(vb, (0, 0, 0, 0, 1, 0))[:, :-1], vb], 2)
    gk = torch.cat([F.pad(gb, (0, 0, 1, 0), value=-2)[:, :-1], gb], 2)  # (n, nb, 2c)
    pos = torch.arange(2 * c, device=q.device)
    visible = (gk[:, :, None, :] == gb[..., None]) & (pos[None, :] <= pos[c:, None])  # (n, nb, c, 2c)
    ll = ((qb @ kk.transpose(-1, -2)) * s).masked_fill(~visible, float("-inf"))
    if nb == 1:  # one grid block: no document reaches a boundary, no summaries
        w = core._drop(torch.softmax(ll, -1).nan_to_num(0.0))
        return (w @ vk).flatten(1, 2)[:, :length]
    g_max = nb - 1
    seg = doc
    owner = torch.full((n, g_max + 2), -1, dtype=doc.dtype, device=q.device)  # slot -> its document (-1: unused)
    owner = owner.scatter(1, torch.where(opens, slot, g_max + 1), seg)[:, : g_max + 1]
    target = (slot + 1).clamp_max(g_max)  # a key feeds the next slot, if that slot is its document's
    feeds = (slot + 1 <= g_max) & (owner.gather(1, target) == seg)
    a = core.routing(kb)  # (n, nb, M, c): the routing weights A^T of each grid block (PlashAttention.routing)
    base = blocks(slot)[:, :, 0]  # (n, nb): the slot count at each grid block's first token
    fb, sb = blocks(feeds, False), blocks(slot)
    sums = q.new_zeros(n, g_max + 3, big_m, 2 * d)
    kvb = torch.cat([kb, vb], -1)
    for j in (0, 1):  # the grid block's keys feed slot base + 1 or base + 2 (at most one boundary per block)
        w = (fb & (sb == base[..., None] + j)).to(a.dtype)[:, :, None, :]
        part = (a * w) @ kvb  # (n, nb, M, 2d)
        sums = sums.scatter_add(1, (base + 1 + j)[:, :, None, None].expand_as(part), part)
    sums = sums[:, 1 : g_max + 1].flatten(-2)  # (n, G, M 2d): the new keys of each slot
    sd = owner[:, 1:]
    reach = (sd[:, :, None] == sd[:, None, :]) & torch.ones(g_max, g_max, dtype=torch.bool, device=q.device).tril()
    acc = (reach.to(sums.dtype) @ sums).unflatten(-1, (big_m, 2 * d))  # each slot: its document's keys before it
    k_g, v_g = core.prefix_summaries(acc[..., :d].flatten(0, 1), acc[..., d:].flatten(0, 1))  # Stages II-III
    k_g = F.pad(k_g.unflatten(0, (n, g_max)), (0, 0, 0, 0, 1, 1))  # slot 0 (none) and G + 1 (past the end)
    v_g = F.pad(v_g.unflatten(0, (n, g_max)), (0, 0, 0, 0, 1, 1))

    def pick(x, at):  # (n, G + 2, M, d) at (n, nb) -> (n, nb, M, d)
        return x.gather(1, at[:, :, None, None].expand(-1, -1, big_m, x.shape[-1]))

    upper = sb == base[..., None] + 1  # (n, nb, c): the query reads the block's second candidate slot
    lg = torch.where(
        upper[..., None], qb @ pick(k_g, base + 1).transpose(-1, -2), qb @ pick(k_g, base).transpose(-1, -2)
    )
    lg = (lg * s).masked_fill(~blocks(p >= c, False)[..., None], float("-inf"))  # the first document block reads none
    w = core._drop(torch.softmax(torch.cat([lg, ll], -1), -1).nan_to_num(0.0))
    ws = w[..., :big_m]
    out = torch.where(upper[..., None], ws @ pick(v_g, base + 1), ws @ pick(v_g, base)) + w[..., big_m:] @ vk
    return out.flatten(1, 2)[:, :length]
