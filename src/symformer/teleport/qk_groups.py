"""Per-layer Q/K groups: which U (q -> U q, k -> U^{-T} k) keep the attention logits of one head, given its
rotary part (teleportation paper Sec. 3; RoPE: H(d_h) of eq. (9); STRING, ESPR: ours), and `diagonal_blocks`, the
diagonal part of such a group (the q/k-norm scalings of Qwen3-style layers). Partial rotary parts: BlockGroup.
DiagonalGroup is the V/O factor where an output gate blocks GL(d_h) (integrations.hf.teleport). The whole-model
group is in groups.py.
"""

from __future__ import annotations

import torch

from symformer._validation import check_int, fail
from symformer.positional.base import RotaryPositional
from symformer.positional.partial import block_diag


# ---------------------------------------------------------------- per-layer Q/K groups
class QKGroup:
    """The group acting on one head's (Q, K) pair: U with q -> U q, k -> U^{-T} k, scores unchanged.

    Every group here is the set of invertible elements of a matrix algebra A (closed under products,
    containing I); `basis` (k, Dh, Dh) spans A, so elements near the identity are I + sum c_k B_k.

    Args:
        head_dim (int): Dh.
        basis (k, Dh, Dh): a basis of the algebra (None: every matrix, GL(Dh)).

    Examples:
        >>> import torch
        >>> from symformer.teleport import QKGroup
        >>> grp = QKGroup(4)  # GL(4): a head without rotation
        >>> grp.dimension
        16
        >>> U = grp.random((), torch.Generator().manual_seed(0))
        >>> q, k = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
        >>> torch.allclose((U @ q) @ (torch.linalg.inv(U).T @ k), q @ k)  # q -> U q, k -> U^{-T} k
        True
        >>> grp.near_identity((3,), 0.1, torch.Generator().manual_seed(0)).shape  # 3 candidates near I
        torch.Size([3, 4, 4])
    """

    kind = "gl"

    def __init__(self, head_dim: int, basis: torch.Tensor | None = None):
        self.head_dim = head_dim
        self._basis = basis

    @property
    def dimension(self) -> int:
        return self.head_dim**2 if self._basis is None else int(self._basis.shape[0])

    def basis(self, dtype=torch.float64) -> torch.Tensor:
        if self._basis is None:
            return torch.eye(self.head_dim**2, dtype=dtype).view(-1, self.head_dim, self.head_dim)
        return self._basis.to(dtype)

    def from_coeffs(self, c: torch.Tensor) -> torch.Tensor:
        """I + sum_k c_k B_k for coefficients c (..., k) -> (..., Dh, Dh); differentiable in c.

        Args:
            c (..., k): coordinates in the basis, k = `dimension`.

        Returns:
            U (..., Dh, Dh): the elements, in c's dtype.
        """
        eye = torch.eye(self.head_dim, dtype=c.dtype, device=c.device)
        if self._basis is None:
            return eye + c.reshape(*c.shape[:-1], self.head_dim, self.head_dim)
        return eye + torch.einsum("...k,kij->...ij", c, self._basis.to(c.dtype).to(c.device))

    def random(
        self, shape: tuple[int, ...], gen: torch.Generator, dtype=torch.float64, scale: float = 0.5
    ) -> torch.Tensor:
        """A generic (not near-identity, not diagonal) element, for invariance checks.

        Args:
            shape (tuple[int, ...]): leading dims (() for one element).
            gen (torch.Generator): the draw.
            dtype (torch.dtype): the elements' dtype.
            scale (float): std of the coordinates.

        Returns:
            U (*shape, Dh, Dh): the elements.
        """
        c = scale * torch.randn(*shape, self.dimension, generator=gen, dtype=dtype)
        return self.from_coeffs(c)

    def near_identity(
        self, shape: tuple[int, ...], alpha: float, gen: torch.Generator, dtype=torch.float64
    ) -> torch.Tensor:
        """Sec. 4: diag(x_1..x_n) with x_i ~ U[1 - alpha, 1 + alpha].

        Args:
            shape (tuple[int, ...]): leading dims ((n,) for n candidates).
            alpha (float): the radius, in (0, 1).
            gen (torch.Generator): the draw.
            dtype (torch.dtype): the elements' dtype.

        Returns:
            U (*shape, Dh, Dh): the candidates.
        """
        x = 1 + alpha * (2 * torch.rand(*shape, self.head_dim, generator=gen, dtype=dtype) - 1)
        return torch.diag_embed(x)

    def contains(self, u: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """max |U^T M - M U^T| over relative rotations rel (R, Dh, Dh); for tests and diagnostics.

        Args:
            u (..., Dh, Dh): elements.
            rel (R, Dh, Dh): relative rotations M.

        Returns:
            residual (Tensor): 0-dim, 0 when every U^T commutes with every M.
        """
        ut = u.transpose(-1, -2)[..., None, :, :]
        return (ut @ rel - rel @ ut).abs().amax()


class HGroup(QKGroup):
    """H(d_h), eq. (9): on each rotary pair (i, j) the block [[a, -b], [b, a]]; `orth` conjugates it
    (STRING: P H P^T).

    Args:
        head_dim (int): Dh.
        pairs (m, 2): the rotary pairs (`positional.pair_indices`).
        orth (Dh, Dh): the orthogonal P of STRING, or None.

    Examples:
        >>> import torch
        >>> from symformer.positional import RoPE, pair_indices
        >>> from symformer.teleport import HGroup
        >>> grp = HGroup(4, pair_indices(4, "half"))
        >>> grp.dimension  # a scale and a rotation per pair
        4
        >>> U = grp.random((), torch.Generator().manual_seed(0))
        >>> float(grp.contains(U, RoPE(4).double().relative_rotations(torch.arange(6)))) < 1e-12
        True
    """

    kind = "h"

    def __init__(self, head_dim: int, pairs: torch.Tensor, orth: torch.Tensor | None = None):
        self.head_dim = head_dim
        self.pairs = pairs.long()
        self.orth = orth
        if orth is not None:
            self.kind = "string"
        super().__init__(head_dim, self._make_basis())

    def _make_basis(self) -> torch.Tensor:
        d, m = self.head_dim, self.pairs.shape[0]
        b = torch.zeros(2 * m, d, d, dtype=torch.float64)
        for u, (i, j) in enumerate(self.pairs.tolist()):
            b[2 * u, i, i] = b[2 * u, j, j] = 1.0  # a_u P_u
            b[2 * u + 1, j, i], b[2 * u + 1, i, j] = 1.0, -1.0  # b_u J_u (J = [[0, -1], [1, 0]])
        if self.orth is not None:
            p = self.orth.to(torch.float64)
            b = p @ b @ p.T
        return b

    def near_identity(self, shape, alpha, gen, dtype=torch.float64):
        """Sec. 4's diagonal U[1 - alpha, 1 + alpha] sample, kept inside eq. (9)'s H(d_h) (our reading: the paper states
        it for GL(n)): one scale a_u per rotary pair, b_u = 0."""
        a = 1 + alpha * (2 * torch.rand(*shape, self.pairs.shape[0], generator=gen, dtype=dtype) - 1)
        c = torch.zeros(*shape, 2 * self.pairs.shape[0], dtype=dtype)
        c[..., 0::2] = a - 1
        return self.from_coeffs(c)


class CommutantGroup(QKGroup):
    """ESPR, circulant STRING and any rotary part without a closed form (the default of
    RotaryPositional.qk_symmetry): U^T must commute with every relative rotation M = R(r_i)^T R(r_j); the
    commutant is the null space of X -> X M - M X (orthonormal basis in the Frobenius inner product).

    Args:
        head_dim (int): Dh.
        basis (k, Dh, Dh): `commutant_basis` of the relative rotations.

    Examples:
        >>> import torch
        >>> from symformer.positional import ESPR
        >>> from symformer.teleport import CommutantGroup, commutant_basis
        >>> espr = ESPR(4, commuting_init=False, seed=0).double()
        >>> rel = espr.relative_rotations()  # (N*N, Dh, Dh) at generic positions
        >>> grp = CommutantGroup(4, commutant_basis(rel))
        >>> U = grp.random((), torch.Generator().manual_seed(0))
        >>> float(grp.contains(U, rel)) < 1e-10
        True
    """

    kind = "commutant"

    def near_identity(self, shape, alpha, gen, dtype=torch.float64):
        # near the identity only: coefficients in U[-alpha, alpha] on a Frobenius-orthonormal basis,
        # the same radius as the GL diagonal sampling (whose basis E_rr is orthonormal too)
        c = alpha * (2 * torch.rand(*shape, self.dimension, generator=gen, dtype=dtype) - 1)
        return self.from_coeffs(c)


class BlockGroup(QKGroup):
    """blockdiag(U_r, U_p): `inner` (a group on the first r coordinates) times GL(Dh - r) on the rest (a partial
    rotary part leaves those unrotated: positional.partial). The algebra is the direct sum, so its basis is the
    inner basis embedded plus every E_ij of the pass-through block (built only when asked for: Dh - r = 32 at
    Dh = 128 is 1024 dense (Dh, Dh) matrices); elements are built block by block.

    Args:
        head_dim (int): Dh >= inner.head_dim.
        inner (QKGroup): the group on the first r = inner.head_dim coordinates.

    Examples:
        >>> import torch
        >>> from symformer.positional import pair_indices
        >>> from symformer.teleport import BlockGroup, HGroup
        >>> grp = BlockGroup(6, HGroup(4, pair_indices(4, "half")))  # H on 4 rotated coordinates, GL on 2
        >>> grp.dimension, grp.kind
        (8, 'partial-h')
        >>> U = grp.random((), torch.Generator().manual_seed(0))
        >>> bool((U[:4, 4:] == 0).all() and (U[4:, :4] == 0).all())  # blockdiag(U_r, U_p)
        True
    """

    def __init__(self, head_dim: int, inner: QKGroup):
        if not isinstance(inner, QKGroup):
            fail("inner", type(inner).__name__, "a QKGroup (the group on the rotated block)", TypeError)
        check_int("head_dim", head_dim, inner.head_dim)
        self.head_dim, self.inner, self.free = head_dim, inner, head_dim - inner.head_dim
        self._basis = None
        self.kind = f"partial-{inner.kind}"

    @property
    def dimension(self) -> int:
        return self.inner.dimension + self.free**2

    def basis(self, dtype=torch.float64) -> torch.Tensor:
        k = self.inner.dimension
        pass_basis = torch.eye(self.free**2, dtype=dtype).view(-1, self.free, self.free)
        return torch.cat(
            (
                block_diag(self.inner.basis(dtype), pass_basis.new_zeros(k, self.free, self.free)),
                block_diag(pass_basis.new_zeros(self.free**2, *(self.inner.head_dim,) * 2), pass_basis),
            )
        )

    def from_coeffs(self, c: torch.Tensor) -> torch.Tensor:
        k, eye = self.inner.dimension, torch.eye(self.free, dtype=c.dtype, device=c.device)
        return block_diag(
            self.inner.from_coeffs(c[..., :k]), eye + c[..., k:].reshape(*c.shape[:-1], self.free, self.free)
        )

    def random(self, shape, gen, dtype=torch.float64, scale: float = 0.5):
        return block_diag(
            self.inner.random(shape, gen, dtype, scale), QKGroup(self.free).random(shape, gen, dtype, scale)
        )

    def near_identity(self, shape, alpha, gen, dtype=torch.float64):
        return block_diag(
            self.inner.near_identity(shape, alpha, gen, dtype),
            QKGroup(self.free).near_identity(shape, alpha, gen, dtype),
        )


class TrivialGroup(QKGroup):
    """{I}: layers whose W_Q / W_K no invertible U passes through (Qwen3's per-head RMSNorm on q and k before the
    rotation: norm(U q) != U norm(q) unless U is orthogonal and commutes with the norm weights, which trained
    weights leave to +-1); their Q/K symmetry acts on the norm weights instead (`attention_parts.NormScaling`).

    Args:
        head_dim (int): Dh.

    Examples:
        >>> import torch
        >>> from symformer.teleport import TrivialGroup
        >>> grp = TrivialGroup(4)
        >>> grp.dimension, torch.equal(grp.random((2,), torch.Generator()), torch.eye(4).double().expand(2, 4, 4))
        (0, True)
    """

    kind = "trivial"

    def __init__(self, head_dim: int):
        super().__init__(head_dim, torch.zeros(0, head_dim, head_dim, dtype=torch.float64))

    def random(self, shape, gen, dtype=torch.float64, scale: float = 0.5):
        return torch.eye(self.head_dim, dtype=dtype).expand(*shape, -1, -1).clone()

    def near_identity(self, shape, alpha, gen, dtype=torch.float64):
        return self.random(shape, gen, dtype)


class DiagonalGroup(QKGroup):
    """The invertible diagonal matrices: the V/O group of a layer whose attention output is gated elementwise before
    the output projection (Qwen3-Next, AFMoE: o_proj(sigmoid(g) * A V)). sigmoid(g) * (A V D) = (sigmoid(g) * A V) D
    for diagonal D only, so V rows <- D V, O columns <- O D^{-1} keep the output; a generic V' in GL(d_h) does not.

    Args:
        head_dim (int): Dh.

    Examples:
        >>> import torch
        >>> from symformer.teleport import DiagonalGroup
        >>> grp = DiagonalGroup(4)
        >>> D = grp.random((), torch.Generator().manual_seed(0))
        >>> grp.dimension, torch.equal(D, torch.diag(torch.diagonal(D))), bool((torch.diagonal(D) != 0).all())
        (4, True, True)
    """

    kind = "diagonal"

    def __init__(self, head_dim: int):
        super().__init__(head_dim, torch.diag_embed(torch.eye(head_dim, dtype=torch.float64)))

    def from_coeffs(self, c: torch.Tensor) -> torch.Tensor:
        return torch.diag_embed(1 + c)

    def random(self, shape, gen, dtype=torch.float64, scale: float = 0.5):
        """diag(+-exp(scale z)): generic magnitudes and signs (the group holds every nonzero diagonal)."""
        mag = torch.exp(scale * torch.randn(*shape, self.head_dim, generator=gen, dtype=dtype))
        sign = 2 * torch.randint(0, 2, (*shape, self.head_dim), generator=gen).to(dtype) - 1
        return torch.diag_embed(sign * mag)


def diagonal_blocks(group: QKGroup, tol: float = 1e-6) -> torch.Tensor:
    """(Dh,) block index of each coordinate: D = diag(d) is in the group's algebra A iff d is constant on every
    block (the diagonal part of A is a unital algebra of diagonal matrices, hence spanned by the indicators of
    a partition). RoPE / H(d_h): the rotary pairs; GL: every coordinate alone; STRING, ESPR: computed.
    tol (relative): float32 level, since a float32 model's P (STRING) or generators (ESPR) make the basis exact
    only to float32 rounding, and an exact null direction (I is always in A) must not be lost to it.

    Args:
        group (QKGroup): a group whose algebra holds the identity.
        tol (float): relative tolerance of the null space.

    Returns:
        blocks (Dh,): int64 block index of each coordinate, numbered in order of first appearance.

    Examples:
        >>> from symformer.positional import pair_indices
        >>> from symformer.teleport import HGroup, QKGroup, diagonal_blocks
        >>> diagonal_blocks(HGroup(4, pair_indices(4, "half"))).tolist()  # RoPE: a pair shares its scale
        [0, 1, 0, 1]
        >>> diagonal_blocks(QKGroup(3)).tolist()  # GL: every coordinate alone
        [0, 1, 2]
    """
    if not isinstance(group, QKGroup):
        fail("group", type(group).__name__, "a QKGroup (GL, H, STRING, commutant)", TypeError)
    d = group.head_dim
    if group.dimension == 0:
        fail("group", type(group).__name__, "a group whose algebra holds the identity (GL, H, STRING, commutant)")
    if type(group) is QKGroup and group._basis is None:  # GL(d_h): every diagonal matrix
        return torch.arange(d)
    b = group.basis()
    off = (b * (1 - torch.eye(d, dtype=b.dtype))).reshape(b.shape[0], -1)
    # coefficients c with sum_k c_k B_k diagonal: the null space of c -> off^T c
    _, sv, vh = torch.linalg.svd(off.T, full_matrices=True)
    rank = int((sv > tol * max(float(sv.max()) if sv.numel() else 0.0, 1.0)).sum())
    diag = vh[rank:] @ torch.diagonal(b, dim1=-2, dim2=-1)  # (r, Dh): spans the diagonal part of A
    diag = diag / diag.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    blocks = torch.full((d,), -1, dtype=torch.long)
    for i in range(d):  # i and j share a block iff every spanning vector agrees on them
        if blocks[i] < 0:
            same = (diag - diag[:, i : i + 1]).abs().amax(0) <= 10 * tol
            blocks[same & (blocks < 0)] = int(blocks.max()) + 1
    return blocks


def commutant_basis(rel: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """Orthonormal basis (k, D, D) of {X : X M = M X for all M in rel (R, D, D)}.

    Args:
        rel (R, D, D): the matrices to commute with.
        tol (float): relative eigenvalue tolerance of the null space.

    Returns:
        basis (k, D, D): float64, orthonormal in the Frobenius inner product.

    Examples:
        >>> import torch
        >>> from symformer.positional import RoPE
        >>> from symformer.teleport import commutant_basis
        >>> rel = RoPE(4).double().relative_rotations(torch.arange(6))  # (36, 4, 4)
        >>> b = commutant_basis(rel)
        >>> b.shape  # RoPE with distinct frequencies: H(d_h)'s algebra, 2 per pair
        torch.Size([4, 4, 4])
        >>> torch.allclose(b.flatten(1) @ b.flatten(1).T, torch.eye(4, dtype=torch.float64))
        True
        >>> bool(((b[:, None] @ rel - rel @ b[:, None]).abs().max() < 1e-10))
        True
    """
    rel = rel.to(torch.float64)
    d = rel.shape[-1]
    eye = torch.eye(d, dtype=torch.float64)
    # vec(X M - M X) = (M^T kron I - I kron M) vec(X) with row-major vec: use the Gram of the stacked maps
    gram = torch.zeros(d * d, d * d, dtype=torch.float64)
    for m in rel:
        k = torch.kron(eye, m.T.contiguous()) - torch.kron(m.contiguous(), eye)
        gram += k.T @ k
    evals, evecs = torch.linalg.eigh(gram)
    null = evecs[:, evals <= tol * max(float(evals.abs().max()), 1.0)]
    return null.T.reshape(-1, d, d)


def relative_rotations(rotary: RotaryPositional, positions: torch.Tensor) -> torch.Tensor:
    """All M(r_i)^T M(r_j) for the given positions (N, C) -> (N*N, Dh, Dh) in float64 (the rotations the
    logits see, `RotaryPositional.logit_matrix`).

    Args:
        rotary (RotaryPositional): the rotary part.
        positions (N, C): positions.

    Returns:
        rel (N*N, Dh, Dh): float64, entry i N + j is M(r_i)^T M(r_j).

    Examples:
        >>> import torch
        >>> from symformer.positional import RoPE
        >>> from symformer.teleport import relative_rotations
        >>> rope = RoPE(4).double()
        >>> rel = relative_rotations(rope, torch.arange(3)[:, None])
        >>> rel.shape, torch.allclose(rel[0 * 3 + 2], rope.matrix(torch.tensor([[2]]))[0])  # R(0)^T R(2) = R(2)
        (torch.Size([9, 4, 4]), True)
    """
    return rotary.relative_rotations(positions)


def qk_group_for(rotary: RotaryPositional | None, head_dim: int, positions: torch.Tensor | None = None) -> QKGroup:
    """The Q/K group allowed by a layer's rotary part (None: no rotation, GL(d_h)), as the part declares it
    (`RotaryPositional.qk_symmetry`): GL, H on the rotary pairs, P H P^T, or a commutant."""
    if rotary is None:
        return QKGroup(head_dim)
    if not isinstance(rotary, RotaryPositional):
        fail("positional", type(rotary).__name__, "a RotaryPositional part (or None)", TypeError)
    try:
        sym = rotary.qk_symmetry(positions)
    except NotImplementedError as e:  # a part that declares neither its group nor its rotation matrices
        fail(
            "positional",
            type(rotary).__name__,
            f"a rotary part with a known symmetry group ({e} is missing: define qk_symmetry or matrix)",
        )
    r = head_dim if sym.rotary_dim is None else int(sym.rotary_dim)
    if sym.kind == "h":
        grp = HGroup(r, sym.pairs, orth=sym.orth)
    elif sym.kind == "commutant":
        grp = CommutantGroup(r, commutant_basis(sym.relative))
    else:
        grp = QKGroup(r)
    return grp if r == head_dim else BlockGroup(head_dim, grp)
