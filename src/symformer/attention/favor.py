"""FAVOR+: softmax attention estimated with positive random features (ESPR Tier 7).

With q^ = sqrt(scale) q and k^ = sqrt(scale) k the logit is the plain dot product
alpha_ij = q^_i . k^_j (T7.2; scale = 1/sqrt(d_act) for ESPR, so sqrt(scale) = d_act^(-1/4)).
The positive feature phi_w(x) = exp(w.x - |x|^2/2) / sqrt(m) with w ~ N(0, I) gives
E[phi_w(x) phi_w(y)] = exp(x.y) / m (T7.3), hence with m features
exp(alpha_ij) ~= phi(q^_i) . phi(k^_j), and the attention output
y_i = sum_j phi(q^_i).phi(k^_j) v_j / sum_j phi(q^_i).phi(k^_j)
costs O(N m D) instead of O(N^2 D).

Stabiliser. We subtract a constant c_i from the log-features of query i and one constant c from the
log-features of all keys of a (batch, head) before exponentiating. The kernel estimate of every pair
(i, j) is then multiplied by exp(-c_i - c), a factor common to the numerator and the denominator of
y_i, so the normalised attention is unchanged exactly -- the stabiliser introduces no bias. A
constant that varied with the key j would not cancel; that is why the key stabiliser is a max over
all keys and features, never a per-key max. For the same reason the query term -|q^_i|^2/2 is a
per-query constant and is dropped altogether (it only matters when kernel_eps > 0).

performer-pytorch adds kernel_eps = 1e-4 to every feature after stabilising, and its causal form adds
1e-6 to the running key sum; both shift the estimate (by an amount that depends on the stabiliser),
so ours default to 0. Set kernel_eps=1e-4 (and denominator_eps=1e-6 for causal) to reproduce
performer-pytorch's FastAttention exactly.
"""

from __future__ import annotations

import math

import torch

from symformer._rng import check_seed, resolve_seed
from symformer._rng import generator as purpose_generator
from symformer._validation import (
    all_finite,
    check_attention_inputs,
    check_float,
    check_int,
    check_tensor,
    fail,
    reads_values,
)
from symformer.attention.boundaries import check_packed_call, document_ids
from symformer.attention.decoding import DecodingCore
from symformer.attention.favor_ops import (
    _key_features,
    _query_features,
    draw_features,
    favor_causal,
    favor_noncausal,
    favor_noncausal_streamed,
    haar_orthogonal,
    positive_features,
)
from symformer.attention.favor_state import FavorState, check_features, favor_step
from symformer.attention.packed import favor_causal_packed
from symformer.attention.softmax import (
    draw_dtype,
    float32_compute,
    key_padding_mask,
    needs_float32,
)
from symformer.kernels import kernel_mode
from symformer.kernels.favor import prepare_kernels

__all__ = [
    "FavorAttention",
    "draw_features",
    "haar_orthogonal",
    "positive_features",
    "favor_noncausal",
    "favor_noncausal_streamed",
    "favor_causal",
]


def _check_finite_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Finiteness is tested on the output: a NaN/inf in q, k or v always reaches it (an inf entry times a
    Gaussian feature gives +-inf projections; after the max is subtracted, inf - inf is NaN). Validating all
    three inputs up front would cost as much as one FAVOR+ GEMM, so the inputs are scanned only when the output
    is not finite, to name the argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not all_finite(t):
            fail(name, "a tensor with NaN or inf entries", "finite values")
    fail("q, k", "finite inputs whose random-feature estimate overflows", "inputs of moderate magnitude")


class FavorAttention(DecodingCore):
    """FAVOR+ attention core with the SDPA call shape: `forward(q, k, v, attn_mask=None, is_causal=False,
    scale=None, state=None)`, q and k (B, H, Nq|Nk, head_dim), v (B, H, Nk, Dv) -> (B, H, Nq, Dv); every head
    uses the same features.

    The estimator (Performer's FAVOR+, ESPR Tier 7, module docstring): softmax(scale q k^T) v estimated with m
    positive random features, `scale` default 1/sqrt(head_dim); `is_causal=True` by prefix sums over keys, as
    in Performer. The stabilisers (one constant per query, one per (batch, head) for the keys) cancel exactly.

    head_dim: size of q and k. n_features: m (FAVOR+ default 256 for head_dim 64-128). orthogonal:
    block-orthogonal features (ORF, rows still exactly N(0, I)). seed: the features are drawn from it (draw i of
    seed s from `_rng.generator("favor.draw<i>", s)`; None: s is drawn from torch's global generator, as nn.Linear
    draws its weights, so torch.manual_seed governs it); they are a fixed buffer between explicit `redraw()` /
    `reseed()` / `set_features()` calls, saved in the state_dict with the seed and the number of draws: the training
    schedule of redraws is train.callbacks.FeatureRedraw (performer-pytorch's ProjectionUpdater), not a counter in
    forward. chunk_size: chunk length of the causal
    prefix sums. block_rows: rows per block of the streamed non-causal form (None: ~4 MB of features per block).
    kernel_eps / denominator_eps: performer-pytorch's additive terms, 0 by default (module docstring).
    dropout: must be 0 (FAVOR+ forms no attention weights to drop).

    Ours, not the paper's:
    * attn_mask: only a boolean key-padding mask (True = keep) broadcastable to (B, H, 1, Nk) is honoured, by
      zeroing the masked keys' features; a query that sees no kept key gets the output 0; any other mask is a
      ValueError.
    * decoding: `init_state()` and `forward(..., is_causal=True, state=st)` / `step` continue a causal sequence
      at a constant cost per token (favor_state); the features must stay fixed while a state lives (a redraw
      makes the next step raise).
    * precision: 16-bit inputs (or autocast) are computed in float32 and returned in their dtype; the features
      are a float32 master, kept by `.to(torch.bfloat16)` / `.half()` and by a 16-bit default dtype.

    Args:
        head_dim (int): size of q and k.
        n_features (int): m, the random features.
        orthogonal (bool): block-orthogonal features (ORF).
        chunk_size (int): chunk length of the causal prefix sums.
        kernel_eps (float): performer-pytorch's term added to every feature (0: none).
        denominator_eps (float): performer-pytorch's term added to the causal key sum (0: none).
        seed (int | None): the seed of the feature draws.
        block_rows (int | None): rows per block of the streamed non-causal form.
        dropout (float): must be 0.0.
        kernel (str | None): the Triton switch for the causal forward and the decoding step: None (the
            SYMFORMER_KERNELS environment variable, else "auto": the kernels for CUDA tensors), "auto", "triton"
            or "torch" (kernels/_dispatch.py, docs/performance.md).

    Examples:
        >>> import torch
        >>> from symformer.attention import FavorAttention, NaiveAttention
        >>> _ = torch.manual_seed(0)
        >>> core = FavorAttention(head_dim=8, n_features=64, seed=0)
        >>> q, k, v = (0.3 * torch.randn(1, 2, 10, 8) for _ in range(3))  # (B, H, N, Dh)
        >>> out = core(q, k, v, is_causal=True)
        >>> out.shape
        torch.Size([1, 2, 10, 8])
        >>> torch.allclose(out[..., 0, :], v[..., 0, :], atol=1e-6)  # the first query reads the first key only
        True
        >>> st = core.init_state()  # decoding token by token equals the full causal forward
        >>> steps = [core(q[..., i : i + 1, :], k[..., i : i + 1, :], v[..., i : i + 1, :], is_causal=True, state=st)
        ...          for i in range(10)]
        >>> torch.allclose(torch.cat(steps, dim=-2), out, atol=1e-5)
        True
        >>> big = FavorAttention(head_dim=8, n_features=1024, seed=0)  # more features: closer to softmax attention
        >>> float((big(q, k, v) - NaiveAttention()(q, k, v)).abs().max()) < 0.02
        True
    """

    supports_causal = True
    builds_lazily = True  # fixed random features, nothing to train: a host may build it on first use

    def __init__(
        self,
        head_dim: int,
        n_features: int = 256,
        orthogonal: bool = True,
        chunk_size: int = 128,
        kernel_eps: float = 0.0,
        denominator_eps: float = 0.0,
        seed: int | None = None,
        block_rows: int | None = None,
        dropout: float = 0.0,
        kernel: str | None = None,
    ):
        super().__init__()
        # explicit, not silently dropped: FAVOR+ never forms the attention matrix, so there is no attention
        # weight to drop (Performer has none either); use the host layer's output/residual dropout instead
        if check_float("dropout", dropout, 0.0, 1.0, high_open=True) != 0.0:
            fail(
                "dropout",
                dropout,
                "0.0: FAVOR+ has no attention matrix to apply dropout to (set the "
                "attention's dropout to 0; residual and feed-forward dropout still apply)",
            )
        self.head_dim = check_int("head_dim", head_dim, 1)
        self.n_features = check_int("n_features", n_features, 1)
        self.orthogonal = bool(orthogonal)
        self.chunk_size = check_int("chunk_size", chunk_size, 1)
        self.block_rows = None if block_rows is None else check_int("block_rows", block_rows, 1)
        self.kernel_eps = check_float("kernel_eps", kernel_eps, 0.0)
        self.denominator_eps = check_float("denominator_eps", denominator_eps, 0.0)
        self.kernel = None if kernel is None else kernel_mode(kernel)
        prepare_kernels(self.kernel)  # a compiled forward can then call the Triton ops (a no-op without CUDA)
        seed = resolve_seed(seed)
        # fixed features are a buffer (a state_dict reproduces the module); seed and the number of draws are
        # buffers too, so redraws after load_state_dict continue the same deterministic sequence
        # the draw runs on the CPU (its generator's device) whatever device the constructor is called under, then
        # moves there: from_pretrained builds models on the meta device, where no value can be drawn or read
        home = torch.empty(()).device
        dtype = draw_dtype()  # the float32 master under a 16-bit default (_apply keeps it)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.long, device=home))
        self.register_buffer("draws", torch.zeros((), dtype=torch.long, device=home))
        self.register_buffer("features", self._draw(0, seed).to(device=home, dtype=dtype))
        # how often the features changed (redraw, reseed, set_features, load, move): a decoding state bound to an
        # older epoch raises (favor_state.check_features); a Python int, so compiled steps guard on it for free
        self._features_epoch = 0

    def _draw(self, index: int, seed: int | None = None) -> torch.Tensor:
        """Draw `index` of the feature sequence of `seed` (default the module's): a stream of its own per draw, so
        no two (seed, draw) pairs share one (seed * 1_000_003 + index did when index reached 1_000_003)."""
        seed = int(self.seed) if seed is None else seed
        with torch.device("cpu"):
            g = purpose_generator(f"favor.draw{index}", seed)
            return draw_features(self.n_features, self.head_dim, self.orthogonal, g)

    @torch.no_grad()
    def redraw(self) -> None:
        """Draw fresh features (deterministic given seed and the number of earlier draws)."""
        self.draws += 1
        self.features.copy_(self._draw(int(self.draws)))
        self._features_epoch += 1

    @torch.no_grad()
    def reseed(self, seed: int) -> None:
        """Restart the feature sequence from `seed` (per-layer draws: train/callbacks.FeatureRedraw gives every
        layer its own seed, as performer-pytorch draws one projection per layer).

        Args:
            seed (int): the start of the feature sequence.
        """
        if check_seed(seed) is None:
            fail("seed", seed, "an integer (the start of the feature sequence)", TypeError)
        self.seed.fill_(seed)
        self.draws.zero_()
        self.features.copy_(self._draw(0))
        self._features_epoch += 1

    @torch.no_grad()
    def set_features(self, w: torch.Tensor) -> None:
        """Use a given (n_features, head_dim) projection, e.g. performer-pytorch's `projection_matrix`.

        Args:
            w (n_features, head_dim): the feature directions, rows marginally N(0, I) for an unbiased estimate.
        """
        check_tensor("w", w, 2)
        if tuple(w.shape) != tuple(self.features.shape):
            fail("w", f"shape {tuple(w.shape)}", f"shape {tuple(self.features.shape)} (n_features, head_dim)")
        self.features.copy_(w)
        self._features_epoch += 1

    def _key_keep(self, attn_mask: torch.Tensor | None, k: torch.Tensor) -> torch.Tensor | None:
        """(B|1, H|1, Nk, 1) float keep-mask from a boolean key-padding mask, else ValueError."""
        keep = key_padding_mask(attn_mask, k, "random features")
        return None if keep is None else keep.to(k.dtype)

    def init_state(self, batch: int | None = None, max_len: int | None = None) -> FavorState:
        """An empty causal decoding state (favor_state module doc; the contract: attention.decoding); fill it with
        `forward(..., is_causal=True, state=)` or `step` (prefill and decoding). batch, max_len: accepted and
        checked (positive ints or None), not needed: the state's tensors take their final shapes at its first step
        (batch, heads, value dim, dtype and device come from those tokens) and no shape depends on the context
        length, so a compiled or graph-captured step sees static shapes either way."""
        for name, size in (("batch", batch), ("max_len", max_len)):
            if size is not None:
                check_int(name, size, 1)
        if self.kernel_eps or self.denominator_eps:
            fail(
                "kernel_eps / denominator_eps",
                (self.kernel_eps, self.denominator_eps),
                "0 for a decoding state: "
                "performer-pytorch's eps terms are added at the scale of the global stabiliser, which a running "
                "state cannot reproduce",
            )
        return FavorState()

    def step(self, q, k, v, state: FavorState, attn_mask=None, scale=None) -> torch.Tensor:
        """Causal FAVOR+ over L new tokens given the state of the earlier ones: q, k (B, H, L, Dh), v (B, H, L, Dv)
        -> (B, H, L, Dv), equal to the last L rows of the full causal forward over all tokens; `state` is updated.
        attn_mask: a boolean key-padding mask of the new keys, broadcastable to (B, H, 1, L). Per new token
        O(m (Dh + Dv)) time whatever the context; the state is O(m Dv) per head (favor_state module doc)."""
        if not isinstance(state, FavorState):
            fail("state", type(state).__name__, "a FavorState from FavorAttention.init_state()", TypeError)
        check_attention_inputs(q, k, v, finite_kv=False, finite_q=False)
        if q.shape[-1] != self.head_dim or q.shape[-2] != k.shape[-2]:
            fail(
                "q",
                f"shape {tuple(q.shape)} with {k.shape[-2]} keys",
                f"head dim {self.head_dim} and one query per new key",
            )
        check_features(state, self.features, self._features_epoch)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)
        keep = self._key_keep(attn_mask, k)
        with torch.autocast(q.device.type, enabled=False):
            y = favor_step(
                q, k, v, self.features, scale, None if keep is None else keep > 0, state, self.chunk_size, self.kernel
            )
        if reads_values(y) and not all_finite(y):  # a host read: CPU in eager mode, or value_checks("always")
            _check_finite_inputs(q, k, v)
        return y

    def _apply(self, fn, recurse=True):
        """`.to(torch.bfloat16)` / `.half()` keep the features a float32 master (16 bits would round the random
        directions themselves); the computation casts the inputs up (forward)."""
        master = self.features
        out = super()._apply(fn, recurse)
        if self.features.dtype in (torch.float16, torch.bfloat16):
            self.features = master.to(device=self.features.device, dtype=torch.float32)
        if self.features is not master:  # moved or cast: a live decoding state holds the old buffer
            self._features_epoch += 1
        return out

    def forward(
        self,
        q,
        k,
        v,
        attn_mask=None,
        is_causal=False,
        scale=None,
        state: FavorState | None = None,
        cu_seqlens=None,
        segment_ids=None,
    ):
        """SDPA's call; with `state` (causal only) the queries continue the sequence the state holds (`step`).

        Args:
            q (B, H, Nq, Dh): queries, Dh = head_dim; 16-bit inputs are computed in float32.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dv): values, q's dtype.
            attn_mask (B, H, 1, Nk): a boolean key-padding mask (True = keep), broadcastable; any other mask is a
                ValueError.
            is_causal (bool): prefix sums over the keys (Nq = Nk).
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).
            state (FavorState | None): a decoding state from `init_state()` (is_causal=True), updated in place.
            cu_seqlens ((D + 1,) or (B, D + 1)): packed documents, flash-attention's cumulative lengths
                (attention.boundaries); each document attends to itself only (causal).
            segment_ids (B, N): packed documents as one id per token (instead of cu_seqlens).

        Returns:
            out (B, H, Nq, Dv): the FAVOR+ estimate of softmax attention, in q's dtype.
        """
        if cu_seqlens is not None or segment_ids is not None:
            return self._packed(q, k, v, attn_mask, is_causal, scale, state, cu_seqlens, segment_ids)
        if state is not None:
            if not is_causal:
                fail("is_causal", is_causal, "True with a decoding state")
            return self.step(q, k, v, state, attn_mask, scale)
        if needs_float32(q, k, v):  # 16-bit inputs or autocast: exponential features and sums in float32
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale)
        check_attention_inputs(q, k, v, finite_kv=False, finite_q=False)  # finiteness: the output is tested
        if q.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]}", f"the head_dim {self.head_dim} the features were drawn for")
        if is_causal and q.shape[-2] != k.shape[-2]:
            fail("is_causal", f"True with {q.shape[-2]} queries and {k.shape[-2]} keys", "equal query and key lengths")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)
        keep = self._key_keep(attn_mask, k)
        w = self.features.to(q.dtype)
        # T7.2: q^ = sqrt(scale) q, k^ = sqrt(scale) k, so q^.k^ is the logit exactly
        if not is_causal and self.kernel_eps == 0:
            y = favor_noncausal_streamed(q, k, v, w, scale, keep, self.denominator_eps, self.block_rows)
        else:
            qf = _query_features(q, w, scale, self.kernel_eps)
            one_chunk = is_causal and k.shape[-2] <= self.chunk_size  # favor_causal then multiplies by phi(K)^T
            kf = _key_features(k, w, scale, self.kernel_eps, self.denominator_eps, feature_major=one_chunk)
            if keep is not None:
                kf = kf * keep
            if is_causal:
                y = favor_causal(qf, kf, v, self.chunk_size, self.denominator_eps, keep is not None, self.kernel)
            else:
                y = favor_noncausal(qf, kf, v, self.denominator_eps)
        # a cheap test on the output where reading it is free (_validation.reads_values); the culprit is named only
        # when it fails
        if reads_values(y) and not all_finite(y):
            _check_finite_inputs(q, k, v)
        return y

    def _packed(self, q, k, v, attn_mask, is_causal, scale, state, cu_seqlens, segment_ids) -> torch.Tensor:
        """forward over packed rows: each document's prefix sums start at its first token (attention.packed)."""
        check_packed_call(q, k, is_causal, state, "FAVOR+")
        check_attention_inputs(q, k, v, finite_kv=False, finite_q=False)
        doc = document_ids(cu_seqlens, segment_ids, q.shape[0], q.shape[-2])
        if needs_float32(q, k, v):  # 16 bits: exponential features and sums in float32
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale, segment_ids=doc)
        if q.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]}", f"the head_dim {self.head_dim} the features were drawn for")
        if self.denominator_eps:
            fail("denominator_eps", self.denominator_eps, "0 with document boundaries (it is added per chunk)")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)
        keep = self._key_keep(attn_mask, k)
        w = self.features.to(q.dtype)
        qf = _query_features(q, w, scale, self.kernel_eps)
        kf = _key_features(k, w, scale, self.kernel_eps)  # one stabiliser per (batch, head): cancels per document
        if keep is not None:
            kf = kf * keep
        y = favor_causal_packed(qf, kf, v, doc, self.chunk_size, keep is not None)
        if reads_values(y) and not all_finite(y):
            _check_finite_inputs(q, k, v)
        return y

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._features_epoch += 1  # the features were copied in place: live decoding states are stale

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, n_features={self.n_features}, orthogonal={self.orthogonal}"
