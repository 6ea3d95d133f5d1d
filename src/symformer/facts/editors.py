"""Closed-form weight updates of three fact editors, for a linear layer W (d_out x d_in) whose inputs are
keys k (d_in) and outputs values W k (fact-storing-mlps.txt App. A.3.4 compares MLP swapping with them).

- ROME (Meng et al. 2022, eq. 2): one fact. min ||Delta K0||_F s.t. (W + Delta) k* = v*, with the key
  second moment C = K0 K0^T / n, gives Delta = (v* - W k*) (C^-1 k*)^T / ((C^-1 k*)^T k*).
- MEMIT (Meng et al. 2023, eq. 14): a batch. min lam tr(Delta C Delta^T) + ||(W + Delta) K1 - V1||_F^2 gives
  Delta = R K1^T (lam C + K1 K1^T)^-1 with R = V1 - W K1 (one edited layer: no spreading over layers).
- AlphaEdit (Fang et al. 2025, eq. 14): Delta restricted to the null space of the preserved keys, P = U U^T
  with U the eigenvectors of C whose eigenvalues are below `tol`, and
  Delta^T = (P (K1 K1^T + K_p K_p^T) + l2 I)^-1 P K1 R^T (K_p: keys edited before; l2 as its L2 hparam).
Columns are keys / values (the papers' layout). All math in float64.
"""

from __future__ import annotations

import torch

from symformer._validation import check_float, check_tensor, fail


def _as64(name: str, x: torch.Tensor, ndim: int) -> torch.Tensor:
    return check_tensor(name, x, ndim).double()


def key_second_moment(keys: torch.Tensor) -> torch.Tensor:
    """C = K K^T / n for keys as columns (d_in, n): the 'mom2' statistic ROME/MEMIT/AlphaEdit collect."""
    K = _as64("keys", keys, 2)
    return K @ K.T / K.shape[1]


def _check_shapes(W: torch.Tensor, C: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
    d_out, d_in = W.shape
    if C.shape != (d_in, d_in):
        fail("C", f"shape {tuple(C.shape)}", f"({d_in}, {d_in}) for W of shape {tuple(W.shape)}")
    if keys.shape[0] != d_in:
        fail("keys", f"shape {tuple(keys.shape)}", f"{d_in} rows (keys as columns)")
    if values.shape[0] != d_out or values.shape[1:] != keys.shape[1:]:
        fail("values", f"shape {tuple(values.shape)}", f"({d_out}, {tuple(keys.shape[1:])}) matching the keys")


def rome_update(
    W: torch.Tensor, C: torch.Tensor, key: torch.Tensor, value: torch.Tensor, c_inv_key: torch.Tensor | None = None
) -> torch.Tensor:
    """ROME's rank-one Delta: afterwards (W + Delta) key = value exactly; inputs x with x^T C^-1 key = 0 keep
    their outputs. `c_inv_key`, when given, is C^-1 key already solved (it depends on neither W nor value)."""
    W, C = _as64("W", W, 2), _as64("C", C, 2)
    k, v = _as64("key", key, 1), _as64("value", value, 1)
    _check_shapes(W, C, k[:, None], v[:, None])
    # C^-1 k*, ROME's left vector (its norm cancels)
    u = torch.linalg.solve(C, k) if c_inv_key is None else _as64("c_inv_key", c_inv_key, 1)
    denom = u @ k
    if not abs(float(denom)) > 0:
        fail("key", "a key with k^T C^-1 k = 0", "a key the second moment C sees")
    return torch.outer(v - W @ k, u) / denom


def memit_update(
    W: torch.Tensor, C: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lam: float
) -> torch.Tensor:
    """MEMIT's batch Delta = R K1^T (lam C + K1 K1^T)^-1 (keys/values as columns; `lam` = mom2_update_weight)."""
    W, C = _as64("W", W, 2), _as64("C", C, 2)
    K, V = _as64("keys", keys, 2), _as64("values", values, 2)
    _check_shapes(W, C, K, V)
    check_float("lam", lam, 0.0)
    R = V - W @ K
    A = lam * C + K @ K.T
    if lam == 0:  # A = K K^T is singular when n < h: the minimum-norm solution (SVD), not an LU of a singular A
        return torch.linalg.lstsq(A, K @ R.T, driver="gelsd").solution.T
    return torch.linalg.solve(A, K @ R.T).T  # A symmetric: R K^T A^-1 = (A^-1 K R^T)^T


def null_space_projector(C: torch.Tensor, tol: float) -> torch.Tensor:
    """AlphaEdit's P = U_0 U_0^T over the eigenvectors of C with eigenvalue < tol (its
    'singular_value_tolerance'; C is symmetric PSD, so singular values are eigenvalues)."""
    C = _as64("C", C, 2)
    check_float("tol", tol, 0.0, low_open=True)
    lam, U = torch.linalg.eigh(C)
    U0 = U[:, lam < tol]
    return U0 @ U0.T


def alphaedit_update(
    W: torch.Tensor,
    P: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    l2: float = 10.0,
    prev_keys: torch.Tensor | None = None,
) -> torch.Tensor:
    """AlphaEdit's Delta (applied as W + Delta): Delta K0 = 0 for every preserved key K0 that P annihilates,
    and Delta minimises ||Delta K1 - R||^2 + ||Delta K_p||^2 + l2 ||Delta||^2 over Delta = Delta P."""
    W, P = _as64("W", W, 2), _as64("P", P, 2)
    K, V = _as64("keys", keys, 2), _as64("values", values, 2)
    _check_shapes(W, P, K, V)
    check_float("l2", l2, 0.0, low_open=True)
    A = K @ K.T
    if prev_keys is not None:
        Kp = _as64("prev_keys", prev_keys, 2)
        A = A + Kp @ Kp.T
    R = V - W @ K
    eye = torch.eye(P.shape[0], dtype=torch.float64)
    return torch.linalg.solve(P @ A + l2 * eye, P @ K @ R.T).T
