"""Causal PLASH decoding: the state of the chunked-prefix variant (PlashAttention.causal), exact against it.

The causal variant cuts the sequence into blocks of `causal_block` tokens, aligned to the first position the core
is given; a query in block b reads, in one softmax, the Stage II-III keys and values (K_g, V_g) of the Stage I sums
of blocks 0..b-1 and the raw keys of its own block up to itself. The state of one layer (folded rows n = B H) is
- pkv (n, M, 2 d): the running Stage I sums A^T [K | V] (eqs. 3-5) over every consumed key, and `count` (n, 1) the
  kept keys among them;
- kv (n, c + M, 2 d): rows 0..c-1 the raw [k | v] of the current block (c = causal_block), rows c.. [K_g | V_g]
  (eqs. 6-12) of the sums over the FINISHED blocks, and `bias` (n, c + M) the additive logit mask of those rows (0:
  a new query reads the row, -inf: it does not); `length` (a (1,) int64 tensor) the number of tokens consumed.
A new token costs O((causal_block + M) d) for its softmax plus one Stage II-III pass on the M summaries,
O(M^2 d + M d^2) (below), and the memory is O((M + causal_block) d) per folded row, whatever the context.

Static shapes, no host branch (docs/design.md, "Conventions"; issue 57). Every tensor keeps its shape from the
first step on, and a one-token step reads no value on the host: its slot in the block is `length % c`, a tensor, so
dynamo neither breaks the graph nor recompiles per token and a CUDA graph captured on a step replays on the same
buffers (the step updates them in place unless autograd needs the old values). The block rollover (Alg. 1 run on
the sums of the finished blocks: fold the full block into the summaries, recompute K_g, V_g) is therefore computed
at EVERY step from the running sums and selected with torch.where when the counter says the block just filled; the
selected value is exactly the one the rollover computes, so decoding still equals the full causal forward. The
price is the Stage II-III pass per token instead of once per causal_block tokens; constant per token. In eager
mode the host counts the tokens it feeds (`host_length`, no device read), so there the pass runs once per block.

Key padding (ours; the paper's block has no masked form): a padded key's routing row A_j is zeroed, so it adds
nothing to the sums, and it is masked in the in-block softmax; a prefix without any kept key offers no summary; a
query that sees no kept key at all gets the output 0. PlashAttention.causal applies the same definition, so a
left-padded batch decodes exactly as its full causal forward with the same mask. With a mask, each row's blocks
count from its first kept key (Alg. 1 summarises the row's own blocks, so left padding is invisible): `rlen` (n, 1)
counts the tokens since each row's first kept key, the row's slot is `rlen % c`, and since rows then fill their
blocks at different steps the rollover pass runs at every step and is selected per row (as under torch.compile).
A state whose masks start no row late keeps the shared grid above and its once-per-block pass; the host reads
that off the mask only where value checks may (CPU in eager mode), elsewhere any mask takes the per-row grids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from symformer._torch_compat import is_compiling
from symformer._validation import fail, reads_values
from symformer.attention.sketch import count_sketch_matrices
from symformer.kernels.plash import decode_step


@dataclass
class PlashState:
    """The decoding state of one PLASH layer (module doc); tensors are folded (B H, ...) rows, heads = H. `sketch`
    caches the CountSketch matrices of the core's fixed hashes (Construction C.3) in the state's dtype."""

    pkv: torch.Tensor | None = None
    count: torch.Tensor | None = None
    kv: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    length: torch.Tensor | None = None
    heads: int = 1
    sketch: tuple | None = None
    host_length: int | None = None  # `length` as the host counted it in eager steps; None once a compiled step ran
    rlen: torch.Tensor | None = None  # (n, 1) tokens since each row's first kept key; None until a mask came
    core_id: int | None = None  # id() of the PlashAttention that filled it: its prototypes and hashes made the sums

    _FIELDS = ("pkv", "count", "kv", "bias", "rlen")

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


def check_state_use(core, state: PlashState, q: torch.Tensor) -> None:
    """A PlashState must continue with the core that filled it and with new tokens q (B, H, L, d) of its batch,
    heads, head dim, dtype and device (metadata only: no host read); binds an empty state to core and heads."""
    if state.kv is None:
        state.core_id, state.heads = id(core), q.shape[1]
        return
    if state.core_id != id(core):
        fail(
            "state",
            "a PLASH decoding state filled by another layer or model (other prototypes and hashes)",
            "the state this layer's PlashAttention.init_state() returned",
        )
    b, h, _, dh = q.shape
    rows = state.kv.shape[0]
    if state.heads != h or rows != b * h or state.kv.shape[-1] != 2 * dh:
        fail(
            "state",
            f"a PLASH state of batch {rows // state.heads}, {state.heads} heads and head dim {state.kv.shape[-1] // 2}",
            f"batch {b}, {h} heads and head dim {dh} (the new tokens' q {tuple(q.shape)}); select() / "
            "repeat_interleave() it to change the batch",
        )
    if state.kv.dtype != q.dtype or state.kv.device != q.device:
        fail(
            "state",
            f"a PLASH state in {state.kv.dtype} on {state.kv.device}",
            f"{q.dtype} on {q.device} (the dtype and device the core computes in for q)",
        )


def _allocate(core, state: PlashState, n: int, x: torch.Tensor) -> None:
    """The empty state at its final shapes: no summary, an empty block, length 0."""
    dh, m, c = x.shape[-1], core.M, core.causal_block
    state.pkv = x.new_zeros(n, m, 2 * dh)
    state.count = torch.zeros(n, 1, dtype=torch.long, device=x.device)
    state.kv = x.new_zeros(n, c + m, 2 * dh)
    state.bias = x.new_full((n, c + m), float("-inf"))
    state.length = torch.zeros(1, dtype=torch.long, device=x.device)  # (1,): its remainder indexes the block slot
    state.host_length = 0
    hashes = [(getattr(core, f"hash_{i}"), getattr(core, f"sign_{i}"), dk) for i, dk in enumerate(core.D_k)]
    state.sketch = tuple(tuple(count_sketch_matrices(h, sg, dk, x.dtype).unbind(0)) for h, sg, dk in hashes)


def summary_kv(core, pkv: torch.Tensor, sketch: tuple) -> torch.Tensor:
    """[K_g | V_g] (n, M, 2 d) of Stage I sums pkv = [K~ | V~] (n, M, 2 d): PlashAttention.prefix_summaries (eqs.
    6-12) on 2-D GEMMs over the n M items, with the CountSketch matrices precomputed and the degrees' W_out blocks
    applied as one GEMM: the same arithmetic in about half the kernel launches."""
    n, m, _ = pkv.shape
    g = core.psi(pkv.flatten(0, 1))  # eq. 6 on [K~ || V~]
    g = g / (g.norm(dim=-1, keepdim=True).clamp_min(core.eps_g) * core.tau_g)  # eq. 7
    feats = []
    for mats, dk, beta in zip(sketch, core.D_k, core.beta.unbind(0)):  # eqs. 8, 42: TS_k = IFFT(prod_t FFT(C_t g))
        if len(mats) == 1:
            z = g @ mats[0]
        else:
            spec = None
            for cm in mats:
                f = torch.fft.rfft(g @ cm, n=dk, dim=-1)
                spec = f if spec is None else spec * f
            z = torch.fft.irfft(spec, n=dk, dim=-1)
        feats.append(z * beta)
    y_enh = core.w_out(feats[0] if len(feats) == 1 else torch.cat(feats, dim=-1))  # eqs. 9-10
    z = core.mixer(y_enh.view(n, m, -1)).flatten(0, 1)  # eq. 11
    w_kv = torch.cat((core.w_k.weight, core.w_v.weight))  # eq. 12: K_g = Z W_K, V_g = Z W_V in one GEMM
    return F.linear(z, w_kv).view(n, m, -1)  # (n M, 2 d) -> (n, M, 2 d)


def _prefill(core, q, k, v, keep, state: PlashState, scale: float | None) -> torch.Tensor:
    """L new tokens into an EMPTY state: the outputs are core.causal's; the state then holds the sums of all L keys,
    [K_g | V_g] of the L // c finished blocks and the raw keys of the last, unfinished one (host-known sizes)."""
    length, c = q.shape[1], core.causal_block
    out = core.causal(q, k, v, scale, keep)
    kvc = torch.cat((k, v), dim=-1)
    a = core.routing(k, keep)  # (n, M, L), padded keys' columns 0
    if keep is not None and _grid_may_shift(~keep[:, :1]):
        _prefill_rows(core, kvc, a, keep, state)
        return out
    done = (length // c) * c
    committed = a[..., :done] @ kvc[:, :done]
    state.pkv = committed + a[..., done:] @ kvc[:, done:]
    kept = torch.ones_like(kvc[..., 0], dtype=torch.bool) if keep is None else keep
    state.count = kept.sum(-1, keepdim=True)
    if done:
        state.kv[:, c:] = summary_kv(core, committed, state.sketch)
        state.bias[:, c:].masked_fill_(kept[:, :done].any(-1, keepdim=True), 0.0)
    state.kv[:, : length - done] = kvc[:, done:]
    state.bias[:, : length - done].masked_fill_(kept[:, done:], 0.0)
    state.length.fill_(length)
    state.host_length = length
    return out


def _grid_may_shift(pad_before_start: torch.Tensor) -> bool:
    """Whether key padding may move a row's block grid off the shared one: a pad before the row's first kept key
    (a boolean (n, 1) tensor). The host reads it only where value checks may (_validation.reads_values: CPU in eager
    mode), so an unpadded mask keeps the shared grid and its once-per-block rollover; elsewhere it cannot tell
    without a sync, so the rows get their own grids (exact either way)."""
    if is_compiling() or not reads_values(pad_before_start):
        return True
    return bool(pad_before_start.any())


def _prefill_rows(core, kvc, a, keep, state: PlashState) -> None:
    """_prefill's state with key padding: each row's blocks count from its first kept key (as in core.causal), so
    row r has finished rlen_r // c blocks; the sums, summaries and raw block are selected per row with masks and
    one gather (no host read)."""
    n, length = keep.shape
    c = core.causal_block
    lead = (keep.cumsum(-1) == 0).sum(-1, keepdim=True)  # (n, 1) leading pads
    rlen = length - lead
    done = rlen - rlen % c  # (n, 1) tokens of the row's finished blocks
    idx = torch.arange(length, device=keep.device) - lead  # (n, L) in-row index (< 0: leading padding)
    committed = (a * (idx < done).unsqueeze(1)) @ kvc  # (n, M, L) @ (n, L, 2 d)
    state.pkv = committed + (a * (idx >= done).unsqueeze(1)) @ kvc
    state.count = keep.sum(-1, keepdim=True)
    state.kv[:, c:] = summary_kv(core, committed, state.sketch)
    state.bias[:, c:].masked_fill_(done > 0, 0.0)  # done > 0: the row's first token, a kept key, is in its prefix
    src = lead + done + torch.arange(c, device=keep.device)  # (n, c) positions of the unfinished block's tokens
    inside = src < length
    src = src.clamp(max=length - 1)
    state.kv[:, :c] = kvc.gather(1, src.unsqueeze(-1).expand(-1, -1, kvc.shape[-1]))
    state.bias[:, :c].masked_fill_(inside & keep.gather(1, src), 0.0)
    state.rlen = rlen
    state.length.fill_(length)
    state.host_length = length


def _routing_column(core, k: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """A^T of one key per row (eq. 3), k (n, 1, d) -> (n, M, 1), as core.routing on a 2-D GEMM; a padded key: 0."""
    n, _, dh = k.shape
    # k (n, 1, d) -> (n, d); A^T (n, M)
    a = torch.softmax(torch.mm(k.view(n, dh), core.prototypes.to(k.dtype).t() / core.tau), dim=-1)
    return (a if keep is None else a * keep).unsqueeze(-1)  # (n, M) -> (n, M, 1)


def _token(core, q, k, v, keep, state: PlashState, scale: float | None) -> torch.Tensor:
    """One new token (n, 1, d): write it into its block slot, attend over [block; K_g] (eq. 12 plus the exact
    in-block part), add it to the running sums, and roll the block over when it fills (module doc) -- all with
    tensor indices, masks and torch.where, no host read; in place unless autograd needs the old values."""
    dh, c = q.shape[-1], core.causal_block
    s = 1.0 / math.sqrt(dh) if scale is None else scale
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, state.kv, state.pkv))
    kv, bias = (state.kv.clone(), state.bias.clone()) if grad else (state.kv, state.bias)
    kvn = torch.cat((k, v), dim=-1)  # (n, 1, 2 d)
    if keep is not None and state.rlen is None and _grid_may_shift(~keep & (state.count == 0)):
        # the first mask that may start a row late: every row so far started at token 0
        state.rlen = state.length.expand(q.shape[0], 1).clone()
    if not grad and core.fused("plash_decode", q):
        return _token_fused(core, q, k, v, keep, state, s)
    if state.rlen is None:
        pos = state.length % c  # (1,): the token's row in the block
        kv.index_copy_(1, pos, kvn)
        if keep is None:
            bias.index_fill_(1, pos, 0.0)
        else:
            bias.index_copy_(1, pos, torch.zeros_like(keep, dtype=bias.dtype).masked_fill_(~keep, float("-inf")))
    else:  # with key padding each row's block starts at its first kept key (core.causal): a slot per row
        pos = state.rlen % c  # (n, 1)
        kv.scatter_(1, pos.unsqueeze(-1).expand(-1, -1, kv.shape[-1]), kvn)
        row_bias = bias.new_zeros(pos.shape)
        bias.scatter_(1, pos, row_bias if keep is None else row_bias.masked_fill_(~keep, float("-inf")))
    # one softmax over the block and the summaries; the mask enters as the GEMM's additive input
    # bias (n, c + M) -> (n, 1, c + M); q (n, 1, d) @ keys^T (n, d, c + M) -> w (n, 1, c + M)
    w = torch.softmax(torch.baddbmm(bias.unsqueeze(1), q, kv[..., :dh].transpose(-1, -2), alpha=s), dim=-1)
    out = torch.bmm(core._drop(w if keep is None else w.nan_to_num(0.0)), kv[..., dh:])  # no kept key yet: 0
    a = _routing_column(core, k, keep)
    pkv = state.pkv.addcmul(a, kvn) if grad else state.pkv.addcmul_(a, kvn)
    kept = 1 if keep is None else keep
    count = state.count + kept if grad else state.count.add_(kept)
    if grad:
        kv, bias = kv.clone(), bias.clone()
    if state.rlen is None:
        _rollover(core, state, kv, bias, pkv, count, pos)
    else:
        _rollover_rows(core, state, kv, bias, pkv, count, pos)
    state.kv, state.bias, state.pkv, state.count = kv, bias, pkv, count
    state.length.add_(1)
    return out


def _token_fused(core, q, k, v, keep, state: PlashState, scale: float) -> torch.Tensor:
    """_token on the fused decoding kernel (kernels.plash.decode_step: the block slot, the readout over [block; K_g]
    and the running sums in one launch, in place), then the same rollover."""
    pos = state.length % core.causal_block if state.rlen is None else state.rlen % core.causal_block
    out = decode_step(q[:, 0], k[:, 0], v[:, 0], keep, pos, state.kv, state.bias, state.pkv, state.count,
                      core.prototypes, core.tau, scale)  # fmt: skip
    roll = _rollover if state.rlen is None else _rollover_rows
    roll(core, state, state.kv, state.bias, state.pkv, state.count, pos)
    state.length.add_(1)
    return out.unsqueeze(1)  # (n, d) -> (n, 1, d)


def _rollover(core, state: PlashState, kv, bias, pkv, count, pos) -> None:
    """When this token finished the block, the running sums become the prefix: [K_g | V_g] of them, their rows
    unmasked where a kept key exists, and the block emptied. In eager mode the host knows the token count without
    reading the device (`host_length`), so the Stage II-III pass runs once per block; under torch.compile (and
    after it) the pass runs every step and torch.where selects it (module doc), so the graph has no branch."""
    c = core.causal_block
    host = None if is_compiling() else state.host_length
    if host is not None:
        state.host_length = host + 1
        if host % c == c - 1:
            kv[:, c:] = summary_kv(core, pkv, state.sketch)
            bias[:, c:].masked_fill_(count > 0, 0.0)
            bias[:, :c].fill_(float("-inf"))
        return
    state.host_length = None
    full = pos == c - 1
    summ = kv[:, c:]
    summ.copy_(torch.where(full, summary_kv(core, pkv, state.sketch), summ))
    bias[:, c:].masked_fill_((count > 0) & full, 0.0)  # a prefix with a kept key offers its summaries
    bias[:, :c].masked_fill_(full, float("-inf"))  # the next block starts empty; stale rows stay unread


def _rollover_rows(core, state: PlashState, kv, bias, pkv, count, pos) -> None:
    """_rollover with a block grid per row (key padding): a row that has started (a kept key so far) advances its
    in-row count, and rolls over when this token filled its block. Rows fill their blocks at different steps, so
    the Stage II-III pass runs at every step and torch.where selects it per row (the host cannot know which rows
    without reading the counters)."""
    c = core.causal_block
    if not is_compiling() and state.host_length is not None:
        state.host_length += 1
    else:
        state.host_length = None
    started = count > 0  # (n, 1)
    state.rlen = state.rlen + started
    full = started & (pos == c - 1)  # (n, 1)
    summ = kv[:, c:]
    summ.copy_(torch.where(full.unsqueeze(-1), summary_kv(core, pkv, state.sketch), summ))
    bias[:, c:].masked_fill_(full, 0.0)
    bias[:, :c].masked_fill_(full, float("-inf"))


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
    sequence with the same mask. Branches on shapes and on whether the state is empty, never on values: an empty
    state takes L > 1 tokens as a prefill (core.causal, once); otherwise the tokens step one at a time (their
    block positions are a device counter)."""
    n, length, _ = q.shape
    if state.kv is None:
        _allocate(core, state, n, q)
        if length > 1:
            return _prefill(core, q, k, v, keep, state, scale)
    if length == 1:
        return _token(core, q, k, v, keep, state, scale)
    outs = []
    for i in range(length):
        ki = None if keep is None else keep[:, i : i + 1]
        outs.append(_token(core, q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1], ki, state, scale))
    return torch.cat(outs, dim=1)
