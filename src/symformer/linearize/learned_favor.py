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
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_int, fail
from symformer.attention.favor import FavorAttention
from symformer.attention.softmax import float32_compute, needs_float32
from symformer.registry import ATTENTION

__all__ = ["LearnedFavorAttention"]


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
    ):
        super().__init__(
            head_dim, n_features, orthogonal, chunk_size, kernel_eps, denominator_eps, seed, block_rows, dropout, kernel
        )
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
        q, k = self._mapped(q, self.q_map, "q"), self._mapped(k, self.k_map, "k")
        return super().forward(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, state=state)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n_heads={self.n_heads}, learned q/k maps"


ATTENTION.register("favor_learned")(LearnedFavorAttention)
