"""STRING positional rotations (Schenck et al., "Learning the RoPEs", ICML 2025; ESPR Tier 2).

* `STRING` (Cayley-STRING): R(r) = P R_rope(r) P^T with learnable frequencies beta (Dh/2, C) and a
  learnable orthogonal P = cayley(S) (T3.1). Its generators L_k = P ((+)_u beta_{u,k} J) P^T commute,
  so logits are exactly relative (T2.9). Because R(r_i)^T R(r_j) = P R_rope(r_j - r_i) P^T, the outer P
  cancels in every logit: `forward` returns R_rope(r) P^T q = P^T R(r) q (same logits as R(r) q, at the
  cost of RoPE plus one shared Dh x Dh product), and `fold_into` merges P^T into W_Q / W_K so that
  inference costs exactly RoPE.
* `CirculantSTRING`: generators L_k = circ(c_k) - circ(c_k)^T (circulant, hence commuting); the
  rotation exp(A(r)) is diagonal in the Fourier basis and is applied with torch.fft in O(Dh log Dh).

Precision (base.Float32Master): beta, the Cayley parameter and the circulant columns are float32 masters; the
Cayley solve, the FFTs and the rotation run in float32 (float64 for float64 inputs; CPUs have no 16-bit solve or
FFT) and the result is rounded once to the input dtype.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from symformer._rng import init_generator
from symformer._validation import check_int, fail
from symformer.positional._cache import ValueCache
from symformer.positional.base import (
    LOW_PRECISION,
    QKSymmetry,
    RotaryPositional,
    compute_dtype,
    master_dtype,
    table_dtype,
)
from symformer.positional.cayley import cayley, skew
from symformer.positional.rope import PAIRINGS, RoPE, apply_tables, pair_indices


def _rows_view(x: torch.Tensor) -> bool:
    """Whether x (..., d) views as (rows, d) without a copy: its leading dims of size > 1 nest (a decoding query
    (B, H, 1, Dh) transposed from (B, 1, H, Dh) does; torch.matmul's own test also counts the size-1 dims)."""
    dims = [i for i in range(x.ndim - 1) if x.shape[i] > 1]
    return all(x.stride(i) == x.stride(j) * x.shape[j] for i, j in zip(dims, dims[1:]))


def rows_times(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """x (..., d) @ p (d, e) as one mm on the rows where they view as a matrix (3 ops, where matmul's broadcast
    path takes 6 for a transposed decoding query: a launch-bound decoding step counts them), else matmul."""
    if x.ndim > 2 and _rows_view(x):
        # (..., d) -> (rows, d) @ (d, e) -> (..., e)
        return x.reshape(-1, x.shape[-1]).mm(p).view(*x.shape[:-1], p.shape[-1])
    return x @ p


class STRING(RotaryPositional):
    """Cayley-STRING on (B, H, N, Dh) queries/keys for C-dimensional positions.

    Args:
        head_dim (int): Dh, even.
        coord_dim (int): C, the coordinates of a position.
        base (float | None): RoPE frequency base of the initial beta (None: the mode's, `RoPE`).
        learnable (bool): learn beta and P.
        pairing (str): "half", the default of every rotary part: HF's rotate-half layout, so that with
            init_scale 0 STRING(head_dim) rotates exactly as RoPE(head_dim), RoPE being STRING at P = I (T2.7); or
            "interleaved".
        mode (str | None): initial beta, "axial", "mixed" or "mixed_random" (`RoPE`); default mixed for C > 1, the
            RoPE-Mixed initialisation of Cayley-STRING (rope-vit's), so STRING(head_dim, C) starts as
            RoPE(head_dim, C, mode="mixed").
        init_scale (float): std of the initial skew parameter; 0 gives P = I, i.e. exactly RoPE at init.
        seed (int | None): the draw of that parameter when init_scale > 0, and of the mixed directions, as
            RoPE(..., seed=seed) draws them: None draws from torch's global generator, as nn.Linear does.
        n_heads (int | None): mode "mixed": per-head frequencies (H, Dh/2, C), as `RoPE` (a model passes its head
            count); P stays shared by the heads.
        kernel (str | None): the fused rotary kernel switch of its RoPE part (`RoPE`'s `kernel`; `part.kernel`
            reads and sets it): training applies P, then the kernel; after `fold` the kernel alone.

    Examples:
        >>> import torch
        >>> from symformer.positional import STRING
        >>> _ = torch.manual_seed(0)
        >>> part = STRING(head_dim=8, coord_dim=2, init_scale=0.1, seed=0).double()
        >>> q, k = torch.randn(1, 2, 6, 8, dtype=torch.float64), torch.randn(1, 2, 6, 8, dtype=torch.float64)
        >>> pos = torch.randint(0, 4, (6, 2))  # (N, C): a 2-D grid
        >>> qr, kr = part(q, k, pos)  # R_rope(r) P^T q: the logits of R(r) q, at RoPE's cost
        >>> R = part.matrix(pos)  # (N, Dh, Dh): R(r) = P R_rope(r) P^T
        >>> ref = (R @ q[..., None])[..., 0] @ (R @ k[..., None])[..., 0].transpose(-1, -2)
        >>> torch.allclose(qr @ kr.transpose(-1, -2), ref)
        True
    """

    pairings = PAIRINGS

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> STRING:
        """STRING on 2 len(inv_freq) coordinates (1-D positions) whose RoPE part has beta = inv_freq (Dh/2,), in pair
        layout `pairing`: with init_scale 0 (P = I, T3.1) exactly that RoPE (T2.7); `options` go to the constructor."""
        part = cls(2 * inv_freq.numel(), 1, pairing=pairing, **options)
        with torch.no_grad():
            part.rope.beta.copy_(inv_freq.reshape(-1, 1).to(part.rope.beta.dtype))
        return part

    def __init__(
        self,
        head_dim: int,
        coord_dim: int = 1,
        base: float | None = None,
        learnable: bool = True,
        pairing: str = "half",
        mode: str | None = None,
        init_scale: float = 0.0,
        seed: int | None = None,
        n_heads: int | None = None,
        kernel: str | None = None,
    ):
        super().__init__()
        mode = mode or ("mixed" if coord_dim > 1 else "axial")
        # one RoPE implementation: STRING = RoPE(beta) conjugated by a learned orthogonal P
        self.rope = RoPE(
            head_dim, coord_dim, base, pairing, mode, learnable=learnable, seed=seed, n_heads=n_heads, kernel=kernel
        )
        self.head_dim, self.coord_dim, self.pairing = head_dim, coord_dim, pairing
        a = torch.zeros(head_dim, head_dim, dtype=torch.float64)
        if float(init_scale) != 0.0:  # init_scale 0: P = I exactly, and no draw from any generator
            a = torch.randn(head_dim, head_dim, generator=init_generator(seed), dtype=torch.float64) * float(init_scale)
        self.skew_param = nn.Parameter(a.to(master_dtype()), requires_grad=learnable)
        self.register_buffer("folded", torch.zeros((), dtype=torch.bool))  # saved with the weights it was folded in
        self._folded = False  # its host copy: the forward reads this one (bool(buffer) is a host sync on a GPU)

    @property
    def beta(self) -> torch.Tensor:
        return self.rope.beta

    @property
    def kernel(self) -> str | None:
        """The fused rotary kernel switch of the RoPE part (None: SYMFORMER_KERNELS)."""
        return self.rope.kernel

    @kernel.setter
    def kernel(self, value: str | None) -> None:
        self.rope.kernel = value

    @property
    def is_folded(self) -> bool:
        """Whether P^T is merged into W_Q / W_K (`fold_into`): the host copy of the `folded` buffer, set by fold_into
        and by load_state_dict, so no forward reads the buffer (a host sync on an accelerator)."""
        flag = self.__dict__.get("_folded")
        return bool(self.folded) if flag is None else flag  # None: a module pickled before the host copy existed

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        given = state_dict.get(prefix + "folded")
        if isinstance(given, torch.Tensor):  # read once at load time, not per forward
            self._folded = bool(given)

    def skew_matrix(self) -> torch.Tensor:
        """S = A - A^T, the Cayley parameter of P."""
        return skew(self.skew_param)

    def orthogonal(self) -> torch.Tensor:
        """P = (I - S)(I + S)^{-1} in SO(Dh) (T3.2), solved in float32 at least (no 16-bit CPU solve)."""
        s = self.skew_matrix()
        return cayley(s.float() if s.dtype in LOW_PRECISION else s, check=False)

    def _orthogonal_cached(self, dtype: torch.dtype) -> torch.Tensor:
        if torch.is_grad_enabled() and self.skew_param.requires_grad:
            return self.orthogonal().to(dtype)
        cache = self.__dict__.setdefault("_p_cache", ValueCache(2))
        hit = cache.lookup(dtype, (self.skew_param,))
        return hit if hit is not None else cache.store(dtype, (self.skew_param,), self.orthogonal().to(dtype))

    def generators(self) -> torch.Tensor:
        """L_k = P ((+)_u beta_{u,k} J) P^T (C, Dh, Dh): commuting and skew (T1.1, T2.3 with U = P)."""
        p = self.orthogonal()
        return p @ self.rope.generators() @ p.T  # (Dh, Dh) (C, Dh, Dh) (Dh, Dh) -> (C, Dh, Dh)

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) = P R_rope(r) P^T (..., N, Dh, Dh) (T2.7).

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            R (..., N, Dh, Dh): the rotations, orthogonal.
        """
        p = self.orthogonal()
        return p @ self.rope.matrix(positions) @ p.T  # -> (..., N, Dh, Dh)

    def _to_rope_basis(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.is_folded:
            return q, k  # P^T already merged into W_Q / W_K by fold_into
        p = self._orthogonal_cached(q.dtype)  # one Cayley solve per call (or per change of S), shared by q and k
        return rows_times(q, p), rows_times(k, p)  # row form of P^T x

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, key_positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (R_rope(r) P^T q, R_rope(r') P^T k): the logits equal those of (R(r) q, R(r') k).

        Args:
            q (B, H, Nq, Dh): queries, float16 / bfloat16 / float32 / float64.
            k (B, H, Nk, Dh): keys, q's dtype.
            positions (Nq, C): the queries' positions, integer or float32 / float64; also (B, Nq, C), or (Nq,) token
                positions when C = 1.
            key_positions (Nk, C): the keys' positions, in the forms `positions` takes (None: `positions`).

        Returns:
            q (B, H, Nq, Dh): R_rope(r) P^T q, in q's dtype.
            k (B, H, Nk, Dh): R_rope(r') P^T k, in k's dtype.
        """
        kp = self._check_qk(q, k, positions, key_positions)
        self.rope.check_heads(q)
        tq = self.rope.tables(positions, q.dtype)  # cached per position set whenever no grad reaches beta
        tk = tq if key_positions is None else self.rope.tables(kp, k.dtype)
        cd = compute_dtype(q.dtype, self.skew_param.dtype)  # P^T and the rotation in float32 (float64), one rounding
        qc, kc = (q, k) if self.is_folded else self._to_rope_basis(q.to(cd), k.to(cd))  # folded: RoPE alone
        kern = self.rope.kernel
        return apply_tables(qc, tq, self.pairing, kern, q.dtype), apply_tables(kc, tk, self.pairing, kern, k.dtype)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """R_rope(r) P^T x for x (..., N, Dh), without validation: what forward applies to q and to k (the
        partial-rotary wrapper calls it).

        Args:
            x (..., N, Dh): queries or keys.
            positions (N, C): their positions ((B, N, C) for x (B, H, N, Dh); (N,) token positions when C = 1).

        Returns:
            out (..., N, Dh): R_rope(r) P^T x, in x's dtype.
        """
        cd = compute_dtype(x.dtype, self.skew_param.dtype)
        xc = x if self.is_folded else rows_times(x.to(cd), self._orthogonal_cached(cd))
        return apply_tables(xc, self.rope.tables(positions, x.dtype), self.pairing, self.rope.kernel, x.dtype)

    def qk_symmetry(self, positions: torch.Tensor | None = None) -> QKSymmetry:
        """P H(d_h) P^T (R = P R_rope P^T; not in the teleportation paper); H(d_h) once P^T is folded
        into W_Q / W_K, since the logits then see R_rope only."""
        pairs = pair_indices(self.head_dim, self.pairing)
        if self.is_folded:
            return QKSymmetry("h", pairs=pairs)
        with torch.no_grad():
            return QKSymmetry("h", pairs=pairs, orth=self.orthogonal().detach().to(torch.float64))

    @property
    def can_fold(self) -> bool:
        return not self.is_folded

    @torch.no_grad()
    def fold_into(self, q_linear: nn.Linear, k_linear: nn.Linear) -> None:
        """Merge P^T into the query/key projections (every head: rows h*Dh:(h+1)*Dh of W and b) for
        inference. Afterwards `forward` skips P, so it costs exactly RoPE; logits are unchanged.
        Folding twice would apply P^T twice, so a folded module refuses a second fold.

        Args:
            q_linear (nn.Linear): the query projection, H Dh output features (heads contiguous).
            k_linear (nn.Linear): the key projection, a multiple of Dh output features.

        Examples:
            >>> import torch
            >>> from torch import nn
            >>> from symformer.positional import STRING
            >>> _ = torch.manual_seed(0)
            >>> part = STRING(head_dim=4, init_scale=0.2, seed=0).double()
            >>> wq, wk = nn.Linear(8, 8).double(), nn.Linear(8, 8).double()  # 2 heads of Dh = 4
            >>> x, pos = torch.randn(1, 5, 8, dtype=torch.float64), torch.arange(5)
            >>> def logits():
            ...     q, k = (w(x).view(1, 5, 2, 4).transpose(1, 2) for w in (wq, wk))
            ...     q, k = part(q, k, pos)
            ...     return q @ k.transpose(-1, -2)
            >>> before = logits()
            >>> part.fold_into(wq, wk)
            >>> part.is_folded, torch.allclose(logits(), before)
            (True, True)
        """
        for name, lin in (("q_linear", q_linear), ("k_linear", k_linear)):
            if not isinstance(lin, nn.Linear):
                fail(name, type(lin).__name__, "an nn.Linear", TypeError)
            if lin.out_features % self.head_dim:
                fail(name, f"{lin.out_features} output features", f"a multiple of head_dim={self.head_dim}")
        if self.is_folded:
            fail("self", "a STRING module already folded", "an unfolded module (fold_into merges P^T once)")
        pt = self.orthogonal().T  # P^T (Dh, Dh)
        for lin in (q_linear, k_linear):  # the product in float32 or better, written back once (16-bit weights)
            w = lin.weight.unflatten(0, (-1, self.head_dim))  # (H, Dh, D)
            cd = compute_dtype(w.dtype, pt.dtype)
            lin.weight.copy_((pt.to(cd) @ w.to(cd)).flatten(0, 1))  # (H, Dh, D) -> (H Dh, D)
            if lin.bias is not None:
                b = lin.bias.unflatten(0, (-1, self.head_dim))  # (H Dh,) -> (H, Dh)
                lin.bias.copy_((b.to(cd) @ pt.T.to(cd)).flatten())  # (H, Dh) -> (H Dh,)
        self.folded.fill_(True)
        self._folded = True

    def fold(self, q_proj: nn.Linear, k_proj: nn.Linear) -> STRING:
        """Prepare for inference: merge P into the query / key projections (`fold_into`: W' = P^T W and b' = P^T b
        per head, so that q' = R_rope(r) W' x = R_rope(r) P^T W x has the logits of R(r) W x), after which the
        forward is RoPE alone (the fused rotary kernel where it runs, `kernel`). Training keeps P unfolded: it
        applies P, then the kernel. `models.fold_rotary` folds every layer of a model.

        Args:
            q_proj (nn.Linear): the query projection, heads contiguous in its output features.
            k_proj (nn.Linear): the key projection.

        Returns:
            self: folded.

        Example:
            >>> from torch import nn
            >>> part = STRING(head_dim=4, init_scale=0.2, seed=0)
            >>> part.fold(nn.Linear(8, 8), nn.Linear(8, 8)).is_folded
            True
        """
        self.fold_into(q_proj, k_proj)
        return self

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, coord_dim={self.coord_dim}, pairing={self.pairing}, folded={self.is_folded}"


class CirculantSTRING(RotaryPositional):
    """Circulant-STRING: L_k = circ(c_k) - circ(c_k)^T, R(r) x = IFFT(exp(FFT(a(r))) * FFT(x)).

    A real skew circulant matrix circ(a) (a_j = -a_{-j}) has purely imaginary eigenvalues
    i * theta_f = rfft(a)_f, so exp(A(r)) multiplies frequency f of x by e^{i theta_f(r)} with
    theta(r) = r @ Im rfft(a_k): linear in r, hence exactly relative (T2.9). Any Dh >= 2 works (no pairs).
    The initial first columns are chosen so that the frequencies are log-spaced like RoPE's, with random signs
    (seed: None draws them from torch's global generator, as nn.Linear does).

    Args:
        head_dim (int): Dh >= 2, even or odd.
        coord_dim (int): C, the coordinates of a position.
        base (float): base of the initial log-spaced frequencies.
        learnable (bool): learn the circulant columns c (C, Dh).
        seed (int | None): the initial signs of the frequencies.

    Examples:
        >>> import torch
        >>> from symformer.positional import CirculantSTRING
        >>> _ = torch.manual_seed(0)
        >>> part = CirculantSTRING(head_dim=7, seed=0).double()
        >>> q, k = torch.randn(1, 2, 5, 7, dtype=torch.float64), torch.randn(1, 2, 5, 7, dtype=torch.float64)
        >>> qr, kr = part(q, k, torch.arange(5))
        >>> torch.allclose(qr.norm(dim=-1), q.norm(dim=-1))  # exp of a skew matrix: a rotation
        True
        >>> qs, ks = part(q, k, torch.arange(5) + 3)  # commuting generators: the logits are relative (T2.9)
        >>> torch.allclose(qs @ ks.transpose(-1, -2), qr @ kr.transpose(-1, -2))
        True
    """

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> CirculantSTRING:
        """Circulant STRING on 2 len(inv_freq) coordinates (1-D positions). It has no coordinate pairs (`pairings` is
        empty: it rotates in the Fourier basis), so it cannot start as that RoPE: its frequencies are log-spaced from
        `base` with random signs, as its constructor draws them, and `pairing` is not read."""
        return cls(2 * inv_freq.numel(), 1, **options)

    def __init__(
        self, head_dim: int, coord_dim: int = 1, base: float = 10000.0, learnable: bool = True, seed: int | None = None
    ):
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, 2)
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        nf = head_dim // 2 + 1
        g = init_generator(seed)
        freqs = torch.zeros(coord_dim, nf, dtype=torch.float64)
        inner = torch.arange(1, (head_dim + 1) // 2)  # DC and (even Dh) Nyquist stay real: theta = 0
        mags = base ** (-(inner - 1).double() / max(len(inner), 1))
        # drawn in the master dtype: a part built under a 16-bit default dtype (from_pretrained with dtype=) gets the
        # float32 build's signs for the same seed
        sign = torch.where(torch.rand(coord_dim, len(inner), generator=g, dtype=master_dtype()) < 0.5, -1.0, 1.0)
        sign = sign.double()
        freqs[:, inner] = mags * sign / math.sqrt(coord_dim)
        a = torch.fft.irfft(1j * freqs, n=head_dim)  # skew circulant first column with these angles
        self.c = nn.Parameter((a / 2).to(master_dtype()), requires_grad=learnable)  # a = c - c^T

    def columns(self) -> torch.Tensor:
        """a_k = first column of L_k = c_k - c_k[(-j) mod Dh] (C, Dh)."""
        flip = torch.roll(torch.flip(self.c, dims=(-1,)), 1, dims=-1)
        return self.c - flip

    def angles(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """theta(r) (..., N, Dh//2+1) = r @ Im rfft(a_k), in float32 or better (`dtype`, at least c's precision)."""
        dt = compute_dtype(self.c.dtype, dtype or self.c.dtype)
        spec = torch.fft.rfft(self.columns().to(dt), dim=-1).imag  # (C, F); the real part is 0 for skew columns
        return positions.to(dt) @ spec

    def generators(self) -> torch.Tensor:
        """Dense (C, Dh, Dh) circulant generators (analysis only)."""
        a = self.columns()
        u = torch.arange(self.head_dim, device=a.device)
        idx = (u[:, None] - u[None, :]) % self.head_dim
        return a[:, idx]

    def _rotate_fourier(self, x: torch.Tensor, th: torch.Tensor, cd: torch.dtype) -> torch.Tensor:
        """IFFT(e^{i theta} FFT(x)) in cd (float32 / float64), rounded once to x's dtype; the phases e^{i theta}
        in th's dtype (float64 angles for float32 work: `table_dtype`), rounded once to cd."""
        rot = torch.polar(torch.ones_like(th), th).to(torch.complex128 if cd == torch.float64 else torch.complex64)
        return torch.fft.irfft(torch.fft.rfft(x.to(cd), dim=-1) * rot, n=self.head_dim, dim=-1).to(x.dtype)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """R(r) x for x (..., N, Dh), without validation (what forward applies to q and to k).

        Args:
            x (..., N, Dh): queries or keys.
            positions (N, C): their positions ((B, N, C) for x (B, H, N, Dh); (N,) token positions when C = 1).

        Returns:
            out (..., N, Dh): R(r) x, in x's dtype.
        """
        cd = compute_dtype(x.dtype, self.c.dtype)
        th = self.angles(positions, table_dtype(cd, self.c.device))
        # (B, N, F) -> (B, 1, N, F)
        return self._rotate_fourier(x, th.unsqueeze(1) if th.ndim == 3 and x.ndim == 4 else th, cd)

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
        return self.rotate(q, positions), self.rotate(k, kp)

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) (..., N, Dh, Dh): rotate the basis vectors (rows of I give R^T).

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            R (..., N, Dh, Dh): the rotations exp(A(r)), with `rotate(x, r) = R(r) x`.
        """
        th = self.angles(positions)[..., None, :]
        eye = torch.eye(self.head_dim, dtype=th.dtype, device=th.device)
        eye = eye.expand(*th.shape[:-2], self.head_dim, self.head_dim)  # -> (..., N, Dh, Dh)
        return self._rotate_fourier(eye, th, th.dtype).transpose(-1, -2)  # rows of R^T -> R

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, coord_dim={self.coord_dim}"


__all__ = ["STRING", "CirculantSTRING"]
