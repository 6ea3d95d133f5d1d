"""Causal character/token language model with 1-D positions, and its generation loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from symformer._validation import check_choice, check_float, check_int, check_tensor, fail, reads_values
from symformer.attention.boundaries import check_positions_agree, document_ids, positions_in_documents
from symformer.models.transformer import Encoder, TransformerConfig


class CausalLM(nn.Module):
    def __init__(self, cfg: TransformerConfig, vocab_size: int):
        super().__init__()
        if cfg.coord_dim != 1:
            fail("coord_dim", cfg.coord_dim, "1 for a causal LM (token index positions)")
        self.cfg = cfg
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.tok = nn.Embedding(vocab_size, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(
        self,
        idx: torch.Tensor,
        positions: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, N, V) of token ids (B, N).

        Args:
            idx (B, N): token ids.
            positions (N, 1) or (B, N, 1): token positions (None: 0..N-1, or restarting at each document).
            cu_seqlens ((D + 1,) or (B, D + 1)): packed documents, flash-attention's cumulative lengths
                (attention.boundaries): each document attends to itself only and its positions restart at 0.
            segment_ids (B, N): packed documents as one id per token (instead of cu_seqlens).

        Returns:
            logits (B, N, V): each packed document's logits equal those of the document alone.

        Example:
            >>> import torch
            >>> from symformer.models import CausalLM, TransformerConfig
            >>> _ = torch.manual_seed(0)
            >>> lm = CausalLM(TransformerConfig(d_model=16, n_heads=2, attention="favor"), vocab_size=11).double()
            >>> a, b = torch.randint(0, 11, (1, 5)), torch.randint(0, 11, (1, 3))
            >>> packed = lm(torch.cat([a, b], 1), cu_seqlens=torch.tensor([0, 5, 8], dtype=torch.int32))
            >>> bool((packed[:, 5:] - lm(b)).abs().max() < 1e-12)  # the second document as if alone
            True
        """
        check_tensor("idx", idx, 2, floating=False)
        n = idx.shape[1]
        doc = document_ids(cu_seqlens, segment_ids, idx.shape[0], n)
        if doc is not None:
            if positions is None:  # restarting at each document (int64: exact in every dtype)
                positions = positions_in_documents(doc)[..., None]
            else:
                check_tensor("positions", positions, (2, 3), floating=False, finite=False)
                check_positions_agree(doc, positions[..., 0].reshape(-1, n), "positions")
        if positions is None:
            positions = torch.arange(n, device=idx.device)[:, None]  # int64: exact in every dtype
        return self.head(self.encoder(self.tok(idx), positions, is_causal=True, segment_ids=doc))

    def loss(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Mean next-token cross-entropy; targets of -100 are ignored (a packed row's last token of each document,
        whose next token starts another document)."""
        logits = self(idx, cu_seqlens=cu_seqlens, segment_ids=segment_ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)

    # ---------------------------------------------------------------- decoding
    def init_states(self, max_len: int | None = None, batch: int | None = None) -> list:
        """One empty decoding state per layer: a KV cache for softmax, a decoding core's own state otherwise
        (attention.decoding). max_len: softmax layers get a StaticKVCache of that many tokens (fixed shapes: a
        compiled step does not recompile as the context grows, and a CUDA graph can capture it); max_len and batch
        go to every decoding core's `init_state`, which may allocate its fixed-size state up front with them."""
        if max_len is not None:
            check_int("max_len", max_len, 1)
        if batch is not None:
            check_int("batch", batch, 1)
        return [blk.attn.init_state(max_len, batch) for blk in self.encoder.blocks]

    def step(
        self,
        idx: torch.Tensor,
        states: list,
        start: int | torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        pads: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, L, V) of tokens idx (B, L) at positions start..start+L-1 that follow the `start` tokens the
        states hold (which then hold these too): equal to the rows of forward() over the whole sequence.
        start: an int, or a 0-d integer tensor, so that a compiled step sees the same graph at every position.
        attention_mask: (B, L) key padding of the new tokens (True / 1 = keep; decoding cores only). pads: (B,)
        left-padding tokens before each row's first real one: row b's positions are start + i - pads[b] (at least
        0), so a left-padded row sees the positions it has alone."""
        check_tensor("idx", idx, 2, floating=False)
        if isinstance(start, torch.Tensor):
            if start.ndim or start.is_floating_point() or start.is_complex() or start.dtype == torch.bool:
                fail("start", f"a tensor of shape {tuple(start.shape)} and dtype {start.dtype}", "a 0-d integer tensor")
        else:
            check_int("start", start, 0)
        # start + arange, not arange(start, ...): a tensor start stays on the device (no .item())
        pos = (start + torch.arange(idx.shape[1], device=idx.device))[:, None]  # int64: exact in every dtype
        if pads is not None:
            check_tensor("pads", pads, 1, floating=False)
            pos = (pos[None] - pads.to(pos.device)[:, None, None]).clamp_min(0)  # (L, 1) -> (B, L, 1)
        keep = None
        if attention_mask is not None:
            check_tensor("attention_mask", attention_mask, 2, floating=False)
            if tuple(attention_mask.shape) != tuple(idx.shape):
                fail("attention_mask", f"shape {tuple(attention_mask.shape)}", f"idx's shape {tuple(idx.shape)}")
            keep = attention_mask.bool()[:, None, None, :]  # (B, L) -> (B, 1, 1, L): key padding
        _check_states(states, start, len(self.encoder.blocks))
        x, enc = self.tok(idx), self.encoder
        if enc.additive is not None:
            x = enc.additive(x, pos)
        for blk, st in zip(enc.blocks, states, strict=True):
            x = blk(x, pos, is_causal=True, state=st, attn_mask=keep)
        return self.head(enc.norm(x))

    @torch.no_grad()
    def generate(
        self,
        ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        compile: bool | str = False,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """ids (B, N) followed by max_new_tokens sampled tokens, (B, N + max_new_tokens). Each token is drawn from
        softmax(logits / temperature) over the top_k most likely (top_k=1: greedy). The prompt fills the layers'
        decoding states in one pass; every new token then costs one step (constant for a decoding core's state).
        compile: True (inductor) or a torch.compile backend name: the steps after the prompt run compiled as one
        graph (fullgraph) over static states (init_states(max_len=)) and a position counter on the device, so every
        step reuses one compiled graph (the prompt pass runs eager: its length varies between calls).
        attention_mask: (B, N) for a left-padded batch of prompts (1 = real token; decoding cores only): each row
        generates as its prompt alone (positions and, for PLASH, blocks count from its first real token)."""
        check_tensor("ids", ids, 2, floating=False)
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            fail("ids", f"dtype {ids.dtype}", "integer token ids (torch.long)", TypeError)
        if ids.shape[1] == 0:
            fail("ids", "an empty prompt (0 tokens)", "at least one token to condition on")
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, 0)
        temperature = check_float("temperature", temperature, 0.0, low_open=True)
        if top_k is not None:
            top_k = check_int("top_k", top_k, 1)
        table = getattr(self.encoder.additive, "max_len", None)
        if table is not None and ids.shape[1] + max_new_tokens > table:
            name, given = (
                ("ids", f"a prompt of {ids.shape[1]} tokens")
                if ids.shape[1] > table
                else ("max_new_tokens", f"{max_new_tokens} after a prompt of {ids.shape[1]} tokens")
            )
            fail(name, given, f"a prompt plus new tokens within the learned positional table of {table} positions")
        n = ids.shape[1]
        step, states = self.step, self.init_states(batch=ids.shape[0])
        pads = None
        if attention_mask is not None:  # left padding: each row's positions count from its first real token
            check_tensor("attention_mask", attention_mask, 2, floating=False)
            pads = (attention_mask.cumsum(-1) == 0).sum(-1)
        if compile:
            backend = (
                "inductor"
                if compile is True
                else check_choice("compile", compile, torch._dynamo.list_backends(exclude_tags=()))
            )
            step, states = (
                torch.compile(self.step, backend=backend, fullgraph=True),
                self.init_states(n + max_new_tokens, batch=ids.shape[0]),
            )
        out, logits = [ids], self.step(ids, states, 0, attention_mask, pads)[:, -1]
        start = torch.full((), n, dtype=torch.long, device=ids.device) if compile else n
        for t in range(max_new_tokens):
            nxt = sample(logits, temperature, top_k, generator)
            out.append(nxt)
            if t + 1 < max_new_tokens:
                logits = step(nxt, states, start, None, pads)[:, -1]
                start = start + 1  # a new tensor: the step may keep a reference to the one it was given
        return torch.cat(out, dim=1)


_UNCOUNTED = object()


def _held(state) -> int | torch.Tensor | None:
    """How many tokens a layer's decoding state holds: an int where the shapes say it (a KVCache, an empty
    state), else its tensor counter (FAVOR+, PLASH, StaticKVCache); None for a state that keeps no count (the
    decoding contract, attention.decoding, does not ask a core's state for one), which is then not checked."""
    length = getattr(state, "length", _UNCOUNTED)
    if length is _UNCOUNTED:
        return None
    return 0 if length is None else length


def _check_states(states, start, n_layers: int) -> None:
    """One state per layer, each holding exactly `start` tokens. The count is compared where it costs no host
    read: ints always; a tensor counter or a tensor start only where reads_values allows (CPU in eager mode)."""
    if not isinstance(states, (list, tuple)):
        fail("states", type(states).__name__, "a list of decoding states from init_states()", TypeError)
    if len(states) != n_layers:
        fail("states", f"{len(states)} states", f"{n_layers}, one per layer (init_states())")
    for i, st in enumerate(states):
        held = _held(st)
        if held is None:
            continue
        tensors = [t for t in (held, start) if isinstance(t, torch.Tensor)]
        if not all(reads_values(t) for t in tensors):
            continue
        held_n = int(held.reshape(-1)[0]) if isinstance(held, torch.Tensor) else held
        start_n = int(start) if isinstance(start, torch.Tensor) else start
        if held_n != start_n:
            fail("start", start_n, f"{held_n}, the number of tokens the states hold (layer {i}'s state)")


def sample(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """One token per row (B, 1) from softmax(logits / temperature) restricted to the top_k largest logits."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_k == 1:
        return logits.argmax(-1, keepdim=True)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
