"""Causal FAVOR+ as a recurrent state: constant cost per decoded token, equal to the full causal forward.

Per (batch, head) the state holds S = sum_j phi(k^_j) v_j^T (m x Dv) and z = sum_j phi(k^_j) (m), stored together
as [S, z] (m x (Dv + 1)), and the stabiliser c they are scaled by. The full causal forward (favor.favor_causal)
scales every key feature by ONE constant per (batch, head), the maximum log-feature over all keys; a decoding state
cannot know a later key's log-feature, so c here is a running maximum: when a new chunk raises it, [S, z] is
multiplied by exp(c_old - c_new) (favor_noncausal_streamed does the same over key blocks). Every key then ends up
scaled by the same exp(-c_final), a factor common to numerator and denominator of every query (favor module doc):
the outputs equal the full forward's up to rounding, with no approximation.

A padded key (keep False) adds nothing to S or z and does not move c. A query that has no kept key yet (a
left-padded row before its first token) gets the output 0 (the full forward rolls such rows away; their outputs
are never read). The state is kept in float32 for 16-bit inputs (the features are exponentials and z is a sum of
N of them) and float64 for float64 inputs. It is tied to the features it was built with: `FavorAttention.redraw`,
`reseed`, `set_features` or a `load_state_dict` after the state was created make the next step raise, since the
sums of old features cannot be re-expressed in new ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from symformer._validation import fail


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass
class FavorState:
    """The decoding state of one FAVOR+ layer: kvs (B, H, m, Dv + 1) = [S, z] scaled by exp(-c), c (B, H, 1, 1) the
    running maximum log-feature (-inf until a kept key arrives), length the number of tokens consumed (padded ones
    included), and the identity and version of the feature buffer it was built with."""

    kvs: torch.Tensor | None = None
    c: torch.Tensor | None = None
    length: int = 0
    features_id: int | None = None
    features_version: int | None = None

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.kvs, self.c) if t is not None)

    def select(self, index: torch.Tensor) -> None:
        """Keep / reorder batch rows (beam search, finished sequences)."""
        if self.kvs is not None:
            self.kvs, self.c = (
                self.kvs.index_select(0, index.to(self.kvs.device)),
                self.c.index_select(0, index.to(self.c.device)),
            )

    def repeat_interleave(self, repeats: int) -> None:
        if self.kvs is not None:
            self.kvs, self.c = self.kvs.repeat_interleave(repeats, 0), self.c.repeat_interleave(repeats, 0)


def check_features(state: FavorState, features: torch.Tensor) -> None:
    """Bind a new state to the feature buffer, or raise if the buffer changed since (redraw, reseed, load)."""
    if state.features_id is None:
        state.features_id, state.features_version = id(features), features._version
        return
    if state.features_id != id(features) or state.features_version != features._version:
        fail(
            "state",
            "a FAVOR+ decoding state built with features that have since been redrawn, reseeded, loaded or moved",
            "a new state (FavorAttention.init_state) after any change of the features: its sums "
            "phi(K)^T V are in the old features",
        )


def favor_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    scale: float,
    keep: torch.Tensor | None,
    state: FavorState,
    chunk: int,
) -> torch.Tensor:
    """Outputs of L new queries q (B, H, L, Dh) reading every earlier key (in `state`) and the new keys up to
    themselves; `state` then includes the new keys. keep: (B|1, H|1, L, 1) boolean or None. Cost O(L m (Dh + Dv))
    plus O(L chunk m) for the in-chunk triangle: per decoded token (L = 1) independent of the context."""
    acc = accumulation_dtype(q.dtype)
    ws = w.to(acc) * math.sqrt(scale)
    wx = torch.cat((ws, -ws.new_ones(ws.shape[0], 1)), dim=-1)  # [sqrt(scale) w, -1]
    qf = torch.softmax(torch.matmul(q.to(acc), ws.T), dim=-1)  # phi(q^_i) up to a per-query constant (cancels)
    vv = v.to(acc)
    vv = torch.cat((vv, vv.new_ones(*vv.shape[:-1], 1)), dim=-1)
    out = []
    for s in range(0, q.shape[-2], chunk):
        kb = k[..., s : s + chunk, :].to(acc)
        # log phi(k^_j) + log sqrt(m) = [k, |k^|^2 / 2] . [sqrt(scale) w, -1]
        logf = torch.matmul(torch.cat((kb, (0.5 * scale) * kb.square().sum(-1, keepdim=True)), dim=-1), wx.T)
        if keep is not None:
            logf = logf.masked_fill(~keep[..., s : s + chunk, :], float("-inf"))
        c_new = logf.amax(dim=(-1, -2), keepdim=True)
        if state.c is not None:
            c_new = torch.maximum(state.c, c_new)
        shift = torch.where(torch.isinf(c_new), torch.zeros_like(c_new), c_new)  # -inf: no kept key so far
        f = torch.exp(logf - shift)  # padded keys: exp(-inf) = 0
        qb, vb = qf[..., s : s + chunk, :], vv[..., s : s + chunk, :]
        o = torch.matmul(qb, f.transpose(-1, -2)).tril() @ vb  # keys of this chunk up to each query
        kvs = f.transpose(-1, -2) @ vb
        if state.kvs is not None:  # exp(c_old - shift) <= 1; 0 while nothing was kept (then kvs is 0 too)
            old = state.kvs * torch.exp(state.c - shift)
            o, kvs = o + qb @ old, kvs + old
        out.append(o)
        state.kvs, state.c = kvs, c_new
    state.length += q.shape[-2]
    o = out[0] if len(out) == 1 else torch.cat(out, dim=-2)
    den = o[..., -1:]
    y = o[..., :-1] / torch.where(den > 0, den, torch.ones_like(den))  # no kept key yet: 0 / 1 = 0
    return y.to(v.dtype)
