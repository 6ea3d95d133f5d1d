"""ESPR: equivariant structured positional rotations with non-commuting generators (ESPR Tiers 1-4).

R_sp(r) = exp(A(r)) P with A(r) = sum_k r_k L_k (T1.3, T1.6), learnable skew generators L_k = G_k - G_k^T
that need not commute, and a Cayley post-rotation P = (I - S)(I + S)^{-1} (T3.1, T3.5).
Queries and keys are q~ = Pi_act R_sp(r) Pi_act q (T4.3) with the logit scale 1/sqrt(d_act) (T4.4).

Reading: Pi_act is fixed to the projector onto the FIRST d_act coordinates (U = I in T2.10, as in T8'.7);
with `commuting_init=True` the generators start as RoPE's block-diagonal generators on that block (in RoPE's
default "half" pairing unless `pairing` says otherwise) and zero on the null block, so at init L_k commute,
P = I lies in the set A (T3.4) and the model is exactly RoPE on d_act coordinates, in that pairing.
Training may move it away; `penalty()` pulls it back towards STRING.

Efficiency: the exponential (expm.expm_skew: scaling-and-squaring Pade whose backward is ~2x its forward,
where torch.linalg.matrix_exp's is ~7x) runs once per DISTINCT position of the call (a grid or a token
range repeats across the batch), shared by queries and keys, and is cached across calls (_cache.ValueCache) when
no gradient is needed; P is multiplied in per distinct position, so the rotation is one small batched matmul per
token (O(N d_act^2) per head). Finding the distinct positions reads values, so it runs only where that is free
(_validation.reads_values: CPU, eager). Elsewhere (an accelerator, torch.compile) nothing reads a value: 1-D
positions without gradient (decoding) use the spectral closed form exp(nL) = V diag(e^{-i n lam}) V^H of the
Hermitian i L (T0.11), a phase per eigenvalue and one small product per token, with the eigenpairs cached per
parameter change; the rest take one exponential per token with a fixed, masked squaring count
(expm.MAX_SQUARINGS).

Precision (base.Float32Master): the generators and the Cayley parameter are float32 masters; the exponentials, P
and the rotation run in float32 (float64 for float64 inputs) and a 16-bit q is rounded once.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from symformer._rng import check_seed, init_generator
from symformer._validation import check_choice, check_float, check_int, fail, reads_values
from symformer.positional import diagnostics as dg
from symformer.positional._cache import ValueCache
from symformer.positional.base import (
    RotaryPositional,
    check_positions,
    compute_dtype,
    master_dtype,
    table_dtype,
)
from symformer.positional.cayley import cayley, check_skew, skew
from symformer.positional.expm import SUPPORTED, expm_skew
from symformer.positional.rope import PAIRINGS, generators_from_beta, rope_frequencies


def distinct_positions(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reps (U, C), inverse (...,)): the distinct rows of positions (..., C) and, for each row, the index
    of its distinct value. reps are gathered from `positions`, so gradients still reach positions."""
    flat = positions.reshape(-1, positions.shape[-1])  # (..., C) -> (rows, C)
    _, inv = torch.unique(flat.detach(), dim=0, return_inverse=True)
    n_u = int(inv.max()) + 1 if inv.numel() else 0
    ar = torch.arange(flat.shape[0], device=flat.device)
    first = torch.full((n_u,), flat.shape[0], device=flat.device, dtype=ar.dtype)
    first = first.scatter_reduce(0, inv, ar, reduce="amin", include_self=True)
    return flat[first], inv.view(positions.shape[:-1])  # (U, C), (rows,) -> (...,)


def _power_table(e1: torch.Tensor, count: int) -> torch.Tensor:
    """[e1^0, e1^1, ..., e1^(count-1)] (count, n, n) by doubling: ~count batched products in log2 rounds."""
    table = torch.eye(e1.shape[-1], dtype=e1.dtype, device=e1.device)[None]
    power = e1  # e1^(len(table))
    while table.shape[0] < count:
        table = torch.cat((table, power @ table), 0)
        power = power @ power
    return table[:count]


def primitive_rays(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer positions as multiples g r0 of primitive vectors r0 (gcd of |coordinates| = 1).

    Args:
        idx (U, C): integer positions (int64).

    Returns:
        prims (U0, C): the distinct primitive vectors.
        which (U,): the row of prims each position is a multiple of (0 for the origin, unused there).
        g (U,): the multiple (0 for the origin).

    Examples:
        >>> import torch
        >>> from symformer.positional.espr import primitive_rays
        >>> prims, which, g = primitive_rays(torch.tensor([[0, 0], [2, 4], [1, 2], [0, 3]]))
        >>> prims.tolist(), which.tolist(), g.tolist()
        ([[0, 1], [1, 2]], [0, 1, 1, 0], [0, 2, 1, 3])
    """
    g = idx[:, 0].abs()
    for c in range(1, idx.shape[1]):
        g = torch.gcd(g, idx[:, c].abs())
    r0 = idx // g.clamp(min=1)[:, None]  # exact: g divides every coordinate
    prims, which = torch.unique(r0[g > 0], dim=0, return_inverse=True)
    full = torch.zeros_like(g)
    full[g > 0] = which
    return prims, full, g


def ray_exponentials(idx: torch.Tensor, expm_of) -> torch.Tensor | None:
    """exp(A(r)) for distinct integer positions from one exponential per primitive direction: A is linear, so
    A(g r0) = g A(r0) and exp(A(g r0)) = exp(A(r0))^g exactly (a matrix commutes with itself, T0.11), whether or
    not the generators commute. The powers along each ray cost one product per position (E^j = E^(j-1) E, batched
    over the rays still alive at j).

    Args:
        idx (U, C): distinct integer positions (int64).
        expm_of (callable): (U0, C) positions -> their exponentials exp(A(r)) (U0, n, n).

    Returns:
        E (U, n, n) or None: exp(A(r)) per row of idx; None where sharing saves little (fewer than a quarter of
        the positions are multiples, or the rays need more than two products per multiple).
    """
    prims, which, g = primitive_rays(idx)
    n_mult = int((g > 1).sum())
    if n_mult * 4 < idx.shape[0]:
        return None
    top = torch.zeros(prims.shape[0], dtype=g.dtype, device=g.device).scatter_reduce(0, which, g, "amax")
    if int((top - 1).clamp(min=0).sum()) > 2 * n_mult:
        return None
    e0 = expm_of(prims)  # (U0, n, n)
    n = e0.shape[-1]
    lookup = torch.zeros(prims.shape[0], int(top.max()) + 1, dtype=torch.long, device=g.device)
    ids = torch.arange(prims.shape[0], device=g.device)
    lookup[:, 1] = ids + 1  # row 0 of `mats` is the identity (the origin)
    mats, cur, offset = [torch.eye(n, dtype=e0.dtype, device=e0.device)[None], e0], e0, prims.shape[0] + 1
    for j in range(2, lookup.shape[1]):
        keep = top[ids] >= j
        ids, cur = ids[keep], cur[keep] @ e0[ids[keep]]  # E^j = E^(j-1) E on the rays that reach j
        lookup[ids, j] = torch.arange(offset, offset + ids.shape[0], device=g.device)
        mats.append(cur)
        offset += ids.shape[0]
    return torch.cat(mats)[lookup[which, g]]


class ESPR(RotaryPositional):
    """ESPR rotation on (B, H, N, Dh) queries/keys for C-dimensional positions.

    Args:
        head_dim (int): Dh.
        coord_dim (int): C, the coordinates of a position.
        d_act (int | None): the active dimension, even, <= head_dim (default head_dim).
        commuting_init (bool): start from RoPE's commuting generators on the active block, else add `init_scale`
            Gaussian noise, default 0.02, which makes them non-commuting.
        post_rotation (bool): learn P, else P = I.
        eps_comm_penalty (float): weight of eps_comm in `penalty()`.
        eta_mix_penalty (float): weight of eta_mix in `penalty()`.
        base (float | None): RoPE frequency base of the commuting init (None: the mode's, `RoPE`).
        mode (str | None): RoPE frequencies of the commuting init, "axial", "mixed" or "mixed_random" (default
            mixed for C > 1: rope-vit's RoPE-Mixed init of one head, the generators being shared by the heads).
        init_scale (float | None): std of the noise added to the initial generators.
        learnable (bool): learn the generators (and P).
        seed (int | None): initial noise and mixed directions; None draws them from torch's global generator, as
            nn.Linear does.
        exp_method (str): "auto": 1-D integer positions use exp(nL) = exp(L)^n, everything else one expm_skew
            exponential (Pade-13 in float64, solve-free Taylor-12 in float32) per distinct position; "pade": always
            the latter; "matrix_exp": always torch.linalg.matrix_exp, the reference.
        pairing (str): "half", the default of every rotary part, or "interleaved": the pairs of RoPE's generators in
            the commuting init, so that ESPR(head_dim) starts exactly as RoPE(head_dim) with the same pairing.

    `forward` returns q~, k~ of shape (B, H, N, Dh) with zeros on the null coordinates (so any attention
    core built for Dh works); the attention must use `scale` = 1/sqrt(d_act) (T4.4).

    Examples:
        >>> import torch
        >>> from symformer.positional import ESPR, RoPE
        >>> _ = torch.manual_seed(0)
        >>> q, k = torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64)
        >>> pos = torch.arange(5)
        >>> espr = ESPR(head_dim=8).double()  # the commuting init is RoPE
        >>> all(torch.allclose(a, b) for a, b in zip(espr(q, k, pos), RoPE(8).double()(q, k, pos)))
        True
        >>> espr = ESPR(head_dim=8, d_act=4, commuting_init=False, seed=0).double()  # free generators
        >>> qt, kt = espr(q, k, pos)
        >>> qt.shape, bool((qt[..., 4:] == 0).all()), espr.scale  # null coordinates zero, scale 1/sqrt(d_act)
        (torch.Size([1, 2, 5, 8]), True, 0.5)
        >>> M = espr.logit_matrix(pos)  # (N, Dh, Dh): Pi_act R_sp(r) Pi_act (T4.3)
        >>> torch.allclose(qt, (M @ q[..., None])[..., 0])
        True
    """

    commuting = False  # the generators are free (T1.1 without the commuting hypothesis)
    pairings = PAIRINGS
    partial_head = False  # the logit scale 1/sqrt(d_act) (T4.4) is stated for a whole projected head

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> ESPR:
        """ESPR on 2 len(inv_freq) coordinates (1-D positions). At its commuting init on the whole head (d_act =
        head_dim, commuting_init, no init_scale) its generators are RoPE's with beta = inv_freq (Dh/2,) in pair layout
        `pairing` (T2.3 with U = I), so it is exactly that RoPE until training moves it; otherwise its generators are
        the constructor's (RoPE's of `base` on the d_act block, plus init_scale noise). `options` go to the
        constructor."""
        dim = 2 * inv_freq.numel()
        part = cls(dim, 1, pairing=pairing, **options)
        if part.d_act == dim and options.get("commuting_init", True) and options.get("init_scale") is None:
            gen = generators_from_beta(inv_freq.reshape(-1, 1), dim, pairing)
            part.set_generators(gen.to(device=part.gen_param.device, dtype=part.gen_param.dtype))
        return part

    def __init__(
        self,
        head_dim: int,
        coord_dim: int = 1,
        d_act: int | None = None,
        commuting_init: bool = True,
        post_rotation: bool = True,
        eps_comm_penalty: float = 0.0,
        eta_mix_penalty: float = 0.0,
        base: float | None = None,
        mode: str | None = None,
        init_scale: float | None = None,
        learnable: bool = True,
        seed: int | None = None,
        exp_method: str = "auto",
        pairing: str = "half",
    ):
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, 2)
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        if d_act is None:
            if head_dim % 2:
                fail("head_dim", head_dim, "an even head dimension when d_act is not given (d_act = 2m, T2.10)")
            d_act = head_dim
        check_int("d_act", d_act, 2)
        if d_act > head_dim:
            fail("d_act", d_act, f"an active dimension <= head_dim={head_dim} (T2.10)")
        if d_act % 2:
            fail("d_act", d_act, "an even active dimension d_act = 2m (T2.10)")
        self.d_act = d_act
        self.eps_comm_penalty = check_float("eps_comm_penalty", eps_comm_penalty, 0.0)
        self.eta_mix_penalty = check_float("eta_mix_penalty", eta_mix_penalty, 0.0)
        noise = 0.0 if commuting_init and init_scale is None else (0.02 if init_scale is None else init_scale)
        check_float("init_scale", noise, 0.0)
        mode = mode or ("mixed" if coord_dim > 1 else "axial")
        beta = rope_frequencies(d_act, coord_dim, base, mode, check_seed(seed))  # RoPE(d_act, seed=seed)'s
        g0 = beta.new_zeros(coord_dim, head_dim, head_dim)
        self.pairing = check_choice("pairing", pairing, PAIRINGS)
        g0[:, :d_act, :d_act] = generators_from_beta(beta, d_act, self.pairing) / 2  # G - G^T = L0
        if noise:  # the commuting init without noise is RoPE's, drawn from no generator
            g0 = g0 + noise * torch.randn(g0.shape, generator=init_generator(seed), dtype=g0.dtype)
        dt = master_dtype()
        self.gen_param = nn.Parameter(g0.to(dt), requires_grad=learnable)
        self.exp_method = check_choice("exp_method", exp_method, ("auto", "pade", "matrix_exp"))
        check_skew("generators", self.generators().detach())  # skew by construction; checked once, not per call
        self.use_post_rotation = bool(post_rotation)
        if self.use_post_rotation:
            self.skew_param = nn.Parameter(torch.zeros(head_dim, head_dim, dtype=dt), requires_grad=learnable)
        else:
            self.register_parameter("skew_param", None)

    # ----- accessors -------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.d_act)  # T4.4

    def generators(self) -> torch.Tensor:
        """Skew generators L (C, Dh, Dh) (T1.1 without the commuting hypothesis).

        Returns:
            L (C, Dh, Dh): L_k = G_k - G_k^T, skew; they commute only at the commuting init.
        """
        return skew(self.gen_param)

    def _generators_in(self, dt: torch.dtype) -> torch.Tensor:
        """L computed in dt from the master parameters (float64 tables must not start from float32-rounded L: an
        error of 2^-24 in L is n 2^-24 in exp(n L))."""
        return skew(self.gen_param.to(dt))

    def _post_rotation_in(self, dt: torch.dtype) -> torch.Tensor:
        """P computed in dt (float32 or better) from the master parameters, as `_generators_in`."""
        if self.skew_param is None:
            return torch.eye(self.head_dim, dtype=dt, device=self.gen_param.device)
        return cayley(skew(self.skew_param.to(dt)), check=False)

    def skew_matrix(self) -> torch.Tensor:
        """The Cayley parameter S of P (zeros without post-rotation)."""
        if self.skew_param is None:
            return self.gen_param.new_zeros(self.head_dim, self.head_dim)
        return skew(self.skew_param)

    def post_rotation(self) -> torch.Tensor:
        """P = cayley(S) in SO(Dh) (T3.2); the identity without post-rotation. In the parameters' dtype, float32 for
        16-bit ones (no 16-bit CPU solve)."""
        return self._post_rotation_in(compute_dtype(self.gen_param.dtype))

    def projector(self) -> torch.Tensor:
        """Pi_act = diag(I_{d_act}, 0) (T2.10 with U = I)."""
        diag = torch.zeros(self.head_dim, dtype=self.gen_param.dtype, device=self.gen_param.device)
        diag[: self.d_act] = 1
        return torch.diag(diag)

    @torch.no_grad()
    def set_generators(self, generators: torch.Tensor) -> None:
        """Load skew generators (C, Dh, Dh) (ValueError if not skew or of the wrong shape).

        Args:
            generators (C, Dh, Dh): skew-symmetric; `generators()` returns them afterwards.
        """
        check_skew("generators", generators)
        if tuple(generators.shape) != (self.coord_dim, self.head_dim, self.head_dim):
            fail(
                "generators",
                f"shape {tuple(generators.shape)}",
                f"({self.coord_dim}, {self.head_dim}, {self.head_dim})",
            )
        self.gen_param.copy_(generators / 2)

    @torch.no_grad()
    def set_skew(self, s: torch.Tensor) -> None:
        """Load the Cayley parameter S (Dh, Dh) of the post-rotation.

        Args:
            s (Dh, Dh): skew-symmetric; P = cayley(S) afterwards (needs post_rotation=True).
        """
        check_skew("S", s)
        if self.skew_param is None:
            fail("S", "a post-rotation parameter", "post_rotation=True at construction")
        if tuple(s.shape) != (self.head_dim, self.head_dim):
            fail("S", f"shape {tuple(s.shape)}", f"({self.head_dim}, {self.head_dim})")
        self.skew_param.copy_(s / 2)

    # ----- rotations -------------------------------------------------------------------------
    def exp_generator(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """R_STR(r) = exp(A(r)) (..., Dh, Dh) for positions (..., C) (T1.6), one matrix_exp per row, in float32 or
        better (`dtype`, at least the generators' precision).

        Args:
            positions (..., C): positions, one exponential per row.
            dtype (torch.dtype | None): the compute dtype wanted (at least the generators').

        Returns:
            E (..., Dh, Dh): exp(sum_k r_k L_k).
        """
        dt = compute_dtype(self.gen_param.dtype, dtype or self.gen_param.dtype)
        # (..., C), (C, Dh, Dh) -> (..., Dh, Dh)
        a = torch.einsum("...c,cij->...ij", positions.to(dt), self._generators_in(dt))
        return self._expm(a)

    def _expm(self, a: torch.Tensor) -> torch.Tensor:
        if self.exp_method == "matrix_exp":
            return torch.linalg.matrix_exp(a)
        if a.dtype not in SUPPORTED:  # bfloat16 / float16 parameters: exponentiate in float32
            return expm_skew(a.float()).to(a.dtype)
        return expm_skew(a)

    def _exp_distinct(self, reps: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """exp(A(r)) for distinct positions (U, C). 1-D integer positions (token indices) use the exact
        identity exp(nL) = exp(L)^n (one generator commutes with itself, T0.11): one matrix_exp and
        log-depth batched products, much cheaper than a matrix_exp (and its backward) per position. Integer
        C-dimensional positions share it along rays: exp(A(g r0)) = exp(A(r0))^g (ray_exponentials)."""
        if self.exp_method != "auto" or reps.requires_grad or reps.numel() == 0:
            return self.exp_generator(reps, dtype)
        if self.coord_dim > 1:  # integer grids: one exponential per primitive direction (ray_exponentials)
            n, shared = reps.round(), None
            if torch.equal(n, reps):
                shared = ray_exponentials(n.long(), lambda p: self.exp_generator(p, dtype))
            return self.exp_generator(reps, dtype) if shared is None else shared
        r = reps[:, 0]
        n = r.round()
        hi = int(n.abs().max())
        if not torch.equal(n, r) or hi + 1 > 4 * r.numel() + 64:
            return self.exp_generator(reps, dtype)
        table = _power_table(self._expm(self._generators_in(dtype)[0]), hi + 1)
        idx = n.long()
        if idx.numel() == hi + 1 and torch.equal(idx, torch.arange(hi + 1, device=idx.device)):
            return table  # token positions 0..N-1 in order (the usual case): no gather, no sign select
        e = table[idx.abs()]
        return torch.where((idx < 0)[:, None, None], e.transpose(-1, -2), e)  # exp(-nL) = exp(nL)^T

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R_sp(r) = exp(A(r)) P (..., N, Dh, Dh) (T3.5). forward applies Pi_act R_sp(r) Pi_act.

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            R (..., N, Dh, Dh): exp(sum_k r_k L_k) P, orthogonal.
        """
        check_positions(positions, self.coord_dim)
        return self.exp_generator(positions) @ self.post_rotation()

    def active_matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """Pi_act R_sp(r) Pi_act restricted to the active block (..., N, d_act, d_act) (T4.3).

        Args:
            positions (N, C): positions ((..., N, C) batched).

        Returns:
            M (..., N, d_act, d_act): the top-left block of `matrix(positions)`.
        """
        d = self.d_act
        return self.matrix(positions)[..., :d, :d]

    def logit_matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """Pi_act R_sp(r) Pi_act (..., N, Dh, Dh): what the logits see (T4.3).

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            M (..., N, Dh, Dh): R_sp(r) restricted to the active block, zero elsewhere; forward's q~ = M(r) q.
        """
        pi = self.projector()
        return pi @ self.matrix(positions) @ pi

    def rotation_parts(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(L, P, d_act) (T3.5, T4.3)."""
        return self.generators(), self.post_rotation(), self.d_act

    def _token_maps(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Per token, (Pi_act exp(A(r)) P Pi_act)^T on the active block: (..., N, d_act, d_act), a
        transposed view (bmm takes it as is); cached when no gradient is needed (_cache.ValueCache). Where values
        are free to read (CPU, eager: _validation.reads_values) one exponential per DISTINCT position; elsewhere
        (an accelerator, torch.compile) nothing reads a value: 1-D positions without gradient take the spectral
        closed form (`_spectral_maps`), everything else one exponential per token with static squarings."""
        params = tuple(p for p in (self.gen_param, self.skew_param) if p is not None)
        needs_graph = torch.is_grad_enabled() and (any(p.requires_grad for p in params) or positions.requires_grad)
        dt = compute_dtype(dtype, self.gen_param.dtype)  # the maps in float32 (float64) whatever q's dtype
        cache = self.__dict__.setdefault("_maps_cache", ValueCache(2))
        if not needs_graph:
            hit = cache.lookup(("maps", dt), (positions, *params))
            if hit is not None:
                return hit
        key = positions
        # cached maps: exponentials in float64 where the device has it, rounded once (table_dtype; with a gradient to
        # learn, a float64 exponential and its backward per token would cost what float32 training saves)
        td = dt if needs_graph else table_dtype(dt, self.gen_param.device)
        positions = positions if positions.is_floating_point() else positions.to(td)  # int64: exact below 2^24
        if reads_values(positions):
            maps = self._distinct_maps(positions, td)
        elif not needs_graph and self.coord_dim == 1 and self.exp_method == "auto":
            maps = self._spectral_maps(positions, td)
        else:
            reps = positions.reshape(-1, self.coord_dim)  # (..., N, C) -> (rows, C)
            # (rows, d_act, d_act) -> (..., N, d_act, d_act)
            maps = self._maps_of(self.exp_generator(reps, td), td).reshape(*positions.shape[:-1], *(self.d_act,) * 2)
        return maps if needs_graph else cache.store(("maps", dt), (key, *params), maps.to(dt))

    def _maps_of(self, exps: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
        """(Pi_act exp(A) P Pi_act)^T (U, d_act, d_act) from exponentials (U, Dh, Dh) (T4.3), a transposed view."""
        d = self.d_act
        rows = exps[:, :d, :]  # Pi_act exp(A(r)), (U, d, Dh)
        m = rows @ self._post_rotation_in(dt)[:, :d] if self.use_post_rotation else rows[..., :d]  # T4.3
        return m.transpose(-1, -2)  # (U, d_act, d_act), transposed view

    def _distinct_maps(self, positions: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
        """_token_maps where values are read: exp(A(r)) P costs one matrix_exp and one (d_act x Dh)(Dh x d_act)
        product per DISTINCT position (a grid or a token range repeats across the batch)."""
        inv = None  # None: the distinct positions are the tokens themselves, in order (no gather)
        if positions.requires_grad:  # learned positions: each token needs its own d/dr, so no sharing
            reps = positions.reshape(-1, self.coord_dim)  # (..., N, C) -> (rows, C)
        else:
            reps, inv = distinct_positions(positions)
            if reps.shape[0] == inv.numel():  # all distinct (a grid): exps in token order, no (U, d, d) gather
                reps = positions.reshape(-1, self.coord_dim)  # (..., N, C) -> (rows, C)
                inv = None
        maps = self._maps_of(self._exp_distinct(reps, dt), dt)
        d = self.d_act
        return maps.reshape(*positions.shape[:-1], d, d) if inv is None else maps[inv]  # -> (..., N, d, d)

    def _spectrum(self, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(lam (Dh,), B^T (d_act, Dh), V_act^T (Dh, d_act)) with i L = V diag(lam) V^H (L skew, so i L is
        Hermitian: eigh, T0.11), hence exp(n L) = V diag(e^{-i n lam}) V^H for every real n, and
        Pi_act exp(n L) P Pi_act = V_act diag(e^{-i n lam}) B with B = (V^H P)[:, :d_act]. Computed in float64
        whatever dt (once per parameter change: cached by identity), then rounded to dt."""
        params = tuple(p for p in (self.gen_param, self.skew_param) if p is not None)
        cache = self.__dict__.setdefault("_spectrum_cache", ValueCache(2))
        hit = cache.lookup(("spectrum", dt), params)
        if hit is not None:
            return hit
        with torch.no_grad():
            gen = self._generators_in(torch.float64)[0]
            lam, v = torch.linalg.eigh(1j * gen)
            p = self._post_rotation_in(torch.float64)
            b = v.mH @ p[:, : self.d_act].to(v.dtype)
            cdt = torch.complex128 if dt == torch.float64 else torch.complex64
            # (Dh,), (d_act, Dh), (Dh, d_act)
            out = (lam.to(dt), b.mT.to(cdt).contiguous(), v[: self.d_act].mT.to(cdt).contiguous())
        return cache.store(("spectrum", dt), params, out)

    def _spectral_maps(self, positions: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
        """_token_maps for 1-D positions without gradient, no value read and no per-position exponential: with the
        eigenpairs of i L (`_spectrum`), the map of position n is Re(B^T diag(e^{-i n lam}) V_act^T), a phase per
        eigenvalue and one (d_act x Dh)(Dh x d_act) product (exact identity, T0.11: exp(n L) for every real n).
        A decoding step costs a handful of launches where an exponential costs ~60."""
        lam, bt, vt = self._spectrum(dt)
        th = positions * lam.neg()  # (..., N, Dh): the phases -n lam (positions (..., N, 1))
        z = torch.polar(torch.ones_like(th), th)
        # (..., N, d_act, Dh) @ (Dh, d_act) -> (..., N, d_act, d_act)
        return torch.view_as_real((bt * z.unsqueeze(-2)) @ vt)[..., 0]

    def _rotate_active(self, x: torch.Tensor, maps: torch.Tensor) -> torch.Tensor:
        """q~ = Pi_act exp(A(r)) P Pi_act q for x (B, H, N, Dh) (T4.3); maps from _token_maps. The products run in
        the maps' dtype (float32 / float64) and the result is rounded once to x's dtype."""
        d = self.d_act
        v = x[..., :d].to(maps.dtype)
        maps_t = maps
        b, h, n, _ = v.shape
        if maps.ndim == 3:  # shared positions: N batched (B*H x d) @ (d x d) products
            # (B, H, N, d) -> (N, B H, d) @ (N, d, d)
            out = torch.bmm(v.permute(2, 0, 1, 3).reshape(n, b * h, d), maps_t)
            out = out.view(n, b, h, d).permute(1, 2, 0, 3)  # (N, B H, d) -> (B, H, N, d)
        else:  # batched positions (B, N, d, d): B*N products (H x d) @ (d x d)
            out = (v.transpose(1, 2) @ maps_t).transpose(1, 2)  # (B, N, H, d) @ (B, N, d, d) -> (B, H, N, d)
        out = out.to(x.dtype)
        return F.pad(out, (0, self.head_dim - d)) if d < self.head_dim else out

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, key_positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q~ = Pi_act R_sp(r) Pi_act q and the same for k (T4.3), zero on the null coordinates; the attention must
        use `scale` = 1/sqrt(d_act) (T4.4).

        Args:
            q (B, H, Nq, Dh): queries, float16 / bfloat16 / float32 / float64.
            k (B, H, Nk, Dh): keys, q's dtype.
            positions (Nq, C): the queries' positions, integer or float32 / float64; also (B, Nq, C), or (Nq,) token
                positions when C = 1.
            key_positions (Nk, C): the keys' positions, in the forms `positions` takes (None: `positions`).

        Returns:
            q (B, H, Nq, Dh): q~, in q's dtype.
            k (B, H, Nk, Dh): k~, in k's dtype.
        """
        kp = self._check_qk(q, k, positions, key_positions)
        mq = self._token_maps(positions, q.dtype)
        mk = mq if key_positions is None else self._token_maps(kp, k.dtype)
        return self._rotate_active(q, mq), self._rotate_active(k, mk)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """q~ for x (B, H, N, Dh) without validation.

        Args:
            x (B, H, N, Dh): queries or keys.
            positions (N, C): their positions ((B, N, C) batched; (N,) token positions when C = 1).

        Returns:
            out (B, H, N, Dh): Pi_act R_sp(r) Pi_act x, in x's dtype.
        """
        return self._rotate_active(x, self._token_maps(positions, x.dtype))

    # ----- regularisation --------------------------------------------------------------------
    def penalty(self) -> torch.Tensor:
        """eps_comm_penalty * eps_comm(L) + eta_mix_penalty * eta_mix(P) (T6'.0): add to the training loss
        to move between STRING (both 0) and free ESPR.

        Returns:
            penalty (Tensor): 0-dim, differentiable in the generators and P (0 at the commuting init).
        """

        total = self.gen_param.new_zeros(())
        if self.eps_comm_penalty > 0:
            total = total + self.eps_comm_penalty * dg.eps_comm(self.generators())
        if self.eta_mix_penalty > 0 and self.d_act < self.head_dim:
            total = total + self.eta_mix_penalty * dg.eta_mix(self.post_rotation(), self.d_act)
        return total

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, coord_dim={self.coord_dim}, d_act={self.d_act}, "
            f"post_rotation={self.use_post_rotation}, pairing={self.pairing}"
        )
