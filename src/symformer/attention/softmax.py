"""Exact softmax attention: PyTorch SDPA, and a naive explicit reference."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from symformer._torch_compat import autocast_enabled
from symformer._validation import check_attention_inputs, check_tensor, fail
from symformer.attention.boundaries import block_causal_mask, document_ids


class AttentionCore(nn.Module):
    """Interface of every attention variant: the call shape of F.scaled_dot_product_attention.

    Examples:
        >>> import torch
        >>> from symformer.attention import AttentionCore, NaiveAttention, SoftmaxAttention
        >>> from symformer.registry import ATTENTION
        >>> q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
        >>> core = ATTENTION.build("softmax")  # a core by its registered name, as the models build them
        >>> isinstance(core, AttentionCore), core(q, k, v).shape  # (B, H, Nq, Dv)
        (True, torch.Size([2, 3, 5, 4]))
        >>> core.exact_softmax, torch.allclose(core(q, k, v), NaiveAttention()(q, k, v), atol=1e-6)
        (True, True)
    """

    supports_causal = True
    #: computes softmax(q k^T * scale) v exactly: the only cores whose output is invariant under GL(d_h) acting
    #: on q, k (teleportation paper Sec. 3); approximations (FAVOR+, PLASH) are not
    exact_softmax = False

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> torch.Tensor:  # pragma: no cover
        """softmax(q k^T * scale + mask) v, exactly or approximately (the core's kind).

        Args:
            q (B, H, Nq, Dh): queries.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dv): values, q's dtype.
            attn_mask (B, H, Nq, Nk): broadcastable boolean mask (True = attend) or additive float mask; cores that
                only drop keys (FAVOR+, PLASH) take a boolean key-padding mask broadcastable to (B, H, 1, Nk).
            is_causal (bool): query i attends to keys j <= i only.
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).

        Returns:
            out (B, H, Nq, Dv): the attention output, in q's dtype.
        """
        raise NotImplementedError


_HALF = (torch.float16, torch.bfloat16)


def draw_dtype() -> torch.dtype:
    """The dtype a core draws its random parameters in: torch's default, or float32 while that is a 16-bit type (a
    model built under from_pretrained(dtype=bf16) draws what the float32 build draws for the same seed)."""
    dt = torch.get_default_dtype()
    return torch.float32 if dt in _HALF else dt


def needs_float32(*xs: torch.Tensor) -> bool:
    """Whether a core that accumulates exponentials (FAVOR+, PLASH) must recompute in float32: a 16-bit input, or
    autocast on the inputs' device (it would run the matmuls in 16 bits)."""
    if not all(isinstance(x, torch.Tensor) for x in xs):
        return False  # the core's own validation names the argument
    if any(x.dtype in _HALF for x in xs):
        return True
    return autocast_enabled(xs[0].device.type)


def key_padding_mask(attn_mask: torch.Tensor | None, k: torch.Tensor, core: str) -> torch.Tensor | None:
    """(B|1, H|1, Nk, 1) boolean keep-mask from a boolean key-padding mask (True = keep) broadcastable to
    (B, H, 1, Nk); any other mask is a ValueError (the linear cores drop keys, never per-query logits)."""
    if attn_mask is None:
        return None
    check_tensor("attn_mask", attn_mask, floating=False, finite=False)
    nk = k.shape[-2]
    ok = (
        attn_mask.dtype == torch.bool
        and attn_mask.ndim <= 4
        and attn_mask.shape[-1] == nk
        and (attn_mask.ndim < 2 or attn_mask.shape[-2] == 1)
    )
    if ok:
        try:
            torch.broadcast_shapes(attn_mask.shape, (*k.shape[:2], 1, nk))
        except RuntimeError:
            ok = False
    if not ok:
        fail(
            "attn_mask",
            f"{attn_mask.dtype} mask of shape {tuple(attn_mask.shape)}",
            f"a boolean key-padding mask broadcastable to {(*k.shape[:2], 1, nk)}: {core} can only drop keys, not "
            "per-query logits (use attention='softmax' for general masks)",
        )
    keep = attn_mask.reshape((1,) * (4 - attn_mask.ndim) + tuple(attn_mask.shape))  # (..., Nk) -> (B|1, H|1, 1, Nk)
    return keep.transpose(-1, -2)  # -> (B|1, H|1, Nk, 1)


def float32_compute(core: nn.Module, q, k, v, attn_mask, is_causal, scale, **extra) -> torch.Tensor:
    """core(q, k, v, ...) in float32 with autocast off and every 16-bit parameter and buffer of the core taken as
    float32 (torch.func.functional_call: gradients reach the stored 16-bit parameters), cast back to q's dtype."""

    def up(t):
        return t.float() if t.is_floating_point() and t.dtype in _HALF else t

    tensors = {n: up(t) for n, t in (*core.named_parameters(), *core.named_buffers())}
    if q.dtype not in (*_HALF, torch.float32, torch.float64) or k.dtype != q.dtype or v.dtype != q.dtype:
        fail(
            "q, k, v",
            f"dtypes {q.dtype}, {k.dtype}, {v.dtype}",
            "one floating dtype: float16, bfloat16, float32 or float64",
            TypeError,
        )
    with torch.autocast(q.device.type, enabled=False):
        y = torch.func.functional_call(
            core,
            tensors,
            (up(q), up(k), up(v)),
            {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale, **extra},
        )
    return y.to(q.dtype)


def document_mask(q, k, attn_mask, is_causal: bool, cu_seqlens, segment_ids):
    """(attn_mask, is_causal) with packed documents (attention.boundaries) folded in: a block-diagonal mask (causal
    within each document when is_causal), ANDed with a boolean attn_mask or added to a float one; unchanged without
    boundaries."""
    if cu_seqlens is None and segment_ids is None:
        return attn_mask, is_causal
    if q.shape[-2] != k.shape[-2]:
        fail("q", f"{q.shape[-2]} queries for {k.shape[-2]} keys", "one query per key with document boundaries")
    doc = document_ids(cu_seqlens, segment_ids, q.shape[0], q.shape[-2])
    mask = block_causal_mask(doc, is_causal)  # (B|1, 1, N, N)
    if attn_mask is None:
        return mask, False
    if attn_mask.dtype == torch.bool:
        return mask & attn_mask, False
    return attn_mask.masked_fill(~mask, float("-inf")), False


class SoftmaxAttention(AttentionCore):
    """F.scaled_dot_product_attention (fused kernels where available).

    Args:
        dropout (float): dropout on the attention weights while training.

    Examples:
        >>> import torch
        >>> import torch.nn.functional as F
        >>> from symformer.attention import SoftmaxAttention
        >>> q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
        >>> out = SoftmaxAttention()(q, k, v, is_causal=True)
        >>> torch.equal(out, F.scaled_dot_product_attention(q, k, v, is_causal=True)), out.shape
        (True, torch.Size([1, 2, 6, 8]))
    """

    exact_softmax = True

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = dropout

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None, cu_seqlens=None, segment_ids=None):
        """SDPA on validated inputs.

        Args:
            q (B, H, Nq, Dh): queries.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dv): values, q's dtype.
            attn_mask (B, H, Nq, Nk): broadcastable boolean (True = attend) or additive float mask, or None.
            is_causal (bool): query i attends to keys j <= i (SDPA's top-left alignment).
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).
            cu_seqlens ((D + 1,) or (B, D + 1)): packed documents (attention.boundaries): a block-diagonal mask.
            segment_ids (B, N): packed documents as one id per token (instead of cu_seqlens).

        Returns:
            out (B, H, Nq, Dv): softmax(q k^T * scale + mask) v.
        """
        check_attention_inputs(q, k, v)
        attn_mask, is_causal = document_mask(q, k, attn_mask, is_causal, cu_seqlens, segment_ids)
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=is_causal,
            scale=scale,
            dropout_p=self.dropout if self.training else 0.0,
        )


def naive_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v with the (Nq, Nk) logits written out: the reference, unvalidated.

    Args:
        q (..., Nq, Dh): queries.
        k (..., Nk, Dh): keys.
        v (..., Nk, Dv): values.
        attn_mask (..., Nq, Nk): broadcastable boolean (True = attend) or additive float mask, or None.
        is_causal (bool): query i attends to keys j <= i + Nk - Nq (aligned bottom-right: the last query sees
            every key, as a decoding step does).
        scale (float | None): the logit scale (None: 1/sqrt(Dh)).

    Returns:
        out (..., Nq, Dv): the attention output.

    Examples:
        >>> import torch
        >>> from symformer.attention import naive_attention
        >>> q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 3)
        >>> out = naive_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out[..., 0, :], v[..., 0, :])  # the first query sees the first key only
        True
        >>> mask = torch.ones(4, 4, dtype=torch.bool).tril()
        >>> torch.allclose(naive_attention(q, k, v, attn_mask=mask), out)
        True
    """
    return naive_weights(q, k, attn_mask, is_causal, scale) @ v


def naive_weights(q, k, attn_mask=None, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask), the attention weights naive_attention applies (arguments as there).

    Returns:
        weights (..., Nq, Nk): rows summing to 1.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale  # (..., Nq, Nk)
    if is_causal:
        nq, nk = q.shape[-2], k.shape[-2]
        keep = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.softmax(s, dim=-1)


class NaiveAttention(AttentionCore):
    """softmax(q k^T * scale) v written out: the reference the other variants are tested against.

    Args:
        dropout (float): must be 0.0 (the reference is deterministic).

    Examples:
        >>> import torch
        >>> from symformer.attention import NaiveAttention, SoftmaxAttention
        >>> q, k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
        >>> keep = torch.tensor([[True, True, False, True, False]])  # (1, Nk) key padding, broadcast to (B, H, Nq, Nk)
        >>> ref = NaiveAttention()(q, k, v, attn_mask=keep)
        >>> torch.allclose(ref, SoftmaxAttention()(q, k, v, attn_mask=keep), atol=1e-6)
        True
        >>> torch.allclose(ref, NaiveAttention()(q, k[..., keep[0], :], v[..., keep[0], :]))  # masked keys dropped
        True
    """

    exact_softmax = True

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        if dropout != 0.0:  # the reference is deterministic: reject the option rather than ignore it
            fail("dropout", dropout, "0.0 (the naive reference has no dropout; use attention='softmax')")

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None, cu_seqlens=None, segment_ids=None):
        """`naive_attention` on validated inputs.

        Args:
            q (B, H, Nq, Dh): queries.
            k (B, H, Nk, Dh): keys, q's dtype.
            v (B, H, Nk, Dv): values, q's dtype.
            attn_mask (B, H, Nq, Nk): broadcastable boolean (True = attend) or additive float mask, or None.
            is_causal (bool): query i attends to keys j <= i + Nk - Nq.
            scale (float | None): the logit scale (None: 1/sqrt(Dh)).
            cu_seqlens ((D + 1,) or (B, D + 1)): packed documents (attention.boundaries): a block-diagonal mask.
            segment_ids (B, N): packed documents as one id per token (instead of cu_seqlens).

        Returns:
            out (B, H, Nq, Dv): softmax(q k^T * scale + mask) v.
        """
        check_attention_inputs(q, k, v)
        attn_mask, is_causal = document_mask(q, k, attn_mask, is_causal, cu_seqlens, segment_ids)
        return naive_attention(q, k, v, attn_mask, is_causal, scale)
