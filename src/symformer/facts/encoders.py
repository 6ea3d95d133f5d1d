"""Closed-form encoders: keys -> codes (Sec. 4.1, App. B.3-B.4).

Every encoder here returns (gate/up weights, code weights) that `symformer.facts.mlp.FactMLP` holds; the
decoder D is attached by `symformer.facts.capacity.build_fact_mlp`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from symformer._rng import generator
from symformer._validation import check_float, check_int, check_tensor, fail
from symformer.facts.mlp import FactMLP, activate


@dataclass
class GadgetSolution:
    """One shared gate G (h~ x d) + per-code up blocks A (m, h~, d) [+ b_G (h~), b_A (m, h~), b_E (m)]."""

    G: torch.Tensor
    A: torch.Tensor
    bG: torch.Tensor | None
    bA: torch.Tensor | None
    bE: torch.Tensor | None
    residual: float


def _check_keys_targets(keys: torch.Tensor, targets: torch.Tensor) -> None:
    check_tensor("keys", keys, 2)
    check_tensor("targets", targets, (1, 2))
    if targets.shape[0] != keys.shape[0]:
        fail("targets", f"{targets.shape[0]} rows", f"one target row per key ({keys.shape[0]})")


def check_general_position(keys: torch.Tensor) -> None:
    """The gadget needs generic keys (Lemma 4.1.1-4.1.2): full rank and no repeated key."""
    n, d = keys.shape
    r = int(torch.linalg.matrix_rank(keys.double()))
    if r < min(n, d):
        fail("keys", f"a {n}x{d} key matrix of rank {r}", f"keys in general position (rank {min(n, d)})")
    if torch.unique(keys, dim=0).shape[0] < n:
        fail("keys", "repeated key rows", "distinct keys in general position")


def gadget_hidden(n_keys: int, d: int, bias: bool = False) -> int:
    """Smallest h~ with d~ h~ >= |K| (Lemma 4.1.2; d~ = d + 1 with biases)."""
    return math.ceil(n_keys / (d + (1 if bias else 0)))


def solve_gadgets(
    keys: torch.Tensor,
    targets: torch.Tensor,
    h_tilde: int,
    activation: str = "silu",
    bias: bool = False,
    seed: int | None = 0,
) -> GadgetSolution:
    """Alg. 3 / Alg. 7 for all m code coordinates with ONE shared G, so one factorisation serves all m
    right-hand sides: M vec(A_j) = o^(j) with the minimum-norm solution A_j = M^T (M M^T)^{-1} o^(j),
    where M M^T = (K~ K~^T) * (Sigma^T Sigma) (+ 1 1^T with biases) is only |K| x |K|."""
    _check_keys_targets(keys, targets)
    check_int("h_tilde", h_tilde, 1)
    n, d = keys.shape
    dt = d + (1 if bias else 0)
    if dt * h_tilde < n:
        fail(
            "h_tilde",
            h_tilde,
            f"a gadget hidden size with d~ * h~ >= |K| ({dt} * h~ >= {n}, i.e. h~ >= {gadget_hidden(n, d, bias)})",
        )
    check_general_position(keys)
    T = targets.double().reshape(n, -1)  # (|K|, m)
    K = keys.double()
    g = generator("gadget", seed)  # independent of the keys' stream (symformer._rng)
    G = torch.randn(h_tilde, d, generator=g, dtype=torch.float64)  # Alg. 3, line 1
    bG = torch.randn(h_tilde, generator=g, dtype=torch.float64) if bias else None
    pre = K @ G.T + (bG if bias else 0.0)
    S = activate(activation, pre)  # Sigma^T, (|K|, h~)
    Kt = torch.cat([K, torch.ones(n, 1, dtype=torch.float64)], 1) if bias else K
    gram = (Kt @ Kt.T) * (S @ S.T)
    if bias:
        gram = gram + 1.0
    try:
        L = torch.linalg.cholesky(gram)
        alpha = torch.cholesky_solve(T, L)
    except RuntimeError:
        alpha = torch.linalg.lstsq(gram, T, driver="gelsd").solution
    # vec(A_j)[t] = sum_i alpha_ij S_it k~_i  (A_j = M^T alpha_j, Alg. 3 line 5)
    At = torch.einsum("it,ij,id->jtd", S, alpha, Kt)  # (m, h~, d~)
    A, bA = (At[..., :d], At[..., d]) if bias else (At, None)
    bE = alpha.sum(0) if bias else None  # the final ones column of M~ (Alg. 7)
    out = torch.einsum("it,jtd,id->ij", S, At, Kt) + (bE if bias else 0.0)
    res = float((out - T).abs().max() / T.abs().max().clamp_min(1e-300))
    if not res <= 1e-3:  # ill-conditioned but solved systems are judged by the final accuracy instead
        # Sigma violates the rank condition (6) (e.g. a 0/1 step gate with too few units): say so
        fail(
            "h_tilde",
            h_tilde,
            f"a gadget width whose system M vec(A) = o is solvable (relative residual {res:.2e} "
            f"with activation {activation!r}); increase h_tilde",
        )
    return GadgetSolution(G, A, bG, bA, bE, res)


def gated_encoder(
    keys: torch.Tensor,
    codes: torch.Tensor,
    h_tilde: int | None = None,
    bias: bool = False,
    activation: str = "silu",
    seed: int | None = 0,
) -> FactMLP:
    """Alg. 2 + Alg. 3: enc(x) = E (sigma(G x) * (A x)) with m blocks of h~ units (D = 0 until a decoder is
    attached)."""
    n, d = keys.shape
    m = codes.shape[1]
    h_tilde = h_tilde or gadget_hidden(n, d, bias)
    sol = solve_gadgets(keys, codes, h_tilde, activation, bias, seed)
    mlp = FactMLP(d, m * h_tilde, activation=activation, gated=True, bias=bias, m=m, code_bias=bias)
    with torch.no_grad():
        mlp.gate.weight.copy_(sol.G.repeat(m, 1))
        mlp.up.weight.copy_(sol.A.reshape(m * h_tilde, d))
        if bias:
            mlp.gate.bias.copy_(sol.bG.repeat(m))
            mlp.up.bias.copy_(sol.bA.reshape(-1))
            mlp.down.code_bias.copy_(sol.bE)
    return mlp


def central_difference_encoder(
    keys: torch.Tensor,
    codes: torch.Tensor,
    h_tilde: int | None = None,
    bias: bool = False,
    eps: float | None = None,
    tol: float = 1e-7,
    seed: int | None = 0,
) -> FactMLP:
    """Alg. 8 (non-gated): a silu' -gated gadget of h~ units, then
    enc(x) = sum_t [silu(z_t + eps a_t) - silu(z_t - eps a_t)] / (2 eps), i.e. E = [1/(2eps), -1/(2eps)]
    (the printed eps^{-1/2} is a typo: a central difference divides by 2 eps). eps is halved until the code error
    is <= tol."""
    n, d = keys.shape
    m = codes.shape[1]
    h_tilde = h_tilde or gadget_hidden(n, d, bias)
    sol = solve_gadgets(keys, codes, h_tilde, "silu_prime", bias, seed)
    K = keys.double()
    z = K @ sol.G.T + (sol.bG if bias else 0.0)  # (|K|, h~)
    a = torch.einsum("id,jtd->ijt", K, sol.A) + (sol.bA if bias else 0.0)  # (|K|, m, h~)
    target = codes.double()
    scale = float(target.abs().max().clamp_min(1e-300))
    e = check_float("eps", eps, 0.0, low_open=True) if eps is not None else 1e-2
    for _ in range(40):
        silu = torch.nn.functional.silu
        cd = (silu(z[:, None] + e * a) - silu(z[:, None] - e * a)).sum(-1) / (2 * e)
        if float((cd + (sol.bE if bias else 0.0) - target).abs().max()) <= tol * scale or eps is not None:
            break
        e /= 2
    mlp = FactMLP(d, 2 * m * h_tilde, activation="silu", gated=False, bias=bias, m=m, code_bias=bias)
    Wp, Wm = sol.G[None] + e * sol.A, sol.G[None] - e * sol.A  # (m, h~, d)
    with torch.no_grad():
        mlp.up.weight.copy_(torch.cat([Wp, Wm], 1).reshape(-1, d))
        half = torch.full((m, h_tilde), 0.5 / e)
        mlp.down.e.copy_(torch.cat([half, -half], 1).reshape(-1))
        if bias:
            mlp.up.bias.copy_(torch.cat([sol.bG + e * sol.bA, sol.bG - e * sol.bA], 1).reshape(-1))
            mlp.down.code_bias.copy_(sol.bE)
    mlp.eps = e
    # the code is a difference of two silu values 2 eps apart divided by 2 eps: 16-bit rounding (2^-8 relative) of each
    # term exceeds the difference once eps |a| < 2^-8 |silu(z)|, which the tolerance search above always passes
    # (eps ~ 1e-5), so a 16-bit host runs this construction in float32 (facts.slot.FactSlot)
    mlp.min_dtype = torch.float32
    return mlp


def relu_lagrangian_encoder(
    keys: torch.Tensor, codes: torch.Tensor, h_tilde: int | None = None, seed: int | None = 0
) -> FactMLP:
    """ReLU 'Lagrangian' form (App. B.4.3): a step-gated gadget enc = sum_t 1{z_t > 0} a_t (z = Gx + b_G,
    a = Ax + b_A) becomes exactly sum_t ReLU(lam_t z_t + a_t) - lam_t ReLU(z_t) on the keys once
    lam_t >= max_i(-a_it / z_it), lam_t >= 0."""
    n, d = keys.shape
    m = codes.shape[1]
    # a 0/1 gate repeats activation patterns across keys, so twice the analytic-gate minimum by default
    h_tilde = h_tilde or 2 * gadget_hidden(n, d, True)
    sol = solve_gadgets(keys, codes, h_tilde, "step", True, seed)
    K = keys.double()
    z = K @ sol.G.T + sol.bG  # (|K|, h~)
    a = torch.einsum("id,jtd->ijt", K, sol.A) + sol.bA  # (|K|, m, h~)
    lam = (-a / z[:, None]).amax(0).clamp_min(0.0) * (1 + 1e-6) + 1e-12  # (m, h~)
    mlp = FactMLP(d, 2 * m * h_tilde, activation="relu", gated=False, bias=True, m=m, code_bias=True)
    with torch.no_grad():
        W1 = lam[..., None] * sol.G[None] + sol.A
        b1 = lam * sol.bG[None] + sol.bA
        mlp.up.weight.copy_(torch.cat([W1, sol.G[None].expand(m, -1, -1)], 1).reshape(-1, d))
        mlp.up.bias.copy_(torch.cat([b1, sol.bG[None].expand(m, -1)], 1).reshape(-1))
        mlp.down.e.copy_(torch.cat([torch.ones(m, h_tilde, dtype=torch.float64), -lam], 1).reshape(-1))
        mlp.down.code_bias.copy_(sol.bE)
    return mlp


# ---- two-hot keys (Construction 4.1, Construction B.1) ----------------------------------------------


def two_hot_keys(d: int) -> torch.Tensor:
    """All e_i - e_j, i != j, in row order (i, j): |K| = d (d - 1)."""
    check_int("d", d, 2)
    I = torch.eye(d, dtype=torch.float64)
    return torch.stack([I[i] - I[j] for i in range(d) for j in range(d) if i != j])


def _two_hot_index(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_tensor("keys", keys, 2)
    i, j = keys.argmax(1), keys.argmin(1)
    d = keys.shape[1]
    I = torch.eye(d, dtype=keys.dtype)
    if not torch.equal(keys, I[i] - I[j]) or bool((i == j).any()):
        fail("keys", "keys that are not of the form e_i - e_j", "two-hot keys e_i - e_j with i != j")
    return i, j


def two_hot_gated_encoder(keys: torch.Tensor, codes: torch.Tensor) -> FactMLP:
    """Construction 4.1: enc(x) = 1^T [ReLU(I x) * (A x)], A[p, q] = -h(p, q), A[p, p] = 0; hidden d per code."""
    i, j = _two_hot_index(keys)
    n, d = keys.shape
    m = codes.shape[1]
    A = torch.zeros(m, d, d, dtype=torch.float64)
    A[:, i, j] = -codes.double().T
    mlp = FactMLP(d, m * d, activation="relu", gated=True, m=m)
    with torch.no_grad():
        mlp.gate.weight.copy_(torch.eye(d, dtype=torch.float64).repeat(m, 1))
        mlp.up.weight.copy_(A.reshape(m * d, d))
    return mlp


def two_hot_encoder(keys: torch.Tensor, codes: torch.Tensor) -> FactMLP:
    """Construction B.1 (non-gated): enc(x) = 1^T ReLU(A x - 1), A[p, p] = 1, A[p, q] = -h(p, q), h in [0, 1].
    Codes are mapped affinely to [0, 1] per coordinate and the map is folded into E and the code bias."""
    i, j = _two_hot_index(keys)
    n, d = keys.shape
    c = codes.double()
    lo, hi = c.min(0).values, c.max(0).values
    span = (hi - lo).clamp_min(1e-300)
    h = (c - lo) / span
    A = torch.eye(d, dtype=torch.float64).repeat(codes.shape[1], 1, 1)
    A[:, i, j] = -h.T
    m = codes.shape[1]
    mlp = FactMLP(d, m * d, activation="relu", gated=False, bias=True, m=m, code_bias=True)
    with torch.no_grad():
        mlp.up.weight.copy_(A.reshape(m * d, d))
        mlp.up.bias.fill_(-1.0)
        mlp.down.e.copy_(span.repeat_interleave(d))
        mlp.down.code_bias.copy_(lo)
    return mlp
