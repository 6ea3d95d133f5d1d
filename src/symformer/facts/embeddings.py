"""Fact sets, key/value embeddings and partial ZCA whitening (fact-storing paper, App. A.1.1, A.1.3, B.7).

A fact set is a map f: [|K|] -> [|V|] stored as a LongTensor `facts` of length |K| (facts[i] = f(i)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_choice, check_float, check_int, check_tensor, fail

EMBEDDING_KINDS = ("sphere", "gaussian")


def _gen(seed: int | torch.Generator | None) -> torch.Generator:
    """A given generator, or the stream of `seed` (None: seeded from torch's global generator, as nn.Linear draws)."""
    if isinstance(seed, torch.Generator):
        return seed
    return seeded_generator(seed)


def random_fact_map(
    n_keys: int, n_values: int | None = None, bijective: bool = True, seed: int | torch.Generator | None = 0
) -> torch.Tensor:
    """A random fact set f: [n_keys] -> [n_values]; bijective (a permutation, App. A.1.1) or i.i.d. uniform.

    Args:
        n_keys (int): |K|.
        n_values (int | None): |V| (None: |K|; a bijection needs |V| = |K|).
        bijective (bool): a permutation, else i.i.d. uniform values.
        seed (int | torch.Generator | None): the draw (a generator is used as is; None: seeded from torch's global
            generator).

    Returns:
        facts (n_keys,): int64, facts[i] = f(i) in [0, |V|).

    Examples:
        >>> from symformer.facts import random_fact_map
        >>> sorted(random_fact_map(5, seed=0).tolist())  # a bijection: every value once
        [0, 1, 2, 3, 4]
        >>> f = random_fact_map(6, n_values=3, bijective=False, seed=0)
        >>> f.shape, bool(((f >= 0) & (f < 3)).all())
        (torch.Size([6]), True)
    """
    check_int("n_keys", n_keys, 1)
    n_values = n_keys if n_values is None else check_int("n_values", n_values, 1)
    g = _gen(seed)
    if bijective:
        if n_values != n_keys:
            fail("n_values", n_values, f"n_values == n_keys ({n_keys}) for a bijective fact map")
        return torch.randperm(n_keys, generator=g)
    return torch.randint(0, n_values, (n_keys,), generator=g)


def sample_embeddings(
    n: int,
    d: int,
    kind: str = "sphere",
    kappa: float = 1.0,
    seed: int | torch.Generator | None = 0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """n embeddings in R^d: uniform on the unit sphere or standard Gaussian, then made anisotropic with
    condition number `kappa` by a log-affine rescaling of the singular values (App. A.1.1).

    Args:
        n (int): the number of embeddings.
        d (int): their width.
        kind (str): "sphere" (unit rows) or "gaussian".
        kappa (float): the condition number of the (n, d) matrix, >= 1 (1: left as drawn).
        seed (int | torch.Generator | None): the draw.
        dtype (torch.dtype): the result's dtype (drawn in float64).

    Returns:
        x (n, d): the embeddings, one per row.

    Examples:
        >>> import torch
        >>> from symformer.facts import sample_embeddings
        >>> x = sample_embeddings(50, 8, seed=0)
        >>> x.shape, x.dtype, torch.allclose(x.norm(dim=1), torch.ones(50, dtype=torch.float64))
        (torch.Size([50, 8]), torch.float64, True)
        >>> s = torch.linalg.svdvals(sample_embeddings(50, 8, kappa=10.0, seed=0))
        >>> round(float(s[0] / s[-1]), 6)
        10.0
    """
    check_int("n", n, 1)
    check_int("d", d, 1)
    check_choice("kind", kind, EMBEDDING_KINDS)
    check_float("kappa", kappa, 1.0)
    x = torch.randn(n, d, generator=_gen(seed), dtype=torch.float64)
    if kind == "sphere":
        x = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
    if kappa != 1.0:
        x = set_condition_number(x, kappa)
    return x.to(dtype)


def set_condition_number(x: torch.Tensor, kappa: float) -> torch.Tensor:
    """Keep the singular vectors, map log s affinely so that s_max is preserved and s_max/s_min = kappa.

    Args:
        x (n, d): a matrix with distinct singular values.
        kappa (float): the condition number wanted, >= 1.

    Returns:
        y (n, d): x with its singular values rescaled.

    Examples:
        >>> import torch
        >>> from symformer.facts import set_condition_number
        >>> x = torch.randn(20, 5, dtype=torch.float64)
        >>> s, sy = torch.linalg.svdvals(x), torch.linalg.svdvals(set_condition_number(x, 4.0))
        >>> round(float(sy[0] / sy[-1]), 6), torch.allclose(sy[0], s[0])  # kappa set, the largest value kept
        (4.0, True)
    """
    check_tensor("x", x, 2)
    check_float("kappa", kappa, 1.0)
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    ls = torch.log(s)
    span = ls[0] - ls[-1]
    if span <= 0:
        fail("x", "a matrix with equal singular values", "distinct singular values to rescale")
    new = ls[0] - (ls[0] - ls) / span * torch.log(torch.tensor(kappa, dtype=s.dtype))
    return (u * torch.exp(new)) @ vh


def sentence_like_embeddings(
    n: int, d: int, kappa: float = 15.0, seed: int | None = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Gaussian rows whose CENTRED matrix has condition number `kappa` (about 15 for sentence-model
    embeddings), plus a common offset of the rows' typical norm (the shared direction such
    embeddings have; rho depends on differences only, so it does not change rho)."""
    check_int("n", n, 2)
    check_int("d", d, 1)
    check_float("kappa", kappa, 1.0)
    g = _gen(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = set_condition_number(x - x.mean(0), kappa)
    c = torch.randn(d, generator=g, dtype=torch.float64)
    return (x + c / c.norm() * x.norm(dim=1).mean()).to(dtype)


def condition_number(x: torch.Tensor) -> float:
    s = torch.linalg.svdvals(x)
    return float(s[0] / s[-1])


def coherence(x: torch.Tensor) -> float:
    """Mutual coherence max_{i != j} |<x_i, x_j>| / (|x_i| |x_j|) (App. B.5, the classical definition).

    Args:
        x (n, d): nonzero rows.

    Returns:
        coherence (float): in [0, 1]; 0 for orthogonal rows.

    Examples:
        >>> import torch
        >>> from symformer.facts import coherence
        >>> coherence(torch.eye(3))
        0.0
        >>> round(coherence(torch.tensor([[1.0, 0.0], [1.0, 1.0]])), 6)  # cos 45 degrees
        0.707107
    """
    xn = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
    c = (xn @ xn.T).abs()
    c.fill_diagonal_(0.0)
    return float(c.max())


@dataclass
class FactSet:
    """A fact set: keys, values and the map between them (`make_fact_set` draws one).

    Attributes:
        keys (n_keys, d): one key embedding per row.
        values (n_values, d): one value embedding per row.
        facts (n_keys,): int64, facts[i] = f(i), the value key i must decode to.

    Examples:
        >>> import torch
        >>> from symformer.facts import FactSet, validate_fact_set
        >>> fs = FactSet(keys=torch.eye(3), values=torch.eye(3), facts=torch.tensor([2, 0, 1]))
        >>> validate_fact_set(fs.keys, fs.values, fs.facts)  # None: consistent
    """

    keys: torch.Tensor  # (|K|, d)
    values: torch.Tensor  # (|V|, d)
    facts: torch.Tensor  # (|K|,) long, facts[i] = f(i)


def make_fact_set(
    n_facts: int,
    d: int,
    kind: str = "sphere",
    kappa: float = 1.0,
    tied: bool = True,
    bijective: bool = True,
    n_values: int | None = None,
    seed: int | None = 0,
) -> FactSet:
    """The paper's default task: F keys = values (tied) on the sphere, a random bijection (App. A.1.1).

    Args:
        n_facts (int): F = |K|.
        d (int): the embedding width.
        kind (str): "sphere" or "gaussian" (`sample_embeddings`).
        kappa (float): condition number of the embeddings.
        tied (bool): keys = values (needs |V| = F).
        bijective (bool): f a permutation, else i.i.d. uniform.
        n_values (int | None): |V| (None: F).
        seed (int | None): every draw (values, keys, map) from one stream.

    Returns:
        fact_set (FactSet): keys (F, d), values (|V|, d), facts (F,), float64 embeddings.

    Examples:
        >>> import torch
        >>> from symformer.facts import make_fact_set
        >>> fs = make_fact_set(16, 8, seed=0)
        >>> fs.keys.shape, fs.values.shape, fs.facts.shape
        (torch.Size([16, 8]), torch.Size([16, 8]), torch.Size([16]))
        >>> torch.equal(fs.keys, fs.values), sorted(fs.facts.tolist()) == list(range(16))  # tied, a bijection
        (True, True)
    """
    g = _gen(seed)
    n_values = n_facts if n_values is None else n_values
    values = sample_embeddings(n_values, d, kind, kappa, seed=g)
    if tied:
        if n_values != n_facts:
            fail("n_values", n_values, f"n_values == n_facts ({n_facts}) for tied embeddings")
        keys = values.clone()
    else:
        keys = sample_embeddings(n_facts, d, kind, kappa, seed=g)
    facts = random_fact_map(n_facts, n_values, bijective=bijective, seed=g)
    return FactSet(keys, values, facts)


def validate_fact_set(keys: torch.Tensor, values: torch.Tensor, facts: torch.Tensor) -> None:
    """Shapes, ranges and consistency: duplicate keys must not map to different values.

    Args:
        keys (n_keys, d): key embeddings.
        values (n_values, d): value embeddings, the keys' width.
        facts (n_keys,): int64 or int32 value indices in [0, |V|).

    Raises:
        ValueError: a shape, range or consistency error, naming the argument.
        TypeError: facts is not a tensor.

    Examples:
        >>> from symformer.facts import make_fact_set, validate_fact_set
        >>> fs = make_fact_set(8, 4, seed=0)
        >>> validate_fact_set(fs.keys, fs.values, fs.facts)  # None: a valid fact set
        >>> validate_fact_set(fs.keys, fs.values, fs.facts[:5])
        Traceback (most recent call last):
        ...
        ValueError: facts: got '5 entries', expected one value index per key (8)
    """
    check_tensor("keys", keys, 2)
    check_tensor("values", values, 2)
    if not isinstance(facts, torch.Tensor):
        fail("facts", type(facts).__name__, "a LongTensor of value indices", TypeError)
    if facts.ndim != 1 or facts.dtype not in (torch.int64, torch.int32):
        fail("facts", f"shape {tuple(facts.shape)} dtype {facts.dtype}", "a 1-D integer tensor")
    if keys.shape[1] != values.shape[1]:
        fail("values", f"width {values.shape[1]}", f"the key width d = {keys.shape[1]}")
    if facts.shape[0] != keys.shape[0]:
        fail("facts", f"{facts.shape[0]} entries", f"one value index per key ({keys.shape[0]})")
    if len(facts) and (int(facts.min()) < 0 or int(facts.max()) >= values.shape[0]):
        fail("facts", f"indices in [{int(facts.min())}, {int(facts.max())}]", f"indices in [0, {values.shape[0] - 1}]")
    _, inv = torch.unique(keys, dim=0, return_inverse=True)
    if inv.numel() and int(inv.max()) + 1 < keys.shape[0]:
        # the same key listed twice is a key mapped to two values unless both rows agree on the target
        first = torch.full((int(inv.max()) + 1,), -1, dtype=torch.long)
        for i, g in enumerate(inv.tolist()):
            t = int(facts[i])
            if first[g] < 0:
                first[g] = t
            elif first[g] != t:
                fail(
                    "facts",
                    f"key row {i} duplicating an earlier key but mapped to value {t} (earlier: {int(first[g])})",
                    "each distinct key mapped to exactly one value",
                )


def fact_pairs_to_map(pairs: list[tuple[int, int]], n_keys: int) -> torch.Tensor:
    """(key, value) pairs -> facts tensor; a key listed with two values is an error."""
    out = torch.full((n_keys,), -1, dtype=torch.long)
    for k, v in pairs:
        if not 0 <= k < n_keys:
            fail("facts", f"key index {k}", f"an index in [0, {n_keys - 1}]")
        if out[k] >= 0 and int(out[k]) != v:
            fail("facts", f"key {k} mapped to two values ({int(out[k])} and {v})", "a function: one value per key")
        out[k] = v
    if bool((out < 0).any()):
        fail("facts", f"no value for key(s) {(out < 0).nonzero().flatten()[:10].tolist()}", "a value for every key")
    return out


# ---- whitening (App. A.1.3; Thm B.7.1) -------------------------------------------------------------


def whitening_matrix(x: torch.Tensor, alpha: float = 1.0, ridge: float = 1e-6) -> torch.Tensor:
    """Partial ZCA W_alpha = (Q Lambda^{-1/2} Q^T)^alpha of the second moment Sigma = X^T X / n + ridge I.

    Args:
        x (n, d): embeddings, one per row.
        alpha (float): the strength in [0, 1] (0: identity, 1: full ZCA whitening).
        ridge (float): added to Sigma's diagonal.

    Returns:
        W (d, d): symmetric, in x's dtype; whitened rows are x @ W.

    Examples:
        >>> import torch
        >>> from symformer.facts import sample_embeddings, whitening_matrix
        >>> x = sample_embeddings(100, 4, kind="gaussian", kappa=5.0, seed=0)
        >>> xw = x @ whitening_matrix(x, alpha=1.0, ridge=0.0)
        >>> torch.allclose(xw.T @ xw / 100, torch.eye(4, dtype=torch.float64))  # identity second moment
        True
    """
    check_tensor("x", x, 2)
    check_float("alpha", alpha, 0.0, 1.0)
    x64 = x.double()
    sigma = x64.T @ x64 / x64.shape[0] + ridge * torch.eye(x.shape[1], dtype=torch.float64)
    lam, q = torch.linalg.eigh(sigma)
    return ((q * lam.pow(-0.5 * alpha)) @ q.T).to(x.dtype)


def fold_whitening(mlp, key_transform: torch.Tensor | None, value_transform: torch.Tensor | None):
    """Turn an MLP built on whitened embeddings (k~ = W_k k, v~ = W_v v, rows: E W) into one on the raw ones.

    Embedding rows transform as E T, i.e. columns as k~ = T_k^T k. Scores <g~(T_k^T k), T_v^T v_j> =
    <T_v g~(T_k^T k), v_j>, so the input maps fold as `weight @ T_k^T` and the output as `T_v @ down`
    (= W_alpha B for symmetric ZCA, Thm B.7.1 with T_v^T = W_alpha^{-1} in its inverse convention). The
    `W_alpha^{-1}` that App. A.1.3 folds into the last linear block does not preserve the scores;
    tests/facts check both numerically. Modifies `mlp` in place and returns it.

    Args:
        mlp (FactMLP): an MLP built on whitened keys keys @ T_k and values values @ T_v.
        key_transform (d, d): T_k, or None (keys not whitened).
        value_transform (d, d): T_v, or None (values not whitened).

    Returns:
        mlp (FactMLP): the same module, now on the raw embeddings.

    Examples:
        >>> from symformer.facts import build_fact_mlp, fact_accuracy, fold_whitening, make_fact_set, whitening_matrix
        >>> fs = make_fact_set(16, 8, kappa=3.0, seed=0)
        >>> tk, tv = whitening_matrix(fs.keys, 0.5), whitening_matrix(fs.values, 0.5)
        >>> mlp = build_fact_mlp(fs.keys @ tk, fs.values @ tv, fs.facts, "naive")  # on whitened embeddings
        >>> mlp = fold_whitening(mlp, tk, tv)  # the same scores on the raw ones
        >>> fact_accuracy(mlp, fs.keys, fs.values, fs.facts)
        1.0
    """
    with torch.no_grad():
        if key_transform is not None:
            for lin in (mlp.gate, mlp.up):
                if lin is not None:
                    lin.weight.copy_(lin.weight @ key_transform.to(lin.weight.dtype).T)
        if value_transform is not None:
            mlp.down.left_multiply(value_transform.to(mlp.dtype))
    return mlp
