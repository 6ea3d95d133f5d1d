"""RoPE for any coordinate dimension, in both pairing layouts.

Pairing "interleaved": coordinates (2u, 2u+1) form rotary pair u (RoFormer, GPT-J).
Pairing "half": coordinates (u, u + Dh/2) (GPT-NeoX / LLaMA "rotate-half"). The default of every rotary part
(RoPE, STRING, ESPR's commuting init), so that RoPE(Dh) = STRING(Dh) with P = I = ESPR(Dh) at its commuting init.
The angle of pair u is theta_u(r) = beta_u . r (ESPR T2.4-T2.7 with U = I); 1-D RoPE is C = 1 with
log-spaced beta; "axial" splits the pairs among the C axes (interleaved or in blocks, frequencies.py); "mixed" is
RoPE-Mixed as rope-vit defines it (learned per-head beta (H, Dh/2, C) from rope-vit's init); "mixed_random" the
earlier random-direction init, frozen unless learnable=True.

Speed: a rotation by theta of pair (x1, x2) is the complex product (x1 + i x2) e^{i theta} (T0.17), so
interleaved pairing does one complex multiply per pair on a table e^{i theta(r)}; half pairing uses
contiguous [cos, cos] / [-sin, sin] tables with a hand-written backward R^T = R(-theta).
Precision (base.Float32Master): beta is a float32 master; angles, tables and the rotation are computed in float32
(float64 for float64 inputs) from positions that are never rounded to 16 bits, and a 16-bit q is rotated in
float32 and rounded once.
`RoPE.tables` caches them per position set (same idea as rotary-embedding-torch's cached freqs; see
benchmarks/positional.py), without a host sync where values cannot be read (_cache: keyed by identity there).
STRING (string.py) reuses this class for its RoPE part: one implementation.
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._rng import check_seed
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.kernels import kernel_mode, use_kernel
from symformer.kernels.rotary import apply_kernel, unsupported, wanted
from symformer.positional._cache import ValueCache
from symformer.positional._fused import rotate_half_pairs
from symformer.positional._rotate import RotateAngles, _complex_view, _half_kernel, _RotateHalf  # noqa: F401
from symformer.positional.base import QKSymmetry, RotaryPositional, compute_dtype, master_dtype, table_dtype
from symformer.positional.frequencies import (
    AXIS_LAYOUTS,
    DEFAULT_BASE,
    MODES,
    axial_frequencies,
    random_mixed_frequencies,
    rope_vit_frequencies,
)

PAIRINGS = ("interleaved", "half")


def rope_frequencies(
    head_dim: int,
    coord_dim: int = 1,
    base: float | None = None,
    mode: str = "axial",
    seed: int | None = None,
    n_heads: int | None = None,
    axis_layout: str = "interleaved",
    axis_order=None,
) -> torch.Tensor:
    """beta of shape (Dh/2, C), or (H, Dh/2, C) for mode "mixed" with n_heads (frequencies.py). Axial: one axis per
    pair, log-spaced, in `axis_layout` / `axis_order`. Mixed: RoPE-Mixed as rope-vit initialises it (temperature
    `base`, default 10; one random angle per head). Mixed_random: log-spaced magnitudes along random directions.
    Random draws come from `seed` (`_rng.generator("rope.mixed", seed)`; None: torch's global generator, as
    nn.Linear draws), so that the layers of a model start from different directions."""
    check_choice("mode", mode, MODES)
    base = DEFAULT_BASE[mode] if base is None else base
    if mode == "axial":
        return axial_frequencies(head_dim, coord_dim, base, axis_layout, axis_order)
    if mode == "mixed":
        return rope_vit_frequencies(head_dim, coord_dim, n_heads, base, seed)
    return random_mixed_frequencies(head_dim, coord_dim, base, seed)


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """Rotate each pair of x (..., Dh) by angles with cos/sin of shape broadcastable to (..., Dh/2).

    Args:
        x (..., Dh): the tensor to rotate, Dh even.
        cos (..., Dh/2): cosines of the pairs' angles (broadcast against x's leading dims).
        sin (..., Dh/2): sines of the same angles.
        pairing (str): "half" (pair u is coordinates (u, u + Dh/2)) or "interleaved" ((2u, 2u + 1)).

    Returns:
        out (..., Dh): x with pair u rotated by its angle: (x1 cos - x2 sin, x2 cos + x1 sin).

    Examples:
        >>> import torch
        >>> from symformer.positional import rotate_pairs
        >>> x, theta = torch.randn(4, 6, dtype=torch.float64), torch.rand(4, 3, dtype=torch.float64)
        >>> y = rotate_pairs(x, theta.cos(), theta.sin(), "half")
        >>> torch.allclose(rotate_pairs(y, theta.cos(), -theta.sin(), "half"), x)  # R(-theta) R(theta) = I
        True
        >>> torch.allclose(y[:, [0, 3]].norm(dim=-1), x[:, [0, 3]].norm(dim=-1))  # pair 0 keeps its length
        True
    """
    if pairing == "half":
        return rotate_half_pairs(x, cos, sin)
    xp = x.unflatten(-1, (x.shape[-1] // 2, 2))  # (..., Dh) -> (..., Dh/2, 2)
    x1, x2 = xp[..., 0], xp[..., 1]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)  # (..., Dh/2, 2) -> (..., Dh)


def apply_tables(
    x: torch.Tensor, tables: tuple, pairing: str, kernel: str | None = None, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Rotate the pairs of x (..., Dh) with tables from `RoPE.tables`: ("complex", rot) for interleaved
    pairing (one complex multiply per pair, T0.17) or ("cos", [cos, cos], [-sin, sin], cos, sin) for half pairing
    (the first two (..., Dh) for the eager kernel, the last two (..., Dh/2) for the compiled one). The rotation
    runs in the tables' dtype (float32 / float64); an x of another dtype (bfloat16, float16) is upcast and the
    result rounded once to x's dtype (or to `out_dtype`).

    `kernel` ("auto" / "triton" / "torch", None: SYMFORMER_KERNELS) picks the fused Triton kernel
    (kernels/rotary.py) for CUDA tensors it supports: one pass reading x and the float32 (..., Dh/2) tables
    (interleaved: the complex table's real and imaginary parts, read strided), float32 arithmetic, one rounding."""
    if wanted(x, kernel):
        c, s = kernel_tables(tables)
        if use_kernel("rotary", (x, c, s), kernel, unsupported(x, c, s)):
            return apply_kernel(x, c, s, pairing, out_dtype=out_dtype)
    if out_dtype is not None and out_dtype != x.dtype:
        return apply_tables(x, tables, pairing, "torch").to(out_dtype)
    if tables[0] == "complex":
        real = tables[1].real.dtype
        if x.dtype != real:
            return apply_tables(x.to(real), tables, pairing, "torch").to(x.dtype)
        if len(tables) > 2:  # learned angles (RoPE.tables): hand-written backward for x and theta
            return RotateAngles.apply(x, tables[2], False, tables[1])
        return torch.view_as_real(_complex_view(x) * tables[1]).flatten(-2)  # complex (..., Dh/2) -> (..., Dh)
    cos2, ssin = tables[1], tables[2]
    if x.dtype != cos2.dtype:
        return apply_tables(x.to(cos2.dtype), tables, pairing, "torch").to(x.dtype)
    if len(tables) > 5 and pairing == "half":
        return RotateAngles.apply(x, tables[5], True, *tables[1:5])
    m = x.shape[-1] // 2
    if pairing == "interleaved" or cos2.requires_grad or ssin.requires_grad:  # learnable beta: autograd arithmetic
        return rotate_pairs(x, cos2[..., :m], ssin[..., m:], pairing)
    if torch.is_grad_enabled() and x.requires_grad:
        return _RotateHalf.apply(x, *tables[1:5])
    return _half_kernel(x, cos2, ssin, 1.0, tables[3:5])


def kernel_tables(tables: tuple) -> tuple:
    """The (..., Dh/2) cos and sin the fused kernel reads; for learned angles (tables ending with theta, whose
    tables are detached) recomputed from theta so that the kernel's own backward reaches the frequencies."""
    if tables[0] == "complex":
        if len(tables) > 2:
            th, real = tables[2], tables[1].real.dtype
            return th.cos().to(real), th.sin().to(real)
        return tables[1].real, tables[1].imag
    if len(tables) > 5:
        return tables[5].cos().to(tables[3].dtype), tables[5].sin().to(tables[3].dtype)
    return tables[3], tables[4]


def half_tables(th: torch.Tensor, dtype: torch.dtype) -> tuple:
    """("cos", [cos, cos], [-sin, sin], cos, sin), contiguous in `dtype`, for angles th (..., Dh/2)."""
    return _cos_tables(th.cos(), th.sin(), dtype)


def _cos_tables(c: torch.Tensor, s: torch.Tensor, dtype: torch.dtype) -> tuple:
    c, s = c.to(dtype).contiguous(), s.to(dtype).contiguous()
    return ("cos", torch.cat((c, c), -1), torch.cat((-s, s), -1), c, s)


def apply_rotation(x: torch.Tensor, rot: torch.Tensor, pairing: str) -> torch.Tensor:
    """Rotate the pairs of x (..., Dh) by the unit complex numbers rot (broadcastable to (..., Dh/2)).

    Interleaved: one complex multiply per pair (R_2(theta) acting on (x1, x2) is multiplication by e^{i theta},
    T0.17). Half: the cos/sin tables are read off rot once (uncached: `RoPE.tables` caches them per position set).
    Computed in rot's real dtype; the result has x's dtype.

    Args:
        x (..., Dh): the tensor to rotate, Dh even, any floating dtype.
        rot (..., Dh/2): unit complex numbers e^{i theta}, complex64 or complex128, broadcast against x.
        pairing (str): "half" or "interleaved" (`rotate_pairs`).

    Returns:
        out (..., Dh): the rotated x, in x's dtype.

    Examples:
        >>> import torch
        >>> from symformer.positional import apply_rotation, rotate_pairs
        >>> x, theta = torch.randn(2, 5, 8, dtype=torch.float64), torch.rand(5, 4, dtype=torch.float64)
        >>> rot = torch.polar(torch.ones_like(theta), theta)
        >>> ref = rotate_pairs(x, theta.cos(), theta.sin(), "interleaved")
        >>> torch.allclose(apply_rotation(x, rot, "interleaved"), ref)
        True
    """
    if pairing == "interleaved":
        return apply_tables(x, ("complex", rot), pairing)
    return apply_tables(x, _cos_tables(rot.real, rot.imag, rot.real.dtype), pairing)


def pair_indices(head_dim: int, pairing: str) -> torch.Tensor:
    """(Dh/2, 2) coordinate indices of each rotary pair: what teleportation's H(d_h) must act on.

    Args:
        head_dim (int): Dh, even.
        pairing (str): "half" or "interleaved".

    Returns:
        pairs (Dh/2, 2): int64; row u holds the two coordinates pair u rotates.

    Examples:
        >>> from symformer.positional import pair_indices
        >>> pair_indices(6, "half").tolist()
        [[0, 3], [1, 4], [2, 5]]
        >>> pair_indices(6, "interleaved").tolist()
        [[0, 1], [2, 3], [4, 5]]
    """
    m = head_dim // 2
    u = torch.arange(m)
    if pairing == "half":
        return torch.stack((u, u + m), dim=-1)
    return torch.stack((2 * u, 2 * u + 1), dim=-1)


class RoPE(RotaryPositional):
    """Rotary position embedding on (B, H, N, Dh) queries/keys for C-dimensional positions. seed: the random
    directions of the mixed modes (rope_frequencies; None: torch's global generator); axial mode draws nothing.

    Args:
        head_dim (int): Dh, even (RoPE rotates pairs of coordinates).
        coord_dim (int): C, the coordinates of a position (1: token positions, 2: an image grid, ...).
        base (float | None): base of the log-spaced frequencies (> 1); None: 10 for "mixed" (rope-vit's
            temperature), 10^4 otherwise.
        pairing (str): "half" (pairs (u, u + Dh/2), HF's rotate-half) or "interleaved" (pairs (2u, 2u + 1), rope-vit's
            and timm's default).
        mode (str): "axial" (one axis per pair), "mixed" (RoPE-Mixed: rope-vit's init, per head when n_heads is
            given, learned by default) or "mixed_random" (log-spaced magnitudes along random directions, frozen by
            default).
        learnable (bool | None): the frequencies beta are a parameter (else a buffer); None: True for "mixed" only.
        seed (int | None): the directions of the mixed modes.
        n_heads (int | None): mode "mixed": one set of frequencies per head, beta (H, Dh/2, C), as rope-vit learns
            them (a model passes its head count); None, or another mode: beta (Dh/2, C) shared by the heads.
        axis_layout (str): mode "axial": "interleaved" (pair u takes axis u % C) or "blocks" (the first Dh/(2C) pairs
            take one axis, the next the other: timm's and rope-vit's layout).
        axis_order (tuple | None): mode "axial": the axis each residue / block takes (e.g. (1, 0) for (row, col)
            positions in timm's x-first layout); None: (0, 1, ...).
        kernel (str | None): the fused rotary kernel switch (`symformer.kernels`): "auto" (the Triton kernel for
            CUDA tensors it supports), "triton" (forced: a ValueError where it cannot run), "torch", or None
            (SYMFORMER_KERNELS, default "auto"). An attribute: `part.kernel = "torch"` changes it later.

    Examples:
        >>> import torch
        >>> from symformer.positional import RoPE
        >>> _ = torch.manual_seed(0)
        >>> rope = RoPE(head_dim=8)
        >>> q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)  # (B, H, N, Dh)
        >>> qr, kr = rope(q, k, torch.arange(5))
        >>> qr.shape
        torch.Size([2, 3, 5, 8])
        >>> torch.allclose(qr.norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # a rotation keeps norms
        True
        >>> qs, ks = rope(q, k, torch.arange(5) + 7)  # every position shifted: the logits stay (relative)
        >>> torch.allclose(qs @ ks.transpose(-1, -2), qr @ kr.transpose(-1, -2), atol=1e-5)
        True
    """

    pairings = PAIRINGS

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> RoPE:
        """RoPE on 2 len(inv_freq) coordinates (1-D positions) with beta = inv_freq (Dh/2,): a model's own frequencies,
        copied rather than recomputed from a base, in pair layout `pairing`; `options` go to the constructor."""
        part = cls(2 * inv_freq.numel(), 1, pairing=pairing, **options)
        with torch.no_grad():
            part.beta.copy_(inv_freq.reshape(-1, 1).to(part.beta.dtype))
        return part

    def __init__(
        self,
        head_dim: int,
        coord_dim: int = 1,
        base: float | None = None,
        pairing: str = "half",
        mode: str = "axial",
        learnable: bool | None = None,
        seed: int | None = None,
        n_heads: int | None = None,
        axis_layout: str = "interleaved",
        axis_order=None,
        kernel: str | None = None,
    ):
        super().__init__()
        check_int("head_dim", head_dim, 2)
        self.kernel = None if kernel is None else kernel_mode(kernel)
        if head_dim % 2:
            fail("head_dim", head_dim, "an even head dimension (RoPE rotates pairs)")
        self.head_dim = head_dim
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        self.pairing = check_choice("pairing", pairing, PAIRINGS)
        self.mode = check_choice("mode", mode, MODES)
        base = check_float("base", DEFAULT_BASE[mode] if base is None else base, 1.0, low_open=True)
        heads = None if mode != "mixed" or n_heads is None else check_int("n_heads", n_heads, 1)
        self.axis_layout = check_choice("axis_layout", axis_layout, AXIS_LAYOUTS)
        beta = rope_frequencies(head_dim, coord_dim, base, mode, check_seed(seed), heads, axis_layout, axis_order).to(
            master_dtype()
        )
        if mode == "mixed" if learnable is None else learnable:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)

    def check_heads(self, q: torch.Tensor) -> None:
        """Per-head frequencies (H, Dh/2, C) need q's head count to be H (a shape check, no sync)."""
        if self.beta.ndim == 3 and q.shape[1] != self.beta.shape[0]:
            fail("q", f"{q.shape[1]} heads (shape {tuple(q.shape)})", f"{self.beta.shape[0]} heads (n_heads)")

    def angles(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """theta (..., N, Dh/2) = positions @ beta^T in float32 or better (`dtype`: at least beta's precision;
        default compute_dtype(beta)); integer positions are converted exactly (below 2^24 in float32).

        Args:
            positions (..., N, C): positions, integer or float.
            dtype (torch.dtype | None): the compute dtype wanted.

        Returns:
            theta (..., N, Dh/2): the angle of every pair at every position.
        """
        dt = compute_dtype(self.beta.dtype, dtype or self.beta.dtype)
        if self.beta.ndim == 3:  # per head: (..., 1, N, C) @ (H, C, Dh/2) -> (..., H, N, Dh/2)
            return positions.to(dt).unsqueeze(-3) @ self.beta.to(dt).transpose(-1, -2)
        return positions.to(dt) @ self.beta.to(dt).T  # (..., N, C) @ (C, Dh/2) -> (..., N, Dh/2)

    def generators(self) -> torch.Tensor:
        """The commuting skew generators L_k = (+)_u beta_{u,k} J (C, Dh, Dh) in this pairing (T2.3 with U = I);
        (H, C, Dh, Dh) for per-head frequencies.

        Returns:
            L (C, Dh, Dh): skew (L^T = -L), with R(r) = exp(sum_k r_k L_k).
        """
        return generators_from_beta(self.beta, self.head_dim, self.pairing)

    def _needs_graph(self, positions: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (self.beta.requires_grad or positions.requires_grad)

    def _cached(self, kind: tuple, positions: torch.Tensor, build) -> object:
        """Tables for repeated positions (the same grid or token range every step) come from a value-keyed
        cache (positions and beta compared by value, _cache.ValueCache) while no gradient must reach beta."""
        if self._needs_graph(positions):
            return build()
        cache = self.__dict__.setdefault("_tables_cache", ValueCache())
        hit = cache.lookup(kind, (positions, self.beta))
        return hit if hit is not None else cache.store(kind, (positions, self.beta), build())

    def _theta(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        th = self.angles(positions, dtype)
        if self.beta.ndim == 3:  # per-head beta: (H, N, m) or (B, H, N, m) already
            return th
        return th.unsqueeze(1) if th.ndim == 3 else th  # (B, N, m) -> (B, 1, N, m) to broadcast over heads

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """e^{i theta(r)} as a complex tensor (..., N, Dh/2), (B, 1, N, Dh/2) for batched positions; cached.
        complex128 where dtype or beta is float64, else complex64."""
        cdt = (
            torch.complex128
            if compute_dtype(dtype or self.beta.dtype, self.beta.dtype) == torch.float64
            else torch.complex64
        )

        def build():  # the angles and their cos / sin in float64 where the device has it, rounded once (table_dtype)
            th = self._theta(positions, table_dtype(torch.float32, self.beta.device))
            return torch.polar(torch.ones_like(th), th).to(cdt)

        return self._cached(("rot", cdt, positions.device), positions, build)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple:
        """What `apply_tables` needs to rotate a `dtype` tensor in this pairing, cached per position set, in
        float32 (float64 for float64 inputs or a float64 beta) from float64 angles (`table_dtype`): the complex table
        for interleaved pairing, contiguous [cos, cos] and [-sin, sin] for half (reading the strided .real/.imag of a
        complex table in the hot path is what made half slow). A 16-bit tensor is rotated in float32 and rounded once
        (apply_tables)."""
        cd = compute_dtype(dtype, self.beta.dtype)
        if self._needs_graph(positions):
            return self._learned_tables(positions, cd)
        if self.pairing == "interleaved":
            return ("complex", self.rotation(positions, cd))
        td = table_dtype(cd, self.beta.device)  # angles, cos and sin in float64, rounded once to cd
        return self._cached(
            ("cos", cd, positions.device), positions, lambda: half_tables(self._theta(positions, td), cd)
        )

    def _learned_tables(self, positions: torch.Tensor, cd: torch.dtype) -> tuple:
        """`tables` while a gradient must reach beta (or the positions): the tables detached, then the angles
        theta (in `table_dtype`, carrying the graph) that `apply_tables` differentiates (_rotate.RotateAngles)."""
        th = self._theta(positions, table_dtype(cd, self.beta.device))
        with torch.no_grad():
            if self.pairing == "interleaved":
                cdt = torch.complex128 if cd == torch.float64 else torch.complex64
                return ("complex", torch.polar(torch.ones_like(th), th).to(cdt), th)
            return (*half_tables(th, cd), th)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, key_positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """R(r) q and R(r') k, in q's dtype (16-bit inputs are rotated in float32 and rounded once).

        Args:
            q (B, H, Nq, Dh): queries, float16 / bfloat16 / float32 / float64.
            k (B, H, Nk, Dh): keys, q's dtype.
            positions (Nq, C): the queries' positions, integer or float32 / float64; also (B, Nq, C), or (Nq,) token
                positions when C = 1.
            key_positions (Nk, C): the keys' positions, in the forms `positions` takes (None: `positions`).

        Returns:
            q (B, H, Nq, Dh): the rotated queries.
            k (B, H, Nk, Dh): the rotated keys.
        """
        kp = self._check_qk(q, k, positions, key_positions)
        self.check_heads(q)
        tq = self.tables(positions, q.dtype)
        tk = tq if key_positions is None else self.tables(kp, k.dtype)  # q and k share one dtype (_check_qk)
        return apply_tables(q, tq, self.pairing, self.kernel), apply_tables(k, tk, self.pairing, self.kernel)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """R(r) x for x (..., N, Dh), without validation (inner loops).

        Args:
            x (..., N, Dh): queries or keys, e.g. (B, H, N, Dh).
            positions (N, C): their positions ((B, N, C) for x (B, H, N, Dh); (N,) token positions when C = 1).

        Returns:
            out (..., N, Dh): R(r) x, in x's dtype.
        """
        return apply_tables(x, self.tables(positions, x.dtype), self.pairing, self.kernel)

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) of shape (..., N, Dh, Dh): column j is the rotation of basis vector e_j.

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            R (..., N, Dh, Dh): the rotations, orthogonal, with `rotate(x, r) = R(r) x`. Per-head frequencies
            (mode "mixed" with n_heads) give one rotation per head: (H, N, Dh, Dh), (B, H, N, Dh, Dh) batched.

        Examples:
            >>> import torch
            >>> from symformer.positional import RoPE
            >>> rope, x = RoPE(8), torch.randn(5, 8)
            >>> R = rope.matrix(torch.arange(5))  # (N, Dh, Dh)
            >>> torch.allclose((R @ x[:, :, None])[..., 0], rope.rotate(x, torch.arange(5)), atol=1e-5)
            True
            >>> torch.allclose(R.transpose(-1, -2) @ R, torch.eye(8).expand(5, 8, 8), atol=1e-5)
            True
        """
        th = self.angles(positions)  # (..., N, m)
        eye = torch.eye(self.head_dim, dtype=th.dtype, device=self.beta.device)
        c, s = th.cos()[..., None, :], th.sin()[..., None, :]
        # rotate every basis vector (rows of eye), giving R^T row by row
        # I (Dh, Dh) -> (..., N, Dh, Dh)
        rt = rotate_pairs(eye.expand(*th.shape[:-1], self.head_dim, self.head_dim), c, s, self.pairing)
        return rt.transpose(-1, -2)  # rows of R^T -> R (..., N, Dh, Dh)

    def qk_symmetry(self, positions: torch.Tensor | None = None) -> QKSymmetry:
        """H(d_h) on exactly the pairs this RoPE rotates (teleportation paper eq. (9)), for any beta."""
        return QKSymmetry("h", pairs=pair_indices(self.head_dim, self.pairing))

    def symmetry_parameters(self) -> list[nn.Parameter]:
        """None: H(d_h) depends on the pairing only, not on the (possibly learned) frequencies."""
        return []

    def extra_repr(self) -> str:
        extra = "" if self.kernel is None else f", kernel={self.kernel}"
        heads = f", n_heads={self.beta.shape[0]}" if self.beta.ndim == 3 else ""
        return (
            f"head_dim={self.head_dim}, coord_dim={self.coord_dim}, pairing={self.pairing}, mode={self.mode}"
            f"{heads}{extra}"
        )


def generators_from_beta(beta: torch.Tensor, head_dim: int, pairing: str) -> torch.Tensor:
    """(C, Dh, Dh) skew generators with beta_{u,k} J on rotary pair u (T2.3, T2.4); zero elsewhere. A per-head
    beta (H, Dh/2, C) gives (H, C, Dh, Dh)."""
    if beta.ndim == 3:
        return torch.stack([generators_from_beta(b, head_dim, pairing) for b in beta.unbind(0)])
    m, c = beta.shape
    idx = pair_indices(head_dim, pairing).to(beta.device)
    gen = beta.new_zeros(c, head_dim, head_dim)
    b = beta.T  # (C, m)
    rows = torch.arange(c, device=beta.device)[:, None]
    gen = gen.index_put((rows, idx[None, :, 1], idx[None, :, 0]), b)
    return gen.index_put((rows, idx[None, :, 0], idx[None, :, 1]), -b)
