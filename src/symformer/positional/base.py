"""One interface per kind of positional part.

* `AdditivePositional` adds a vector to each token embedding: `forward(x, positions) -> x`.
* `RotaryPositional` acts on queries and keys per attention layer. Everything other packages (models,
  teleport, diagnostics, experiments) may use of a rotary part is declared here, so a new part is one file
  in `positional/` plus one `POSITIONAL.register` line, and nobody probes class names or attributes:
    - `forward(q, k, positions, key_positions=None) -> (q, k)` with q, k (B, H, N, Dh), positions (B, N, C)
      or (N, C); `rotate(x, positions)` the same rotation of one tensor without validation;
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

from dataclasses import dataclass

import torch
from torch import nn

from symformer._validation import check_choice, check_tensor, fail

QK_SYMMETRY_KINDS = ("gl", "h", "commutant")


def check_positions(positions: torch.Tensor, coord_dim: int, n: int | None = None,
                    name: str = "positions") -> torch.Tensor:
    check_tensor(name, positions, (2, 3))
    if positions.shape[-1] != coord_dim:
        fail(name, f"shape {tuple(positions.shape)}",
             f"a last dimension equal to the coordinate dimension C={coord_dim}")
    if n is not None and positions.shape[-2] != n:
        fail(name, f"{positions.shape[-2]} positions", f"one per token ({n})")
    return positions


@dataclass(frozen=True)
class QKSymmetry:
    """Which U (q -> U q, k -> U^{-T} k, per head) leave q^T M k unchanged for every relative rotation M.

    kind "gl": every invertible U (no rotation, teleportation paper eq. (5)-(6));
    kind "h": H(d_h) of eq. (9) on the rotary `pairs` (m, 2), conjugated by `orth` when given (P H P^T);
    kind "commutant": every U whose transpose commutes with each of `relative` (R, Dh, Dh) (float64).
    rotary_dim: the group above acts on the first rotary_dim coordinates only (pairs, orth, relative of that size),
    GL on the others (PartialRotary: they are not rotated); None: on the whole head."""

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


def default_positions(coord_dim: int, n: int = 12, seed: int = 0) -> torch.Tensor:
    """Generic positions for the commutant: random points in [-4, 4]^C (fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    return 8 * torch.rand(n, coord_dim, generator=g, dtype=torch.float64) - 4


def module_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of a module's first floating parameter or buffer (the default dtype if it has none)."""
    return next((p.dtype for p in list(module.parameters()) + list(module.buffers()) if p.is_floating_point()),
                torch.get_default_dtype())


def relative_products(r: torch.Tensor) -> torch.Tensor:
    """All M_i^T M_j for matrices r (..., N, D, D) -> (K, D, D); leading dims (heads, batch) are folded."""
    if r.ndim > 3:
        r = r.reshape(-1, *r.shape[-3:])
        return (r.transpose(-1, -2)[:, :, None] @ r[:, None, :]).reshape(-1, r.shape[-1], r.shape[-1])
    return (r.transpose(-1, -2)[:, None] @ r[None, :]).reshape(-1, r.shape[-1], r.shape[-1])


class AdditivePositional(nn.Module):
    kind = "additive"
    coord_dim: int


class RotaryPositional(nn.Module):
    """Base of every rotary part (module docstring): subclasses implement `forward`, `rotate`, `matrix`
    and `generators`, and override the rest where their structure differs from the defaults."""

    kind = "rotary"
    coord_dim: int
    head_dim: int
    #: the generators commute by construction (RoPE, STRING, circulant STRING): logits are exactly relative
    commuting = True

    @property
    def scale(self) -> float | None:
        return None

    # ----- rotations ---------------------------------------------------------------------------
    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """R(r) x for x (..., N, Dh) without validation (what forward applies to q and to k)."""
        raise NotImplementedError(f"{type(self).__name__}.rotate")

    def matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """R(r) (..., N, Dh, Dh)."""
        raise NotImplementedError(f"{type(self).__name__}.matrix")

    def logit_matrix(self, positions: torch.Tensor) -> torch.Tensor:
        """M(r) with logits q_i^T M(r_i)^T M(r_j) k_j (..., N, Dh, Dh): R(r) unless a part projects."""
        return self.matrix(positions)

    def generators(self) -> torch.Tensor:
        """Skew generators L (C, Dh, Dh) (T1.1)."""
        raise NotImplementedError(f"{type(self).__name__}.generators")

    def rotation_parts(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(L, P, d_act) with logits seen through Pi_act exp(A(r)) P Pi_act (T3.5, T4.3). A part whose
        orthogonal basis change lives inside its generators (STRING) has P = I and d_act = Dh."""
        L = self.generators()
        return L, torch.eye(L.shape[-1], dtype=L.dtype, device=L.device), L.shape[-1]

    # ----- training ----------------------------------------------------------------------------
    def penalty(self) -> torch.Tensor | float:
        """A regulariser to add to the training loss (none: 0.0)."""
        return 0.0

    # ----- symmetry (teleportation) -------------------------------------------------------------
    def qk_symmetry(self, positions: torch.Tensor | None = None) -> QKSymmetry:
        """The Q/K group teleportation must use. Default: the commutant of every relative rotation
        M(r_i)^T M(r_j) at `positions` (N, C) (default: `default_positions`), computed in float64."""
        return QKSymmetry("commutant", relative=self.relative_rotations(positions))

    def relative_rotations(self, positions: torch.Tensor | None = None) -> torch.Tensor:
        """All M(r_i)^T M(r_j) (N*N, Dh, Dh) in float64 for positions (N, C) (`logit_matrix`)."""
        pos = default_positions(self.coord_dim) if positions is None else positions
        with torch.no_grad():
            return relative_products(self.logit_matrix(pos.to(module_dtype(self))).to(torch.float64))

    def symmetry_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters the Q/K group depends on (it is the stabiliser of their current value, so
        a teleport leaves the loss unchanged only at that value). Default: every trainable parameter."""
        return [p for p in self.parameters() if p.requires_grad]

    # ----- folding ------------------------------------------------------------------------------
    @property
    def can_fold(self) -> bool:
        """Whether `fold_into` can merge a fixed basis change into W_Q / W_K now."""
        return False

    def fold_into(self, q_proj: nn.Linear, k_proj: nn.Linear) -> None:
        """Merge a basis change into the query / key projections (logits unchanged)."""
        fail("self", f"a {type(self).__name__} module", "a rotary part with a basis change to fold (can_fold)",
             TypeError)

    # ----- validation ---------------------------------------------------------------------------
    def _check_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                  key_positions: torch.Tensor | None) -> torch.Tensor:
        check_tensor("q", q, 4)
        check_tensor("k", k, 4)
        for name, t in (("q", q), ("k", k)):
            if t.shape[-1] != self.head_dim:
                fail(name, f"head dim {t.shape[-1]}", f"head dim {self.head_dim}")
        check_positions(positions, self.coord_dim, q.shape[-2])
        kp = positions if key_positions is None else key_positions
        check_positions(kp, self.coord_dim, k.shape[-2], "key_positions")
        return kp


class NoPositional(nn.Module):
    kind = "none"

    def __init__(self):
        super().__init__()
