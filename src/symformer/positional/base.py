"""One interface per kind of positional part.

* `AdditivePositional` adds a vector to each token embedding: `forward(x, positions) -> x`.
* `RotaryPositional` acts on queries and keys per attention layer. Everything other packages (models,
  teleport, diagnostics, experiments) may use of a rotary part is declared here, so a new part is one file
  in `positional/` plus one `POSITIONAL.register` line, and nobody probes class names or attributes:
    - `forward(q, k, positions, key_positions=None) -> (q, k)` with q, k (B, H, N, Dh), positions (B, N, C)
      or (N, C), or (N,) token positions when C = 1; `rotate(x, positions)` the same rotation of one tensor
      without validation;
    - `matrix(positions)` the (..., N, Dh, Dh) rotations R(r); `logit_matrix(positions)` what the logits
      see, q_i^T M_i^T M_j k_j (R(r) except for ESPR, Pi_act R(r) Pi_act, T4.3);
    - `generators()` the skew generators L (C, Dh, Dh) (T1.1); `rotation_parts()` (L, P, d_act) of the
      form Pi_act exp(A(r)) P Pi_act (T3.5, T4.3; P = I and d_act = Dh unless overridden);
      `commuting` whether the generators commute by construction (T2.9: exactly relative logits);
    - `penalty()` a term for the training loss (0.0 unless overridden; `models.penalties` sums them);
    - `qk_symmetry(positions)` the group of U with q -> U q, k -> U^{-T} k that leaves every logit
      unchanged (a `QKSymmetry`: GL, H on given pairs, P H P^T, or the commutant of the relative
      rotations), and `symmetry_parameters()` the trainable parameters that group depends on;
    - `can_fold` / `fold_into(q_proj, k_proj)` where a fixed basis change can be merged into W_Q / W_K;
    - `scale` the logit scale the attention must use (None: 1/sqrt(Dh)).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import nn

from symformer._rng import seeded_generator
from symformer._torch_compat import autocast_enabled
from symformer._validation import check_choice, check_tensor, fail

QK_SYMMETRY_KINDS = ("gl", "h", "commutant")
#: the dtypes q, k (and x for additive parts) may have; 16-bit ones are computed in float32 and cast back once
INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LOW_PRECISION = (torch.float16, torch.bfloat16)
_SUPPORTED = "float16, bfloat16, float32 or float64"
_POSITION_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype a part computes in for inputs / parameters of these dtypes: float64 if any is float64, else
    float32 (16-bit inputs are rotated in float32 and the result rounded once)."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


#: device types without float64 arithmetic: their tables stay in the compute dtype
_NO_FLOAT64 = ("mps",)


def table_dtype(cd: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a part's angles, phases and exponentials are computed in before its tables are rounded to the
    compute dtype cd: float64 wherever the device has it. In float32, the angle n beta alone is off by up to
    n 2^-24 rad (5e-4 at n = 8192: half a float16 ulp of the output, 4000 float32 ulps), so float32 tables would
    round a 16-bit output twice; float64 tables rounded to float32 keep it one rounding from the float64 result."""
    return torch.float64 if cd == torch.float32 and device.type not in _NO_FLOAT64 else cd


def master_dtype() -> torch.dtype:
    """The dtype of a new part's parameters (its master copy): torch's default dtype, or float32 while that is a
    16-bit type (a model built in 16 bits, e.g. from_pretrained(dtype=torch.bfloat16), keeps float32 frequencies)."""
    dt = torch.get_default_dtype()
    return torch.float32 if dt in LOW_PRECISION else dt


def check_input_dtype(name: str, x: torch.Tensor) -> torch.Tensor:
    """TypeError unless x (a query, key or embedding) has one of INPUT_DTYPES (integer, complex, float8 cannot run)."""
    if not isinstance(x, torch.Tensor):
        fail(name, type(x).__name__, "a torch.Tensor", TypeError)
    if x.dtype not in INPUT_DTYPES:
        fail(name, f"dtype {x.dtype}", f"a tensor of dtype {_SUPPORTED}", TypeError)
    return x


def check_positions(
    positions: torch.Tensor, coord_dim: int, n: int | None = None, name: str = "positions", batch: int | None = None
) -> torch.Tensor:
    """Positions (N, C) or (B, N, C), integer (int64: converted exactly to the compute dtype inside the part) or
    float32 / float64. 16-bit floats are refused: bfloat16 cannot hold 257, float16 2049 (no silent rounding).
    batch: the batch of the tensor they position ((B, N, C) positions need B equal to it, or 1).

    Args:
        positions (N, C): the positions to check, or (B, N, C).
        coord_dim (int): C, the coordinates a part expects.
        n (int | None): the number of tokens N they must position (None: any).
        name (str): the argument name the error message gives.
        batch (int | None): the batch B of the tensor they position (None: any).

    Returns:
        positions (N, C): the same tensor.

    Raises:
        ValueError: a 16-bit float dtype, a wrong rank, last dimension, token count or batch.
        TypeError: a complex or boolean dtype.

    Examples:
        >>> import torch
        >>> from symformer.positional import check_positions
        >>> pos = torch.arange(10).view(5, 2)
        >>> check_positions(pos, coord_dim=2, n=5) is pos
        True
        >>> check_positions(pos, coord_dim=3)
        Traceback (most recent call last):
        ...
        ValueError: positions: got 'shape (5, 2)', expected a last dimension equal to the coordinate dimension C=3
    """
    if (
        isinstance(positions, torch.Tensor)
        and positions.is_floating_point()
        and positions.dtype not in (torch.float32, torch.float64)
    ):  # 16-bit (and float8) floats
        fail(
            name,
            f"dtype {positions.dtype}",
            "int64 or float32 positions (pass int64 or float32: a 16-bit float "
            "rounds positions above 256 in bfloat16, 2048 in float16)",
        )
    if (
        isinstance(positions, torch.Tensor)
        and not positions.is_floating_point()
        and positions.dtype not in _POSITION_INTS
    ):
        fail(name, f"dtype {positions.dtype}", "int64 or float32 / float64 positions", TypeError)
    check_tensor(name, positions, (2, 3), floating=False)
    if positions.shape[-1] != coord_dim:
        hint = (
            " (batched token positions (B, N) need a last axis: positions[..., None])"
            if coord_dim == 1 and positions.ndim == 2
            else ""
        )
        fail(
            name,
            f"shape {tuple(positions.shape)}",
            f"a last dimension equal to the coordinate dimension C={coord_dim}{hint}",
        )
    if n is not None and positions.shape[-2] != n:
        fail(name, f"{positions.shape[-2]} positions", f"one per token ({n})")
    if batch is not None and positions.ndim == 3 and positions.shape[0] not in (1, batch):
        fail(
            name,
            f"shape {tuple(positions.shape)} (batch {positions.shape[0]})",
            f"(N, C) positions shared by the batch or (B, N, C) with B = {batch}, the batch of the queries/keys",
        )
    return positions


def token_positions(positions, coord_dim: int, name: str = "positions"):
    """A 1-D tensor (N,) of token positions (e.g. torch.arange(N), integer or float) as (N, 1) when coord_dim = 1;
    ValueError naming `name` for a 1-D tensor when coord_dim > 1 (which coordinate it holds is unknown). Anything
    else is returned as is for check_positions. A 2-D tensor is always (N, C): (B, N) token positions would be
    ambiguous with (N, C) and need their last axis, positions[..., None]."""
    if not isinstance(positions, torch.Tensor) or positions.ndim != 1:
        return positions
    if coord_dim != 1:
        fail(
            name,
            f"a 1-D tensor of shape {tuple(positions.shape)}",
            f"(N, {coord_dim}) or (B, N, {coord_dim}) positions (a 1-D tensor is token positions, for coord_dim 1)",
        )
    return positions[:, None]


def _accept_token_positions(method):
    """Let a part's method take 1-D token positions (`token_positions`) in its `positions` / `key_positions`
    arguments, so every part accepts torch.arange(N) without each one reshaping."""
    names = [p for p in inspect.signature(method).parameters if p != "self"]
    slots = {n: names.index(n) for n in ("positions", "key_positions") if n in names}
    if not slots:
        return method

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if len(args) > min(slots.values()) or kwargs:
            args = list(args)
            for n, i in slots.items():
                if i < len(args):
                    args[i] = token_positions(args[i], self.coord_dim, n)
                elif n in kwargs:
                    kwargs[n] = token_positions(kwargs[n], self.coord_dim, n)
        return method(self, *args, **kwargs)

    run.token_positions = True
    return run


@dataclass(frozen=True)
class QKSymmetry:
    """Which U (q -> U q, k -> U^{-T} k, per head) leave q^T M k unchanged for every relative rotation M.

    kind "gl": every invertible U (no rotation, teleportation paper eq. (5)-(6));
    kind "h": H(d_h) of eq. (9) on the rotary `pairs` (m, 2), conjugated by `orth` when given (P H P^T);
    kind "commutant": every U whose transpose commutes with each of `relative` (R, Dh, Dh) (float64).
    rotary_dim: the group above acts on the first rotary_dim coordinates only (pairs, orth, relative of that size),
    GL on the others (PartialRotary: they are not rotated); None: on the whole head.

    Args:
        kind (str): "gl", "h" or "commutant".
        pairs (m, 2): the coordinate pairs H(d_h) acts on (kind "h"; `pair_indices`).
        orth (Dh, Dh): the orthogonal P of P H P^T (kind "h", STRING), or None.
        relative (R, Dh, Dh): the relative rotations the group commutes with (kind "commutant").
        rotary_dim (int | None): the rotated coordinates, or None for the whole head.

    Examples:
        >>> import torch
        >>> from symformer.positional import RoPE
        >>> sym = RoPE(8).qk_symmetry()  # H(d_h) on RoPE's pairs
        >>> sym.kind, sym.pairs.shape
        ('h', torch.Size([4, 2]))
        >>> U = torch.eye(8)  # an element of H(d_h): on pair (0, 4) the block [[a, -b], [b, a]]
        >>> U[0, 0], U[4, 4], U[4, 0], U[0, 4] = 2.0, 2.0, 1.0, -1.0
        >>> q, k = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8)
        >>> qr, kr = RoPE(8)(q, k, torch.arange(3))
        >>> qu, ku = RoPE(8)(q @ U.T, k @ torch.linalg.inv(U), torch.arange(3))  # q -> U q, k -> U^{-T} k
        >>> torch.allclose(qu @ ku.transpose(-1, -2), qr @ kr.transpose(-1, -2), atol=1e-5)
        True
    """

    kind: str
    pairs: torch.Tensor | None = None
    orth: torch.Tensor | None = None
    relative: torch.Tensor | None = None
    rotary_dim: int | None = None

    def __post_init__(self):
        check_choice("kind", self.kind, QK_SYMMETRY_KINDS)
        if self.kind == "h" and self.pairs is None:
            fail("pairs", None, "the (m, 2) rotary pairs for kind 'h'")
        if self.kind == "commutant" and self.relative is None:
            fail("relative", None, "the (R, Dh, Dh) relative rotations for kind 'commutant'")
        # The group's structure is small and lives on the CPU, where its elements are drawn (the same draws on every
        # device); teleport.groups moves an element to the parameters' device when it acts.
        for name in ("pairs", "orth", "relative"):
            t = getattr(self, name)
            if t is not None and t.device.type != "cpu":
                object.__setattr__(self, name, t.detach().cpu())


def default_positions(coord_dim: int, n: int = 12, seed: int | None = 0) -> torch.Tensor:
    """Generic positions for the commutant: random points in [-4, 4]^C (fixed seed).

    Args:
        coord_dim (int): C.
        n (int): the number of points N.
        seed (int | None): their draw (None: torch's global generator).

    Returns:
        positions (N, C): float64 points in [-4, 4]^C, the same for the same seed.

    Examples:
        >>> import torch
        >>> from symformer.positional import default_positions
        >>> pos = default_positions(2)
        >>> pos.shape, pos.dtype, bool(pos.abs().max() <= 4)
        (torch.Size([12, 2]), torch.float64, True)
        >>> torch.equal(pos, default_positions(2))
        True
    """
    g = seeded_generator(seed)
    return 8 * torch.rand(n, coord_dim, generator=g, dtype=torch.float64) - 4


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter or buffer (the CPU if it has none)."""
    return next((p.device for p in list(module.parameters()) + list(module.buffers())), torch.device("cpu"))


def module_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of a module's first floating parameter or buffer (the default dtype if it has none)."""
    return next(
        (p.dtype for p in list(module.parameters()) + list(module.buffers()) if p.is_floating_point()),
        torch.get_default_dtype(),
    )


def relative_products(r: torch.Tensor) -> torch.Tensor:
    """All M_i^T M_j for matrices r (..., N, D, D) -> (K, D, D); leading dims (heads, batch) are folded."""
    if r.ndim > 3:
        r = r.reshape(-1, *r.shape[-3:])
        return (r.transpose(-1, -2)[:, :, None] @ r[:, None, :]).reshape(-1, r.shape[-1], r.shape[-1])
    return (r.transpose(-1, -2)[:, None] @ r[None, :]).reshape(-1, r.shape[-1], r.shape[-1])


def _autocast_off(method):
    """Run a part's method with autocast off on its input's device: autocast would run the part's matmuls
    (positions @ beta^T, q P, ESPR's maps) in 16 bits; the part computes in float32 itself and returns the input
    dtype (float32 in under autocast: float32 out; the next matmul is where autocast casts)."""

    @functools.wraps(method)
    def run(self, x, *args, **kwargs):
        dev = x.device.type if isinstance(x, torch.Tensor) else "cpu"
        if autocast_enabled(dev):
            with torch.autocast(dev, enabled=False):
                return method(self, x, *args, **kwargs)
        return method(self, x, *args, **kwargs)

    run.autocast_off = True
    return run


class Float32Master(nn.Module):
    """The precision rules every positional part follows (designed once here, like HF's `_keep_in_fp32_modules`,
    but applied to `.to()` too):

    * a float32 master: a cast of the module (or of a model holding it) to a 16-bit floating dtype -- `.to(dtype)`,
      `.half()`, `.bfloat16()`, `.type()` -- leaves its floating parameters and buffers (frequencies, generators,
      Cayley parameters, circulant columns, learned tables) in their dtype (float32, or float64 when the user made
      them so) and still applies device moves. A part built while the default dtype is 16-bit (`master_dtype`,
      what from_pretrained(dtype=...) and _from_config(cfg, dtype=...) do) starts in float32. So an optimizer sees
      float32 parameters with float32 gradients, `state_dict` holds float32 tensors, and loading a 16-bit
      state_dict upcasts into them (also with assign=True). Casts to float32 / float64 apply as usual;
    * forward and rotate run with autocast off (`_autocast_off`) and compute in float32 (float64 for float64
      inputs); the output has the input's dtype;
    * forward, rotate, matrix, logit_matrix, qk_symmetry and relative_rotations take 1-D token positions (N,)
      (integer or float) as (N, 1) when coord_dim = 1 (`token_positions`)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("forward", "rotate"):
            f = cls.__dict__.get(name)
            if f is not None and not getattr(f, "autocast_off", False):
                setattr(cls, name, _autocast_off(f))
        for name in ("forward", "rotate", "matrix", "logit_matrix", "qk_symmetry", "relative_rotations"):
            f = cls.__dict__.get(name)
            if f is not None and not getattr(f, "token_positions", False):
                setattr(cls, name, _accept_token_positions(f))

    def _apply(self, fn, recurse=True):
        def keep(t):
            out = fn(t)
            if isinstance(out, torch.Tensor) and out.dtype in LOW_PRECISION and t.dtype not in LOW_PRECISION:
                return t.to(device=out.device)  # the move, without the rounding (or Module.type's cast of a flag)
            return out

        return super()._apply(keep, recurse)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        for name, t in (*self._parameters.items(), *self._buffers.items()):
            given = state_dict.get(prefix + name)
            if (
                t is not None
                and isinstance(given, torch.Tensor)
                and given.dtype in LOW_PRECISION
                and t.is_floating_point()
                and t.dtype not in LOW_PRECISION
            ):
                state_dict[prefix + name] = given.to(t.dtype)  # load_state_dict hands a copy of the user's dict
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class AdditivePositional(Float32Master):
    """Base of every additive part: `forward(x, positions)` returns x (B, N, D) plus an encoding of the positions
    (N, C) or (B, N, C), in x's dtype.

    Examples:
        >>> import torch
        >>> from symformer.positional import AdditivePositional, LearnedPE, SinusoidalPE
        >>> x, pos = torch.randn(2, 3, 8), torch.arange(3)[:, None]
        >>> [isinstance(p, AdditivePositional) and p(x, pos).shape == x.shape for p in (SinusoidalPE(8), LearnedPE(8))]
        [True, True]
    """

    kind = "additive"
    coord_dim: int


class RotaryPositional(Float32Master):
    """Base of every rotary part (module docstring): subclasses implement `forward`, `rotate`, `matrix`
    and `generators`, and override the rest where their structure differs from the defaults.

    Examples:
        >>> import torch
        >>> from symformer.positional import ESPR, STRING, CirculantSTRING, RoPE, RotaryPositional
        >>> pos, x = torch.arange(4), torch.randn(1, 1, 4, 8, dtype=torch.float64)  # (B, H, N, Dh)
        >>> for cls in (RoPE, STRING, CirculantSTRING, ESPR):
        ...     part = cls(head_dim=8, seed=0).double()
        ...     q, k = part(x, x, pos)
        ...     mx = (part.logit_matrix(pos) @ x[0, 0, :, :, None])[..., 0]  # M(r_i) x_i, (N, Dh)
        ...     assert isinstance(part, RotaryPositional) and torch.allclose(q[0, 0] @ k[0, 0].T, mx @ mx.T), cls
    """

    kind = "rotary"
    coord_dim: int
    head_dim: int
    #: the generators commute by construction (RoPE, STRING, circulant STRING): logits are exactly relative
    commuting = True
    #: the pair layouts the part rotates in ("half": HF's rotate-half, "interleaved": GLM's, rope-vit's); () for a part
    #: without coordinate pairs (circulant STRING acts in the Fourier basis)
    pairings: tuple[str, ...] = ()
    #: the part may rotate the first coordinates of a head only (PartialRotary, MLA's rope blocks); False where its
    #: logit scale is stated for a whole projected head (ESPR's 1/sqrt(d_act), T4.4)
    partial_head = True

    @classmethod
    def from_frequencies(cls, inv_freq: torch.Tensor, pairing: str = "half", **options) -> RotaryPositional:
        """A 1-D part on 2 len(inv_freq) coordinates that starts as the RoPE with these frequencies (a model's own
        `inv_freq`, HF's rotary table) in pair layout `pairing` (one of `pairings`); `options` go to the constructor.
        What the Hugging Face patch builds a part with; NotImplementedError where a part cannot start from RoPE."""
        raise NotImplementedError(f"{cls.__name__}.from_frequencies")

    @property
    def scale(self) -> float | None:
        return None

    # ----- rotations ---------------------------------------------------------------------------
    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """R(r) x for x (..., N, Dh) without validation (what forward applies to q and to k).

        Args:
            x (..., N, Dh): queries or keys, e.g. (B, H, N, Dh).
            positions (N, C): their positions ((B, N, C) for x (B, H, N, Dh); (N,) token positions when C = 1).

        Returns:
            out (..., N, Dh): the rotated x, in x's dtype.
        """
        raise NotImplementedError(f"{type(self).__name__}.rotate")

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) (..., N, Dh, Dh).

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            R (..., N, Dh, Dh): the rotation at each position; a part with per-head rotations puts the head axis
            before N: (H, N, Dh, Dh), or (B, H, N, Dh, Dh) for batched positions.
        """
        raise NotImplementedError(f"{type(self).__name__}.matrix")

    def logit_matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """M(r) with logits q_i^T M(r_i)^T M(r_j) k_j (..., N, Dh, Dh): R(r) unless a part projects.

        Args:
            positions (N, C): positions ((..., N, C) batched; (N,) token positions when C = 1).

        Returns:
            M (..., N, Dh, Dh): the map the logits read at each position.
        """
        return self.matrix(positions)

    def generators(self) -> torch.Tensor:
        """Skew generators L (C, Dh, Dh) (T1.1).

        Returns:
            L (C, Dh, Dh): one skew matrix per coordinate.
        """
        raise NotImplementedError(f"{type(self).__name__}.generators")

    def rotation_parts(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(L, P, d_act) with logits seen through Pi_act exp(A(r)) P Pi_act (T3.5, T4.3). A part whose
        orthogonal basis change lives inside its generators (STRING) has P = I and d_act = Dh.

        Returns:
            L (C, Dh, Dh): the skew generators.
            P (Dh, Dh): the orthogonal post-rotation.
            d_act (int): the active coordinates.
        """
        L = self.generators()
        return L, torch.eye(L.shape[-1], dtype=L.dtype, device=L.device), L.shape[-1]

    # ----- training ----------------------------------------------------------------------------
    def penalty(self) -> torch.Tensor | float:
        """A regulariser to add to the training loss (none: 0.0).

        Returns:
            penalty (Tensor | float): a 0-dim tensor, or 0.0 for a part without one.
        """
        return 0.0

    # ----- symmetry (teleportation) -------------------------------------------------------------
    def qk_symmetry(self, positions: torch.Tensor | None = None) -> QKSymmetry:
        """The Q/K group teleportation must use. Default: the commutant of every relative rotation
        M(r_i)^T M(r_j) at `positions` (N, C) (default: `default_positions`), computed in float64.

        Args:
            positions (N, C): where the relative rotations are taken (None: `default_positions`).

        Returns:
            symmetry (QKSymmetry): the group, "gl", "h" or "commutant".
        """
        return QKSymmetry("commutant", relative=self.relative_rotations(positions))

    def relative_rotations(self, positions: torch.Tensor | None = None) -> torch.Tensor:
        """All M(r_i)^T M(r_j) (N*N, Dh, Dh) in float64 for positions (N, C) (`logit_matrix`).

        Args:
            positions (N, C): positions (None: `default_positions`).

        Returns:
            rel (N*N, Dh, Dh): float64, entry i N + j is M(r_i)^T M(r_j).
        """
        pos = default_positions(self.coord_dim) if positions is None else positions
        with torch.no_grad():
            pos = pos.to(device=module_device(self), dtype=module_dtype(self))
            return relative_products(self.logit_matrix(pos).to(torch.float64))

    def symmetry_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters the Q/K group depends on (it is the stabiliser of their current value, so
        a teleport leaves the loss unchanged only at that value). Default: every trainable parameter.

        Returns:
            params (list[nn.Parameter]): those parameters ([] where the group does not depend on any).
        """
        return [p for p in self.parameters() if p.requires_grad]

    # ----- folding ------------------------------------------------------------------------------
    @property
    def can_fold(self) -> bool:
        """Whether `fold_into` can merge a fixed basis change into W_Q / W_K now."""
        return False

    def fold_into(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Merge a basis change into the query / key projections (logits unchanged).

        Args:
            q_proj (nn.Linear): the query projection, heads contiguous in its output features.
            k_proj (nn.Linear): the key projection.

        Raises:
            TypeError: the part has no basis change to fold (`can_fold` False).
        """
        fail(
            "self", f"a {type(self).__name__} module", "a rotary part with a basis change to fold (can_fold)", TypeError
        )

    # ----- validation ---------------------------------------------------------------------------
    def _check_qk(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, key_positions: torch.Tensor | None
    ) -> torch.Tensor:
        check_input_dtype("q", q)
        check_input_dtype("k", k)
        if k.dtype != q.dtype:
            fail("k", f"dtype {k.dtype}", f"the dtype of q ({q.dtype}): q and k must share one dtype", TypeError)
        check_tensor("q", q, 4)
        check_tensor("k", k, 4)
        for name, t in (("q", q), ("k", k)):
            if t.shape[-1] != self.head_dim:
                fail(name, f"head dim {t.shape[-1]}", f"head dim {self.head_dim}")
        check_positions(positions, self.coord_dim, q.shape[-2], batch=q.shape[0])
        if key_positions is None:  # the keys share the queries' positions
            return check_positions(positions, self.coord_dim, k.shape[-2], batch=k.shape[0])
        return check_positions(key_positions, self.coord_dim, k.shape[-2], "key_positions", batch=k.shape[0])


class NoPositional(nn.Module):
    """No positional information: the part a host builds for positional="none" (registered as "none"); it has no
    forward, the host reads its `kind` and leaves embeddings, queries and keys as they are.

    Examples:
        >>> from symformer.positional import NoPositional
        >>> from symformer.registry import POSITIONAL
        >>> part = POSITIONAL.build("none")
        >>> isinstance(part, NoPositional), part.kind, sum(p.numel() for p in part.parameters())
        (True, 'none', 0)
    """

    kind = "none"

    def __init__(self):
        super().__init__()
