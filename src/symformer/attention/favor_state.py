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

Accelerators (docs/design.md, "Conventions"): the state's tensors have static shapes from its first step on
(kvs and c never grow; the token count `length` is a 0-dim tensor, not a Python int that would make dynamo
recompile every step), a step reads no tensor value on the host and branches only on shapes, and a one-token step
without autograd updates the tensors in place, so a CUDA graph captured on it replays on the same buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from symformer._torch_compat import is_compiling
from symformer._validation import fail
from symformer.kernels import use_kernel
from symformer.kernels.favor import decode_step, unsupported_decode


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass
class FavorState:
    """The decoding state of one FAVOR+ layer: kvs (B, H, m, Dv + 1) = [S, z] scaled by exp(-c), c (B, H, 1, 1) the
    running maximum log-feature (-inf until a kept key arrives), length (a 0-dim int64 tensor) the number of tokens
    consumed (padded ones included), and the identity, version and epoch of the feature buffer it was built with.
    `proj` caches the scaled projections of that buffer (favor_step), so a decoding step does not rebuild them."""

    kvs: torch.Tensor | None = None
    c: torch.Tensor | None = None
    length: torch.Tensor | None = None
    features_id: int | None = None
    features_version: int | None = None
    features_epoch: int | None = None
    proj: tuple | None = None

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


def check_features(state: FavorState, features: torch.Tensor, epoch: int) -> None:
    """Bind a new state to the feature buffer, or raise if the buffer changed since (redraw, reseed, load, move).
    `epoch` is FavorAttention's count of those changes; the buffer's `_version` (which also sees a direct in-place
    edit) is read only in eager mode: dynamo cannot trace it, and a compiled step must not graph-break."""
    version = None if is_compiling() else features._version
    if state.features_id is None:
        state.features_id, state.features_version, state.features_epoch = id(features), version, epoch
        return
    edited = version is not None and state.features_version is not None and state.features_version != version
    if state.features_epoch != epoch or edited:
        fail(
            "state",
            "a FAVOR+ decoding state built with features that have since been redrawn, reseeded, loaded or moved",
            "a new state (FavorAttention.init_state) after any change of the features: its sums "
            "phi(K)^T V are in the old features",
        )
    if state.features_id != id(features):
        fail(
            "state",
            "a FAVOR+ decoding state built by another layer or model (other feature directions)",
            "the state this layer's FavorAttention.init_state() returned: its sums phi(K)^T V are in that layer's "
            "features",
        )


def check_state_use(state: FavorState, q: torch.Tensor, v: torch.Tensor, m: int, acc: torch.dtype) -> None:
    """A filled state must match the new tokens: batch, heads, features, value dim, dtype and device (metadata
    only: no host read). A state of batch 1 would otherwise broadcast silently over a larger batch."""
    if state.kvs is None:
        return
    b, h = q.shape[:2]
    want = (b, h, m, v.shape[-1] + 1)
    if tuple(state.kvs.shape) != want:
        fail(
            "state",
            f"a FAVOR+ state of batch {state.kvs.shape[0]}, {state.kvs.shape[1]} heads, {state.kvs.shape[2]} "
            f"features and value dim {state.kvs.shape[3] - 1}",
            f"batch {b}, {h} heads, {m} features and value dim {v.shape[-1]} (the new tokens' q {tuple(q.shape)}, "
            f"v {tuple(v.shape)}); select() / repeat_interleave() it to change the batch",
        )
    if state.kvs.dtype != acc or state.kvs.device != q.device:
        fail(
            "state",
            f"a FAVOR+ state in {state.kvs.dtype} on {state.kvs.device}",
            f"{acc} on {q.device} (the accumulation dtype and device of q: {q.dtype} on {q.device})",
        )


def _projections(state: FavorState, w: torch.Tensor, scale: float, acc: torch.dtype) -> tuple:
    """(sqrt(scale) w)^T (Dh, m) and [sqrt(scale) w, -1]^T (Dh + 1, m), cached on the state: they depend only on the
    features the state is bound to (check_features), the scale and the accumulation dtype."""
    if state.proj is None or state.proj[0] != (scale, acc, w.device):
        ws = w.to(acc) * math.sqrt(scale)
        wx = torch.cat((ws, -ws.new_ones(ws.shape[0], 1)), dim=-1)
        state.proj = ((scale, acc, w.device), ws.T.contiguous(), wx.T.contiguous())  # (Dh, m), (Dh + 1, m)
    return state.proj[1], state.proj[2]


def _allocate(state: FavorState, q: torch.Tensor, v: torch.Tensor, m: int, acc: torch.dtype) -> None:
    """The empty state's tensors at their final shapes: [S, z] = 0, c = -inf (no kept key), length 0."""
    if state.kvs is None:
        b, h = q.shape[:2]
        state.kvs = q.new_zeros(b, h, m, v.shape[-1] + 1, dtype=acc)
        state.c = q.new_full((b, h, 1, 1), float("-inf"), dtype=acc)
    if state.length is None:
        state.length = torch.zeros((), dtype=torch.long, device=q.device)


def _log_features(k: torch.Tensor, wx_t: torch.Tensor, scale: float, keep: torch.Tensor | None) -> torch.Tensor:
    """log phi(k^_j) + log sqrt(m) = [k, |k^|^2 / 2] . [sqrt(scale) w, -1] (T7.1-T7.2); a padded key: -inf."""
    logf = torch.matmul(torch.cat((k, (0.5 * scale) * k.square().sum(-1, keepdim=True)), dim=-1), wx_t)
    return logf if keep is None else logf.masked_fill(~keep, float("-inf"))


def _token_step(qf, logf, vv, state: FavorState, inplace: bool) -> torch.Tensor:
    """One new token: [S, z] <- [S, z] exp(c_old - c_new) + phi(k^) [v, 1], c <- max(c, max_l log phi_l), and the
    query reads the updated sums (its own key included, j <= i). Shapes only, no host read; in place when
    `inplace`. qf (B, H, 1, m), logf (B, H, 1, m), vv (B, H, 1, Dv + 1)."""
    c_new = torch.maximum(state.c, logf.amax(dim=-1, keepdim=True))
    shift = c_new.nan_to_num(neginf=0.0)  # c = -inf: no kept key so far, shift by 0 (features exp(-inf) = 0)
    f = torch.exp(logf - shift).transpose(-1, -2)  # (B, H, m, 1)
    decay = torch.exp(state.c - shift)  # <= 1; 0 while nothing was kept (then kvs is 0 too)
    if inplace:
        kvs = state.kvs.mul_(decay).addcmul_(f, vv)
        state.c.copy_(c_new)
    else:
        kvs = (state.kvs * decay).addcmul(f, vv)
        state.kvs, state.c = kvs, c_new
    return torch.matmul(qf, kvs)


def _chunk_step(qb, logf, vb, state: FavorState) -> torch.Tensor:
    """A chunk of new tokens (prefill): the in-chunk triangle plus the earlier keys' sums, as favor_causal."""
    c_new = torch.maximum(state.c, logf.amax(dim=(-1, -2), keepdim=True))
    shift = c_new.nan_to_num(neginf=0.0)
    f = torch.exp(logf - shift)  # padded keys: exp(-inf) = 0
    old = state.kvs * torch.exp(state.c - shift)
    o = torch.matmul(qb, f.transpose(-1, -2)).tril() @ vb + qb @ old  # keys of this chunk up to each query
    state.kvs, state.c = old + f.transpose(-1, -2) @ vb, c_new  # (B, H, m, L) @ (B, H, L, Dv + 1)
    return o


def favor_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    scale: float,
    keep: torch.Tensor | None,
    state: FavorState,
    chunk: int,
    kernel: str | None = None,
) -> torch.Tensor:
    """Outputs of L new queries q (B, H, L, Dh) reading every earlier key (in `state`) and the new keys up to
    themselves; `state` then includes the new keys. keep: (B|1, H|1, L, 1) boolean or None. Cost O(L m (Dh + Dv))
    plus O(L chunk m) for the in-chunk triangle: per decoded token (L = 1) independent of the context. kernel: the
    Triton switch for one-token steps (use_kernel; kernels/favor.decode_step fuses _token_step)."""
    acc = accumulation_dtype(q.dtype)
    ws_t, wx_t = _projections(state, w, scale, acc)
    check_state_use(state, q, v, ws_t.shape[-1], acc)
    _allocate(state, q, v, ws_t.shape[-1], acc)
    qf = torch.softmax(torch.matmul(q.to(acc), ws_t), dim=-1)  # phi(q^_i) up to a per-query constant (cancels)
    vv = torch.nn.functional.pad(v.to(acc), (0, 1), value=1.0)  # [v, 1]: numerator and denominator in one GEMM
    n = q.shape[-2]
    if n == 1:
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, state.kvs))
        if use_kernel("favor_decode", (q, k, v, state.kvs), kernel, unsupported_decode(q, state.kvs, keep, grad)):
            state.length.add_(1)
            return decode_step(q, k, v, ws_t, state.kvs, state.c, scale)
        o = _token_step(qf, _log_features(k.to(acc), wx_t, scale, keep), vv, state, inplace=not grad)
    else:
        out = []
        for s in range(0, n, chunk):
            kb = k[..., s : s + chunk, :].to(acc)
            logf = _log_features(kb, wx_t, scale, None if keep is None else keep[..., s : s + chunk, :])
            out.append(_chunk_step(qf[..., s : s + chunk, :], logf, vv[..., s : s + chunk, :], state))
        o = out[0] if len(out) == 1 else torch.cat(out, dim=-2)
    state.length.add_(n)
    # no kept key yet: numerator and denominator are 0, and 0 / tiny = 0 (one op; where(den > 0, den, 1) takes three);
    # a positive denominator below the smallest normal number only comes from underflow, with no precision left
    y = o[..., :-1] / o[..., -1:].clamp_min(torch.finfo(acc).tiny)
    return y.to(v.dtype)
