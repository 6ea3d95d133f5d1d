"""FAVOR+ with a learned feature map in front of its random features: the attention core "favor_learned".

FAVOR+'s random features are fixed by design (ESPR Tier 7: phi_w(x) = exp(w.x - |x|^2/2) / sqrt(m), w ~ N(0, I),
an unbiased estimate of exp(q.k), T7.3), so a FAVOR+ core has nothing that attention transfer could train. This core
puts a per-head linear map A_h (queries) and B_h (keys) in front of the features, as Hedgehog and LoLCATs put a
small trainable feature map per head in front of their kernels:

    y_i = sum_j phi(A_h q_i) . phi(B_h k_j) v_j / sum_j phi(A_h q_i) . phi(B_h k_j)

with A_h = B_h = I at construction, so an untrained "favor_learned" core is exactly the FAVOR+ core with the same
features. Trained, it no longer estimates softmax(q k^T) of the model's own queries and keys but of the mapped ones:
this departs from the Performer paper (whose features are the only map, drawn once), on purpose, so that a
linearized model can match the softmax attention it replaces.

Everything else is FavorAttention's: the features, their seed and redraws, key-padding masks, the causal prefix
sums, 16-bit inputs computed in float32, and the decoding state (attention.decoding's contract), so the core runs in
`hf.configure(model, attention="favor_learned")`, HF `generate()` with constant-size states and `CausalLM` with no
other edit. Importing symformer.linearize registers it (ATTENTION "favor_learned"); a saved model with these cores
reloads with `hf.from_pretrained` in a process that imported it.

feature_map="hedgehog" swaps FAVOR+'s exponential features for Hedgehog's (Zhang et al. 2024, "The Hedgehog & the
Porcupine": a trainable per-head map, then a softmax over the feature dimensions, both signs) taken over FAVOR+'s
random projections of the mapped inputs:

    phi(x) = [softmax(x^ A_h W^T), softmax(-x^ A_h W^T)]   (2m features; W (m, Dh): the fixed random directions;
                                                          x^ = sqrt(scale) x, a row)

softmax_l(w_l.x) = exp(w_l.x) / sum_j exp(w_j.x), and sum_j exp(w_j.x) ~= m exp(|x|^2/2) for Gaussian w, so at the
identity maps each half is close to FAVOR+'s positive feature exp(w.x - |x|^2/2) / m with +w and with -w: the core
starts near softmax attention, as the plain map does. It departs from the Performer paper twice: the map is
learned, and each token's features are normalised by their own sum (a key's weight is then no longer an unbiased
estimate). The features are bounded by 1, so no stabiliser is needed, and the causal decoding state is plain
running sums [sum phi(k) v^T, sum phi(k)] (FavorState with kvs of 2m rows; c unused): exact, constant size.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from symformer._validation import check_choice, check_float, check_int, fail
from symformer.attention.favor import FavorAttention
from symformer.attention.favor_ops import _key_features, _query_features, _with_ones, favor_causal, favor_noncausal
from symformer.attention.favor_state import (
    FavorState,
    accumulation_dtype,
    check_features,
    check_state_use,
)
from symformer.attention.softmax import float32_compute, needs_float32
from symformer.registry import ATTENTION

__all__ = ["FEATURE_MAPS", "LearnedFavorAttention", "hedgehog_features"]

#: feature_map -> what follows the learned per-head maps: FAVOR+'s exponential features, or Hedgehog's softmax over
#: the random projections (both signs)
FEATURE_MAPS = ("favor", "hedgehog")


def hedgehog_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Hedgehog's feature map over random projections: [softmax(x w^T), softmax(-x w^T)] over the feature axis.

    Args:
        x (..., Dh): the mapped, scaled inputs (sqrt(scale) x A_h).
        w (m, Dh): the random directions.

    Returns:
        (..., 2m): positive features, each half summing to 1.

    Example:
        >>> import torch
        >>> f = hedgehog_features(torch.randn(2, 3, 4), torch.randn(8, 4))
        >>> f.shape, bool(torch.allclose(f.sum(-1), torch.full((2, 3), 2.0)))
        (torch.Size([2, 3, 16]), True)
    """
    p = torch.matmul(x, w.transpose(-1, -2))
    return torch.cat((torch.softmax(p, dim=-1), torch.softmax(-p, dim=-1)), dim=-1)


def _scale(q: torch.Tensor, scale: float | None) -> float:
    """The logit scale: 1/sqrt(Dh) for None, else a positive float (ValueError naming scale)."""
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_float("scale", scale, 0.0, low_open=True)


class LearnedFavorAttention(FavorAttention):
    """FAVOR+ after a learned per-head linear map of the queries and the keys (module docstring), identity at init.

    The call is FavorAttention's: `forward(q, k, v, attn_mask=None, is_causal=False, scale=None, state=None)`,
    q and k (B, H, N, head_dim) with H = n_heads (the host's query heads: a grouped-query host repeats its keys per
    query head before the core, so each query head maps its own copy), v (B, H, Nk, Dv).

    Args:
        head_dim (int): size of q and k.
        n_heads (int): the heads the maps are learned for (one (head_dim, head_dim) matrix per head for q and for k).
        n_features (int): m, the random features (FavorAttention's options follow).
        orthogonal (bool): block-orthogonal features.
        chunk_size (int): chunk length of the causal prefix sums.
        kernel_eps (float): performer-pytorch's term added to every feature.
        denominator_eps (float): performer-pytorch's term added to the causal key sum.
        seed (int | None): the seed of the feature draws.
        block_rows (int | None): rows per block of the streamed non-causal form.
        dropout (float): must be 0.0.
        kernel (str | None): FavorAttention's Triton switch (None, "auto", "triton" or "torch").
        feature_map (str): "favor" (FAVOR+'s exponential features) or "hedgehog" (module docstring; 2 n_features
            features; kernel_eps and denominator_eps must be 0).

    Example:
        >>> import torch
        >>> from symformer.attention import FavorAttention
        >>> core = LearnedFavorAttention(head_dim=8, n_heads=2, n_features=32, seed=0)
        >>> q, k, v = (0.3 * torch.randn(1, 2, 6, 8) for _ in range(3))
        >>> plain = FavorAttention(head_dim=8, n_features=32, seed=0)
        >>> torch.allclose(core(q, k, v, is_causal=True), plain(q, k, v, is_causal=True))  # identity at init
        True
    """

    builds_lazily = False  # trainable maps: configured before the forward, so the optimizer sees them

    def __init__(
        self,
        head_dim: int,
        n_heads: int = 1,
        n_features: int = 256,
        orthogonal: bool = True,
        chunk_size: int = 128,
        kernel_eps: float = 0.0,
        denominator_eps: float = 0.0,
        seed: int | None = None,
        block_rows: int | None = None,
        dropout: float = 0.0,
        kernel: str | None = None,
        feature_map: str = "favor",
    ):
        super().__init__(
            head_dim, n_features, orthogonal, chunk_size, kernel_eps, denominator_eps, seed, block_rows, dropout, kernel
        )
        self.feature_map = check_choice("feature_map", feature_map, FEATURE_MAPS)
        if feature_map == "hedgehog" and (kernel_eps or denominator_eps):
            fail("kernel_eps / denominator_eps", (kernel_eps, denominator_eps), "0 with feature_map='hedgehog'")
        self.n_heads = check_int("n_heads", n_heads, 1)
        eye = torch.eye(self.head_dim).expand(self.n_heads, -1, -1).clone()
        self.q_map = nn.Parameter(eye.clone())  # (H, Dh, Dh), acting as x @ A_h
        self.k_map = nn.Parameter(eye)

    def _mapped(self, x: torch.Tensor, weight: torch.Tensor, name: str) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != self.n_heads:
            fail(name, f"shape {tuple(x.shape)}", f"(B, {self.n_heads}, N, {self.head_dim}): one map per head")
        dt = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        return torch.einsum("bhnd,hde->bhne", x.to(dt), weight.to(dt)).to(x.dtype)

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None, state=None):
        """FavorAttention.forward on (q A_h, k B_h).

        Args:
            q (B, H, Nq, Dh): queries.
            k (B, H, Nk, Dh): keys.
            v (B, H, Nk, Dv): values.
            attn_mask (B, H, 1, Nk): a boolean key-padding mask (True = keep), or None.
            is_causal (bool): causal prefix sums.
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).
            state (FavorState | None): a decoding state from `init_state()` (is_causal=True).

        Returns:
            out (B, H, Nq, Dv): in q's dtype.
        """
        if state is None and needs_float32(q, k, v):  # once in float32 (the maps too), not mapped twice
            return float32_compute(self, q, k, v, attn_mask, is_causal, scale)
        if self.feature_map == "hedgehog":
            return self._hedgehog(q, k, v, attn_mask, is_causal, scale, state)
        if state is None:  # with a state FavorAttention.forward calls self.step, which maps q and k itself
            q, k = self._mapped(q, self.q_map, "q"), self._mapped(k, self.k_map, "k")
        return super().forward(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, state=state)

    def step(self, q, k, v, state: FavorState, attn_mask=None, scale=None) -> torch.Tensor:
        """FavorAttention.step on (q A_h, k B_h): the maps apply here, so a caller of `step` and one of
        `forward(state=...)` get the same rows (the last L of the full causal forward)."""
        if self.feature_map == "hedgehog":
            return self._hedgehog(q, k, v, attn_mask, True, scale, state)
        q, k = self._mapped(q, self.q_map, "q"), self._mapped(k, self.k_map, "k")
        return super().step(q, k, v, state, attn_mask=attn_mask, scale=scale)

    def _hedgehog_features(self, x, weight, scale: float, name: str) -> torch.Tensor:
        """phi(sqrt(scale) x A_h) in the accumulation dtype (float32 for 16-bit inputs, else x's)."""
        acc = accumulation_dtype(x.dtype)
        xm = self._mapped(x.to(acc), weight, name) * math.sqrt(scale)
        return hedgehog_features(xm, self.features.to(acc))

    def _hedgehog(self, q, k, v, attn_mask, is_causal, scale, state):
        """The forward with feature_map="hedgehog": FAVOR+'s causal / non-causal sums over Hedgehog's features."""
        if q.shape[-1] != self.head_dim:
            fail("q", f"head dim {q.shape[-1]}", f"the head_dim {self.head_dim} the features were drawn for")
        if is_causal and q.shape[-2] != k.shape[-2]:
            fail("is_causal", f"True with {q.shape[-2]} queries and {k.shape[-2]} keys", "equal query and key lengths")
        scale = _scale(q, scale)
        qf = self._hedgehog_features(q, self.q_map, scale, "q")
        kf = self._hedgehog_features(k, self.k_map, scale, "k")
        keep = self._key_keep(attn_mask, k)
        if keep is not None:
            kf = kf * keep.to(kf.dtype)  # a padded key adds nothing to the sums
        if state is not None:
            if not is_causal:
                fail("is_causal", is_causal, "True with a decoding state")
            return self._hedgehog_step(qf, kf, v, state)
        if is_causal:
            y = favor_causal(qf, kf, v.to(qf.dtype), self.chunk_size, 0.0, keep is not None, self.kernel)
        else:
            y = favor_noncausal(qf, kf, v.to(qf.dtype))
        return y.to(v.dtype)

    def _hedgehog_step(self, qf, kf, v, state: FavorState) -> torch.Tensor:
        """L new tokens against the running sums kvs = [sum_j phi(k_j) v_j^T, sum_j phi(k_j)] (2m, Dv + 1): the
        in-chunk triangle plus the earlier keys, chunk by chunk; O(m (Dh + Dv)) per decoded token. No host read;
        without autograd the sums are updated in place (a captured CUDA graph replays on the same buffers)."""
        if not isinstance(state, FavorState):
            fail("state", type(state).__name__, "a FavorState from LearnedFavorAttention.init_state()", TypeError)
        check_features(state, self.features, self._features_epoch)
        acc = qf.dtype
        check_state_use(state, qf, v, qf.shape[-1], acc)
        if state.kvs is None:  # c (FAVOR+'s running stabiliser) stays 0: the features need none
            state.kvs = qf.new_zeros(*qf.shape[:2], qf.shape[-1], v.shape[-1] + 1)
            state.c = qf.new_zeros(*qf.shape[:2], 1, 1)
        if state.length is None:
            state.length = torch.zeros((), dtype=torch.long, device=qf.device)
        vv = _with_ones(v.to(acc))  # [v, 1]: numerator and denominator together
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (qf, kf, v, state.kvs))
        out = []
        for s in range(0, qf.shape[-2], self.chunk_size):
            qb, kb, vb = (t[..., s : s + self.chunk_size, :] for t in (qf, kf, vv))
            out.append(torch.matmul(qb, kb.transpose(-1, -2)).tril() @ vb + qb @ state.kvs)
            new = kb.transpose(-1, -2) @ vb
            state.kvs = state.kvs + new if grad else state.kvs.add_(new)
        o = out[0] if len(out) == 1 else torch.cat(out, dim=-2)
        state.length.add_(qf.shape[-2])
        # no kept key yet: numerator and denominator are 0, and 0 / tiny = 0 (favor_state's rule)
        return (o[..., :-1] / o[..., -1:].clamp_min(torch.finfo(acc).tiny)).to(v.dtype)

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """The causal attention weights this core applies, formed explicitly: a_ij = phi(q_i).phi(k_j) /
        sum_{l<=i} phi(q_i).phi(k_l) for j <= i, else 0, so that a @ v equals forward(q, k, v, is_causal=True).
        Hedgehog's stage-1 loss (linearize.transfer.weights_loss) needs them; O(N^2) memory, for training only.

        The FAVOR+ map's stabilisers cancel here: a per-query constant in the numerator and the denominator, and
        one constant per (batch, head) over all keys.

        Args:
            q (B, H, N, Dh): queries, as the core receives them.
            k (B, H, N, Dh): keys.
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).

        Returns:
            (B, H, N, N): rows summing to 1, in the accumulation dtype (float32 for 16-bit inputs).
        """
        if self.kernel_eps or self.denominator_eps:
            fail("kernel_eps / denominator_eps", (self.kernel_eps, self.denominator_eps), "0 for explicit weights")
        if q.shape[-2] != k.shape[-2]:
            fail("k", f"{k.shape[-2]} keys for {q.shape[-2]} queries", "equal lengths (causal weights)")
        scale = _scale(q, scale)
        if self.feature_map == "hedgehog":
            qf = self._hedgehog_features(q, self.q_map, scale, "q")
            kf = self._hedgehog_features(k, self.k_map, scale, "k")
        else:  # the forward's own stabilised features (T7.2), in the accumulation dtype
            acc = accumulation_dtype(q.dtype)
            w = self.features.to(acc)
            qf = _query_features(self._mapped(q.to(acc), self.q_map, "q"), w, scale, 0.0)
            kf = _key_features(self._mapped(k.to(acc), self.k_map, "k"), w, scale, 0.0)
        s = torch.matmul(qf, kf.transpose(-1, -2)).tril()
        return s / s.sum(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n_heads={self.n_heads}, learned q/k maps, feature_map={self.feature_map}"


ATTENTION.register("favor_learned")(LearnedFavorAttention)
