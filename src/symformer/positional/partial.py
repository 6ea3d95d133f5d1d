"""Partial rotary embeddings: a rotary part on the first `rotary_dim` coordinates of each head, the rest passed
through unrotated (GPT-NeoX's rotary_pct, Phi-4-mini's partial_rotary_factor).

R(r) = blockdiag(R_inner(r), I), so the logits read q_rot^T M_inner k_rot + q_pass^T k_pass, and the Q/K group
(teleportation paper Sec. 3) is the inner part's group on the rotated block times GL on the pass-through block
(`QKSymmetry.rotary_dim`; teleport.qk_groups.BlockGroup): both terms are kept separately by U = blockdiag(U_r, U_p)
whenever U_r^T commutes with M_inner. The inner part must see the whole of its own block (no projection: ESPR with
d_act < its head_dim is refused) and use the default logit scale (ESPR's 1/sqrt(d_act), T4.4, is a statement
about the projected head, not about a head of which it rotates a part).
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_int, fail
from symformer.kernels import use_kernel
from symformer.kernels.rotary import apply_kernel, unsupported, wanted
from symformer.positional.base import QKSymmetry, RotaryPositional
from symformer.positional.rope import RoPE, kernel_tables
from symformer.registry import POSITIONAL


def block_diag(a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """blockdiag(a, p) over the last two dims, batched (..., r, r), (..., s, s) -> (..., r + s, r + s); built by
    concatenation, so differentiable (teleport.qk_groups.BlockGroup's elements go through Zhao's ascent)."""
    top = torch.cat((a, a.new_zeros(*a.shape[:-1], p.shape[-1])), dim=-1)
    bottom = torch.cat((p.new_zeros(*p.shape[:-1], a.shape[-1]), p), dim=-1)
    return torch.cat((top, bottom), dim=-2)


class PartialRotary(RotaryPositional):
    """`inner` (a RotaryPositional with head_dim = rotary_dim) on coordinates [0, rotary_dim) of a head of
    `head_dim` coordinates; coordinates [rotary_dim, head_dim) unrotated.

    Args:
        inner (RotaryPositional): the part on the first rotary_dim = inner.head_dim coordinates, with the default
            logit scale (RoPE, STRING, circulant STRING; not ESPR).
        head_dim (int): Dh >= rotary_dim, the whole head.

    Examples:
        >>> import torch
        >>> from symformer.positional import PartialRotary, RoPE
        >>> part = PartialRotary(RoPE(4), head_dim=8)
        >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        >>> qr, kr = part(q, k, torch.arange(5))
        >>> torch.equal(qr[..., 4:], q[..., 4:])  # the pass-through coordinates are not rotated
        True
        >>> torch.allclose(qr[..., :4], RoPE(4).rotate(q[..., :4], torch.arange(5)))
        True
    """

    def __init__(self, inner: RotaryPositional, head_dim: int):
        super().__init__()
        if not isinstance(inner, RotaryPositional):
            fail("inner", type(inner).__name__, "a RotaryPositional part", TypeError)
        self.head_dim = check_int("head_dim", head_dim, 1)
        self.rotary_dim, self.coord_dim = int(inner.head_dim), int(inner.coord_dim)
        if self.rotary_dim > self.head_dim:
            fail("inner.head_dim", self.rotary_dim, f"at most head_dim={self.head_dim}")
        if inner.scale is not None:
            fail(
                "inner",
                f"a part with its own logit scale ({type(inner).__name__}, scale {inner.scale:.4g})",
                "a part using the default 1/sqrt(head_dim) scale (RoPE, STRING, circulant STRING)",
            )
        self.inner = inner
        self.commuting = inner.commuting

    @property
    def kernel(self) -> str | None:
        """The inner part's fused rotary kernel switch (`RoPE`'s `kernel`; None: SYMFORMER_KERNELS)."""
        return getattr(self.inner, "kernel", None)

    @kernel.setter
    def kernel(self, value: str | None) -> None:
        self.inner.kernel = value

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[..., : self.rotary_dim], x[..., self.rotary_dim :]

    def _fused(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor | None:
        """An inner RoPE's rotation of the first rotary_dim coordinates and the copy of the rest in one launch of
        the rotary kernel (kernels/rotary.py), or None where the torch path runs (split, rotate, concatenate)."""
        inner = self.inner
        if not isinstance(inner, RoPE) or not wanted(x, inner.kernel):
            return None
        tables = inner.tables(positions, x.dtype)
        c, s = kernel_tables(tables)
        if not use_kernel("rotary", (x, c, s), inner.kernel, unsupported(x, c, s)):
            return None
        return apply_kernel(x, c, s, inner.pairing, rotary_dim=self.rotary_dim)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, key_positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The inner part's rotation of the first rotary_dim coordinates of q and k, the rest as given.

        Args:
            q (B, H, Nq, Dh): queries, float16 / bfloat16 / float32 / float64.
            k (B, H, Nk, Dh): keys, q's dtype.
            positions (Nq, C): the queries' positions, integer or float32 / float64; also (B, Nq, C), or (Nq,) token
                positions when C = 1.
            key_positions (Nk, C): the keys' positions, in the forms `positions` takes (None: `positions`).

        Returns:
            q (B, H, Nq, Dh): the queries, rotated on [0, rotary_dim).
            k (B, H, Nk, Dh): the keys, rotated on [0, rotary_dim).
        """
        kpos = self._check_qk(q, k, positions, key_positions)
        fq = self._fused(q, positions)
        if fq is not None:
            return fq, self._fused(k, kpos)
        (qr, qp), (kr, kp) = self._split(q), self._split(k)
        qr, kr = self.inner(qr, kr, positions, key_positions)
        return torch.cat((qr, qp), dim=-1), torch.cat((kr, kp), dim=-1)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        fused = self._fused(x, positions)
        if fused is not None:
            return fused
        xr, xp = self._split(x)
        return torch.cat((self.inner.rotate(xr, positions), xp), dim=-1)

    def _pad(self, m: torch.Tensor, diagonal: float) -> torch.Tensor:
        """blockdiag(m, diagonal * I) for m (..., r, r) -> (..., Dh, Dh)."""
        free = self.head_dim - self.rotary_dim
        eye = diagonal * torch.eye(free, dtype=m.dtype, device=m.device)
        return block_diag(m, eye.expand(*m.shape[:-2], free, free))

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        return self._pad(self.inner.matrix(positions), 1.0)

    def logit_matrix(self, positions: torch.Tensor) -> torch.Tensor:
        return self._pad(self.inner.logit_matrix(positions), 1.0)

    def generators(self) -> torch.Tensor:
        return self._pad(self.inner.generators(), 0.0)

    def rotation_parts(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        L, P, d_act = self.inner.rotation_parts()
        if d_act != self.rotary_dim:  # a projecting inner part: refused at construction by its scale
            fail("inner", f"d_act={d_act}", f"the inner part's whole head ({self.rotary_dim})")
        return self._pad(L, 0.0), self._pad(P, 1.0), self.head_dim

    def penalty(self) -> torch.Tensor | float:
        return self.inner.penalty()

    def qk_symmetry(self, positions: torch.Tensor | None = None) -> QKSymmetry:
        """The inner part's group on the rotated block, GL on the pass-through block (module docstring)."""
        sym = self.inner.qk_symmetry(positions)
        return QKSymmetry(sym.kind, pairs=sym.pairs, orth=sym.orth, relative=sym.relative, rotary_dim=self.rotary_dim)

    def symmetry_parameters(self) -> list[nn.Parameter]:
        return self.inner.symmetry_parameters()

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}"


def partial_rotary(head_dim: int, rotary_dim: int | None = None, inner: str = "rope", **options) -> PartialRotary:
    """Registered as "partial": the registered rotary part `inner` (default "rope") on the first `rotary_dim`
    coordinates of each head (default: half of it, rounded down to an even number, at least 2), the rest unrotated;
    other options (and the host's coord_dim, ...) go to `inner`.

    Args:
        head_dim (int): Dh, the whole head.
        rotary_dim (int | None): the rotated coordinates, 2 <= rotary_dim <= head_dim.
        inner (str): the registered name of the rotary part on them ("rope", "string", "circulant_string").
        **options (Any): further arguments of `inner` (coord_dim, base, seed, ...).

    Returns:
        part (PartialRotary): the part, with `rotary_dim` and `inner` attributes.

    Examples:
        >>> from symformer.positional import partial_rotary
        >>> part = partial_rotary(head_dim=12, inner="string", coord_dim=2)
        >>> part.rotary_dim, type(part.inner).__name__, part.coord_dim
        (6, 'STRING', 2)
    """

    if rotary_dim is None:
        rotary_dim = min(max(2, 2 * (head_dim // 4)), head_dim)
    part = POSITIONAL.build(inner, head_dim=check_int("rotary_dim", rotary_dim, 2, head_dim), **options)
    if not isinstance(part, RotaryPositional):
        fail("inner", inner, "the name of a rotary part (rope, string, circulant_string)")
    return PartialRotary(part, head_dim)


partial_rotary.kind = "rotary"  # what hosts read off a registered factory (models.layers.MultiHeadAttention)
