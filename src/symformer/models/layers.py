"""Building blocks: norms, feed-forward parts, multi-head attention over named parts, blocks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from symformer._rng import layer_kwargs
from symformer._validation import check_int, fail, reads_values
from symformer.attention.decoding import DecodingCore, DecodingState, decoding_cores
from symformer.registry import ATTENTION, MLP, POSITIONAL


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind: str, d: int) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(d)
    if kind == "rms":
        return RMSNorm(d)
    fail("norm", kind, "'layer' or 'rms'")
    raise AssertionError


class FeedForward(nn.Module):
    """up -> activation -> down (ReLU FFNs admit positive diagonal rescaling of hidden units)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.activation = activation
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.up(x)) if self.activation == "relu" else F.gelu(self.up(x))
        return self.down(self.drop(h))


class SwiGLU(nn.Module):
    """down(silu(gate x) * up x): the gated shape the fact-storing constructions produce."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(F.silu(self.gate(x)) * self.up(x)))


def gelu_ffn(d_model: int, d_ff: int, dropout: float = 0.0) -> FeedForward:
    return FeedForward(d_model, d_ff, "gelu", dropout)


def relu_ffn(d_model: int, d_ff: int, dropout: float = 0.0) -> FeedForward:
    return FeedForward(d_model, d_ff, "relu", dropout)


MLP.register("gelu")(gelu_ffn)
MLP.register("relu")(relu_ffn)
MLP.register("swiglu")(SwiGLU)


def check_cache_use(cache, k: torch.Tensor, v: torch.Tensor) -> None:
    """A filled KV cache must match the new keys and values: batch, heads, head dims, dtype, device (metadata)."""
    if cache.k is None:
        return
    held = (cache.k.shape[0], cache.k.shape[1], cache.k.shape[-1], cache.v.shape[-1])
    new = (k.shape[0], k.shape[1], k.shape[-1], v.shape[-1])
    if held != new or cache.k.dtype != k.dtype or cache.k.device != k.device:
        fail(
            "state",
            f"a {type(cache).__name__} of batch {held[0]}, {held[1]} heads, key/value dims {held[2]}/{held[3]}, "
            f"{cache.k.dtype} on {cache.k.device}",
            f"batch {new[0]}, {new[1]} heads, key/value dims {new[2]}/{new[3]}, {k.dtype} on {k.device} (the new "
            "tokens' keys and values)",
        )


class KVCache:
    """The keys and values a softmax layer has seen, (B, H, N, Dh) each: its decoding state."""

    def __init__(self):
        self.k = self.v = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_cache_use(self, k, v)
        self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=-2)
        return self.k, self.v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v) if t is not None)


class StaticKVCache:
    """A KV cache preallocated for `max_len` tokens, (B, H, max_len, Dh) each, with its length a 0-d int64 tensor
    updated in place: every decoding step sees the same shapes and buffers, so a compiled step does not recompile
    as the context grows and a CUDA graph can capture it (KVCache's torch.cat makes a new, longer tensor each
    token). The slots past the length are masked out of the attention, so the output equals KVCache's."""

    def __init__(self, max_len: int):
        self.max_len = check_int("max_len", max_len, 1)
        self.k = self.v = None
        self.length = torch.zeros((), dtype=torch.long)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write the new keys and values after those held; returns the buffers and the boolean (Nq, max_len) mask
        of the keys each new token may read (causal over everything written so far)."""
        n = k.shape[-2]
        check_cache_use(self, k, v)
        if self.k is None:  # allocated on first use: batch, heads, dtype and device follow the keys
            b, h, _, d = k.shape
            self.k = k.new_zeros(b, h, self.max_len, d)
            self.v = v.new_zeros(b, h, self.max_len, v.shape[-1])
            self.length = self.length.to(k.device)
        # the overflow check reads the length: on the CPU in eager mode (free), never on the sync-free path, where
        # an index past the buffer is index_copy_'s own error (a device assert on a GPU)
        if reads_values(self.length) and int(self.length) + n > self.max_len:
            fail(
                "state",
                f"a StaticKVCache of {self.max_len} tokens holding {int(self.length)}, {n} more",
                "init_states(max_len=) at least the prompt plus the new tokens",
            )
        new = self.length + torch.arange(n, device=k.device)
        self.k.index_copy_(2, new, k)
        self.v.index_copy_(2, new, v)
        self.length.add_(n)  # in place: the buffer a captured graph reads
        mask = torch.arange(self.max_len, device=k.device) <= new[:, None]
        return self.k, self.v, mask

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v) if t is not None)


class MultiHeadAttention(nn.Module):
    """Projections q/k/v/o (nn.Linear, heads contiguous in the output features), an optional rotary
    positional part acting on q/k, and an attention core chosen by name."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        attention: str = "softmax",
        positional: str = "none",
        coord_dim: int = 1,
        attention_kwargs: dict | None = None,
        positional_kwargs: dict | None = None,
        dropout: float = 0.0,
        layer: int | str | None = None,
    ):
        super().__init__()
        check_int("d_model", d_model, 1)
        check_int("n_heads", n_heads, 1)
        if d_model % n_heads:
            fail("n_heads", n_heads, f"a divisor of d_model={d_model}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.rotary = None
        # layer: a given seed is made the layer's own (_rng.layer_kwargs: derived_seed("layer<layer>", seed)) for the
        # rotary part and the core alike, so no two layers share a draw; without a seed each part draws from torch's
        # global generator in turn (the one seeding rule), as the layer's nn.Linear weights do
        if getattr(POSITIONAL.get(positional), "kind", None) == "rotary":
            self.rotary = POSITIONAL.build(
                positional,
                head_dim=self.head_dim,
                coord_dim=coord_dim,
                n_heads=n_heads,
                d_model=d_model,
                **layer_kwargs(positional_kwargs or {}, layer),
            )
        self.core = ATTENTION.build(
            attention,
            head_dim=self.head_dim,
            n_heads=n_heads,
            d_model=d_model,
            **layer_kwargs(attention_kwargs or {}, layer),
        )
        self.drop = nn.Dropout(dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def init_state(self, max_len: int | None = None, batch: int | None = None):
        """An empty causal decoding state for `forward(..., state=)`: a decoding core's own (attention.decoding:
        `init_state(batch, max_len)`, constant size) or, for exact softmax cores, a KVCache (max_len given: a
        StaticKVCache of that many tokens, for a compiled or graph-captured step); ValueError for a core with
        neither."""
        if isinstance(self.core, DecodingCore):
            return self.core.init_state(batch=batch, max_len=max_len)
        if getattr(self.core, "exact_softmax", False):
            return KVCache() if max_len is None else StaticKVCache(max_len)
        cores = ", ".join(sorted(decoding_cores()))
        fail("attention", type(self.core).__name__, f"a core with a decoding state (softmax, naive, {cores})")
        raise AssertionError

    def _attend_with_state(self, q, k, v, state, scale, attn_mask=None) -> torch.Tensor:
        """Causal attention of the new tokens q, k, v continuing the sequence `state` holds (which then holds them).
        A decoding core takes a DecodingState (which kind is the core's own check); a softmax core a KV cache."""
        decoding = isinstance(self.core, DecodingCore)
        if not isinstance(state, DecodingState if decoding else (KVCache, StaticKVCache)):
            fail(
                "state",
                f"a {type(state).__name__}",
                f"the state this layer's init_state() returns for its {type(self.core).__name__} core",
            )
        if decoding:  # attn_mask: key padding of the new tokens (the core's own definition)
            return self.core(q, k, v, attn_mask=attn_mask, is_causal=True, scale=scale, state=state)
        if attn_mask is not None:
            fail("attn_mask", "a key-padding mask with a KV cache", "no mask (key padding needs a decoding core)")
        if isinstance(state, StaticKVCache):
            k, v, mask = state.append(k, v)
            return self.core(q, k, v, attn_mask=mask, scale=scale)
        k, v = state.append(k, v)
        nq, nk = q.shape[-2], k.shape[-2]
        if nq == nk:
            return self.core(q, k, v, is_causal=True, scale=scale)
        mask = None if nq == 1 else torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        return self.core(q, k, v, attn_mask=mask, scale=scale)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        context_positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        state=None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """state: a decoding state from init_state() (causal self-attention only): x holds the tokens after those
        the state has seen, `positions` theirs; the state is updated. segment_ids: (B|1, N) packed documents
        (attention.boundaries), passed to the core (self-attention only; `positions` should restart with them)."""
        src = x if context is None else context
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(src)), self._heads(self.v_proj(src))
        scale = None
        if self.rotary is not None:
            kp = positions if context is None else context_positions
            q, k = self.rotary(q, k, positions, kp)
            scale = self.rotary.scale
        if state is not None:
            if context is not None:
                fail("state", "a decoding state with cross-attention", "causal self-attention only")
            y = self._attend_with_state(q, k, v, state, scale, attn_mask)
        elif segment_ids is not None:
            if context is not None:
                fail("segment_ids", "document boundaries with cross-attention", "self-attention only")
            y = self.core(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, segment_ids=segment_ids)
        else:
            y = self.core(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
        b, h, n, dv = y.shape
        return self.drop(self.o_proj(y.transpose(1, 2).reshape(b, n, h * dv)))


class Block(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; pre- or post-norm residuals."""

    def __init__(self, cfg, cross: bool = False, layer: str | None = None):
        super().__init__()
        self.prenorm = cfg.prenorm
        mk = dict(
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            attention=cfg.attention,
            positional=cfg.positional,
            coord_dim=cfg.coord_dim,
            attention_kwargs=dict(cfg.attention_kwargs),
            positional_kwargs=dict(cfg.positional_kwargs),
            dropout=cfg.dropout,
        )
        self.attn = MultiHeadAttention(**mk, layer=layer)
        self.norm1 = make_norm(cfg.norm, cfg.d_model)
        self.cross = MultiHeadAttention(**mk, layer=None if layer is None else f"{layer}.cross") if cross else None
        self.norm_c = make_norm(cfg.norm, cfg.d_model) if cross else None
        self.mlp = MLP.build(cfg.mlp, d_model=cfg.d_model, d_ff=cfg.ff_dim, dropout=cfg.dropout)
        self.norm2 = make_norm(cfg.norm, cfg.d_model)

    def _res(self, x: torch.Tensor, norm: nn.Module, f) -> torch.Tensor:
        return x + f(norm(x)) if self.prenorm else norm(x + f(x))

    def forward(
        self,
        x,
        positions=None,
        is_causal=False,
        context=None,
        context_positions=None,
        state=None,
        attn_mask=None,
        segment_ids=None,
    ):
        """attn_mask: a boolean key-padding mask of the self-attention (with a decoding state: of the new tokens).
        segment_ids: (B|1, N) packed documents of the self-attention (attention.boundaries)."""
        x = self._res(
            x,
            self.norm1,
            lambda h: self.attn(
                h, positions, attn_mask=attn_mask, is_causal=is_causal, state=state, segment_ids=segment_ids
            ),
        )
        if self.cross is not None:
            x = self._res(
                x, self.norm_c, lambda h: self.cross(h, positions, context=context, context_positions=context_positions)
            )
        return self._res(x, self.norm2, self.mlp)
