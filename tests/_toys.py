"""Toy extensions registered inside tests: a rotary part and a decoding core written the way CONTRIBUTING's recipes
say (their file's content, one registration line), which then run in every host that reads the contracts
(positional.rotary_parts, attention.decoding_cores) with no other edit: CausalLM.generate, HF generate(), the
precision checks and the benches.

`registered(...)` registers them for one block and removes them after, so no other test sees them."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from symformer.attention.decoding import DecodingCore
from symformer.positional.base import RotaryPositional, compute_dtype
from symformer.registry import ATTENTION, POSITIONAL


class ToyRotary(RotaryPositional):
    """RoPE in the rotate-half layout with frequencies 1 / base^(2i/Dh), written from scratch (theta = n beta)."""

    pairings = ("half",)

    def __init__(self, head_dim: int, coord_dim: int = 1, base: float = 10000.0):
        super().__init__()
        self.head_dim, self.coord_dim = head_dim, coord_dim
        i = torch.arange(head_dim // 2, dtype=torch.float64)
        self.register_buffer("beta", (base ** (-2 * i / head_dim)).float())

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> ToyRotary:
        part = cls(2 * inv_freq.numel(), **options)
        with torch.no_grad():
            part.beta.copy_(inv_freq.to(part.beta.dtype))
        return part

    def _angles(self, positions: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
        th = positions.to(dt) @ self.beta.to(dt)[None, :]  # (..., N, Dh/2)
        return th.unsqueeze(1) if th.ndim == 3 else th

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        dt = compute_dtype(x.dtype, self.beta.dtype)
        th = self._angles(positions, dt)
        c, s = th.cos(), th.sin()
        x1, x2 = x.to(dt).chunk(2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1).to(x.dtype)

    def forward(self, q, k, positions, key_positions=None):
        kp = self._check_qk(q, k, positions, key_positions)
        return self.rotate(q, positions), self.rotate(k, kp)

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(self.head_dim, dtype=compute_dtype(self.beta.dtype), device=self.beta.device)
        th = positions.shape[:-1]
        rows = self.rotate(eye.expand(*th, self.head_dim, self.head_dim), positions.unsqueeze(-2))
        return rows.transpose(-1, -2)

    def generators(self) -> torch.Tensor:
        m = self.head_dim // 2
        L = torch.zeros(1, self.head_dim, self.head_dim, dtype=self.beta.dtype, device=self.beta.device)
        u = torch.arange(m)
        L[0, u + m, u], L[0, u, u + m] = self.beta, -self.beta
        return L


@dataclass
class ToyState:
    """S = sum_j phi(k_j) v_j^T (B, H, Dh, Dv) and z = sum_j phi(k_j) (B, H, Dh) over the tokens consumed."""

    s: torch.Tensor | None = None
    z: torch.Tensor | None = None

    def select(self, index: torch.Tensor) -> None:
        if self.s is not None:
            self.s, self.z = self.s.index_select(0, index), self.z.index_select(0, index)

    def repeat_interleave(self, repeats: int) -> None:
        if self.s is not None:
            self.s, self.z = self.s.repeat_interleave(repeats, 0), self.z.repeat_interleave(repeats, 0)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.s, self.z) if t is not None)


class ToyLinearAttention(DecodingCore):
    """Causal linear attention with the feature map phi(x) = elu(x) + 1 (Katharopoulos et al. 2020): a decoding core
    in 40 lines. Key-padding masks zero the padded keys' features."""

    def init_state(self, batch: int | None = None, max_len: int | None = None) -> ToyState:
        return ToyState()

    def forward(self, q, k, v, attn_mask=None, is_causal=False, scale=None, state=None):
        fq, fk = F.elu(q) + 1, F.elu(k) + 1
        if attn_mask is not None:  # boolean keep-mask broadcastable to (B, H, 1, Nk)
            fk = fk * attn_mask[..., -1, :].unsqueeze(-1).to(fk.dtype)
        kv = fk.unsqueeze(-1) * v.unsqueeze(-2)  # (B, H, N, Dh, Dv)
        if not is_causal:
            s, z = kv.sum(-3, keepdim=True), fk.sum(-2, keepdim=True)
        else:
            s, z = kv.cumsum(-3), fk.cumsum(-2)
            if state is not None:
                if state.s is not None:
                    s, z = s + state.s.unsqueeze(-3), z + state.z.unsqueeze(-2)
                state.s, state.z = s[..., -1, :, :], z[..., -1, :]
        num = (fq.unsqueeze(-1) * s).sum(-2)
        den = (fq * z).sum(-1, keepdim=True)
        return num / den.clamp_min(1e-30)


@contextmanager
def registered(rotary: str | None = "toy_rotary", core: str | None = "toy_linear"):
    """Register the toys under these names for the block (one line each, as the recipes say), then remove them."""
    if rotary:
        POSITIONAL.register(rotary)(ToyRotary)
    if core:
        ATTENTION.register(core)(ToyLinearAttention)
    try:
        yield
    finally:
        if rotary:
            POSITIONAL.unregister(rotary)
        if core:
            ATTENTION.unregister(core)
