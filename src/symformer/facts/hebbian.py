"""Bilinear Hebbian fact MLPs, the constructions of the paper's later version "MLPs are Hebbians" (arXiv 2607.10034),
written from reading the authors' code (github.com/HazyResearch/hebbian-mlps, at the commit that
results/facts-hebbian/PROVENANCE.md names; its `src/hebbian/methods/hebbian/README.md` names the three variants and
`construction.py` / `readout.py` / `model.py` hold them). Every variant stores facts with bilinear features
phi(x) = (A0 x) * (A1 x) and a linear readout W, i.e. the gated MLP down(act(gate x) * up x) with the identity as act
(FactMLP activation "linear"):

- "hebbian": random Gaussian A0, A1 with the 1/sqrt(h) feature scale, and the raw Hebbian readout
  W = V^T Phi / n (their `raw_readout`), V the value of each key;
- "hebbian-whitened": the same features with the ridge-whitened readout (their `full_ridge_readout`):
  W = V^T Phi (Phi^T Phi + ridge n I)^-1 for h <= n, else W = V^T (Phi Phi^T + ridge I)^-1 Phi;
- "hebbian-dd": data-dependent features (their `_data_dependent_feature_map`): from random A0, A1 and the raw
  readout W0 of their unscaled features, A1 is refit with A0 fixed, then A0 with the new A1, each by the ridge
  least squares that fits the logit matrix V W0 phi(K)^T to the identity (their `_build_feature_fit_system`),
  then the ridge readout;
- "hebbian-als" (ours): "hebbian-dd" with `rounds` alternating refits of A1 then A0 (default 4; their code does
  one), an alternating least squares on the same logit objective, and the ridge readout onto the margin-optimal
  directions U*_f(i) (eq. 4 of the fact-storing MLP paper) instead of the values: regressing onto v_f(i) stores
  only keys whose value has the largest inner product with itself, which anisotropic values (kappa = 100) break
  for about 30% of them at any width; U*_f(i) decodes to f(i) by construction (Sec. 4.2).

Parameter count: they count A0, A1 and W (`HebbianMLP.weight_count`), 3 h d; `count_params` counts gate, up and
down, the same 3 h d (the 1/sqrt(h) scale is folded into down)."""

from __future__ import annotations

import math

import torch

from symformer._rng import generator
from symformer._validation import check_choice, check_float, check_int
from symformer.facts.decodability import Decodability, require_vertices
from symformer.facts.embeddings import validate_fact_set
from symformer.facts.mlp import FactMLP

VARIANTS = ("hebbian", "hebbian-whitened", "hebbian-dd", "hebbian-als")
#: their HebbianConfig.ridge in the capacity sweeps (mlp_capacity/run.py's method specs)
RIDGE = 1e-6


def bilinear_features(keys: torch.Tensor, A0: torch.Tensor, A1: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """phi(K) = scale (K A0^T) * (K A1^T): (n, h) features of n keys."""
    return (keys @ A0.T) * (keys @ A1.T) * scale


def random_factors(h: int, d: int, seed: int | None = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A0, A1: (h, d) i.i.d. standard Gaussian, float64, from the "hebbian" stream of `seed` (symformer._rng)."""
    g = generator("hebbian", seed)
    return torch.randn(h, d, generator=g, dtype=torch.float64), torch.randn(h, d, generator=g, dtype=torch.float64)


def raw_readout(targets: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """The Hebbian outer-product readout W = V^T Phi / n, (d, h)."""
    return targets.T @ features / features.shape[0]


def ridge_readout(targets: torch.Tensor, features: torch.Tensor, ridge: float = RIDGE) -> torch.Tensor:
    """The ridge-whitened readout, (d, h): primal W = V^T Phi / n (Phi^T Phi / n + ridge I)^-1 when h <= n, dual
    W = ((Phi Phi^T + ridge I)^-1 V)^T Phi when h > n (the two ridges differ by the factor n, as in theirs)."""
    n, h = features.shape
    eye = torch.eye(min(n, h), dtype=features.dtype)
    if h > n:
        return torch.linalg.solve(features @ features.T + ridge * eye, targets).T @ features
    cov = features.T @ features / n + ridge * eye
    return torch.linalg.solve(cov, raw_readout(targets, features).T).T


def fit_projection(
    partner: torch.Tensor,
    keys: torch.Tensor,
    targets: torch.Tensor,
    W: torch.Tensor,
    ridge: float = RIDGE,
    tol: float = 1e-10,
) -> torch.Tensor:
    """One factor X (h, d) of phi = partner * (X K^T) given the other, by ridge least squares on the logits:
    min_X 1/2 |V W (partner * (X K^T)) - I|_F^2 + ridge/2 |X|^2 (n x n logits, V = targets), solved by
    Jacobi-preconditioned conjugate gradients on its normal equations, stopped at a residual <= tol |rhs| (theirs:
    1e-10) or after min(max(2h, 128), 1024) iterations (their `_fit_projection`; float64 throughout here).

    Args:
        partner (h, n): the fixed factor's projections A K^T.
        keys (n, d): keys.
        targets (n, d): the value of each key.
        W (d, h): the readout the logits are taken through.
        ridge (float): the ridge.
        tol (float): the relative residual at which conjugate gradients stop.

    Returns:
        X (h, d): the fitted factor.
    """
    C, K, V, W = partner.double(), keys.double(), targets.double(), W.double()
    VtV = V.T @ V  # (d, d): G = W^T V^T V W is the logits' metric on the features, applied through d (h > d)

    def op(X: torch.Tensor) -> torch.Tensor:
        return (C * (W.T @ (VtV @ (W @ (C * (X @ K.T)))))) @ K + ridge * X

    rhs = ((W.T @ V.T) * C) @ K
    x = torch.zeros_like(rhs)
    norm = float(rhs.norm())
    if norm == 0.0:
        return x
    diag = (W * (VtV @ W)).sum(0)[:, None] * (C.square() @ K.square()) + ridge  # the operator's diagonal
    inv_diag = diag.clamp_min(max(ridge, 1e-300)).reciprocal()
    r = rhs.clone()
    z = inv_diag * r
    p, rz = z.clone(), (r * z).sum()
    for _ in range(min(max(2 * C.shape[0], 128), 1024) if tol >= 1e-10 else 100 * rhs.numel()):
        q = op(p)
        step = rz / (p * q).sum()
        x, r = x + step * p, r - step * q
        if float(r.norm()) <= tol * norm:
            break
        z = inv_diag * r
        rz, rz_old = (r * z).sum(), rz
        p = z + (rz / rz_old) * p
    return x


def hebbian_mlp(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    h: int,
    variant: str = "hebbian-dd",
    ridge: float = RIDGE,
    rounds: int = 4,
    seed: int | None = 0,
    tol: float = 1e-10,
    info: Decodability | None = None,
) -> FactMLP:
    """A bilinear Hebbian fact MLP of hidden width h (their m): g(x) = W ((A0 x) * (A1 x)).

    Args:
        keys (n_keys, d): key embeddings.
        values (n_values, d): value embeddings.
        facts (n_keys,): int64, the value index of each key.
        h (int): the number of bilinear features (their m), >= 1.
        variant (str): "hebbian" (raw readout), "hebbian-whitened" (ridge readout), "hebbian-dd"
            (data-dependent features and the ridge readout) or "hebbian-als" (ours: `rounds` refits).
        ridge (float): the ridge of the readout and the feature fit (>= 0).
        rounds (int): "hebbian-als" only: alternating refits of A1 then A0 ("hebbian-dd": 1).
        seed (int | None): the draw of A0, A1.
        tol (float): the feature fit's conjugate-gradient stop (`fit_projection`; below 1e-10 it also runs past
            their iteration cap, for a reference solve).
        info (Decodability | None): "hebbian-als": `decodability(values)` if already computed.

    Returns:
        mlp (FactMLP): float64, gated, activation "linear", no biases; 3 h d parameters.

    Examples:
        >>> from symformer.facts import fact_accuracy, make_fact_set
        >>> from symformer.facts.hebbian import hebbian_mlp
        >>> fs = make_fact_set(64, 16, seed=0)
        >>> mlp = hebbian_mlp(fs.keys, fs.values, fs.facts, h=32, variant="hebbian-dd")
        >>> fact_accuracy(mlp, fs.keys, fs.values, fs.facts), mlp.n_params() == 3 * 32 * 16
        (1.0, True)
    """
    validate_fact_set(keys, values, facts)
    check_int("h", h, 1)
    check_choice("variant", variant, VARIANTS)
    check_float("ridge", ridge, 0.0)
    check_int("rounds", rounds, 1)
    check_float("tol", tol, 0.0, low_open=True)
    K = keys.double()
    V = values.double()[facts]
    d = K.shape[1]
    A0, A1 = random_factors(h, d, seed)
    scale = 1.0 / math.sqrt(h)
    if variant in ("hebbian-dd", "hebbian-als"):
        W0 = raw_readout(V, bilinear_features(K, A0, A1))  # unscaled features (their data-dependent map)
        for _ in range(rounds if variant == "hebbian-als" else 1):
            A1 = fit_projection(A0 @ K.T, K, V, W0, ridge, tol)
            A0 = fit_projection(A1 @ K.T, K, V, W0, ridge, tol)
        scale = 1.0
    Phi = bilinear_features(K, A0, A1, scale)
    T = require_vertices(values, info).U.double()[facts] if variant == "hebbian-als" else V
    W = raw_readout(V, Phi) if variant == "hebbian" else ridge_readout(T, Phi, ridge)
    mlp = FactMLP(d, h, activation="linear", gated=True, bias=False)
    with torch.no_grad():
        mlp.gate.weight.copy_(A0)
        mlp.up.weight.copy_(A1)
        mlp.down.weight.copy_(W * scale)
    return mlp


def official_param_count(method: str, d: int, h: int) -> int:
    """The parameter count the authors' capacity sweep records (`run_mlp_experiment`'s param_count) for one of our
    methods at width h: 3 h d for the Hebbian variants (`weight_count`) and their bilinear GD MLP without biases;
    3 h d + 2 h + d for their NTK MLP, whose zero biases are parameters; None for a method they do not have.

    Args:
        method (str): a method name (symformer.facts.METHODS).
        d (int): the key width.
        h (int): the hidden width.

    Returns:
        count (int | None): their count.

    Examples:
        >>> from symformer.facts.hebbian import official_param_count
        >>> official_param_count("hebbian-dd", 32, 74), official_param_count("ntk-relu1", 32, 10)
        (7104, 1012)
    """
    if method in VARIANTS or method == "gd-bilinear":
        return 3 * h * d
    if method == "ntk-relu1":
        return 3 * h * d + 2 * h + d
    return None
