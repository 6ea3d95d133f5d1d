"""Decoders: compressed codes C (|V| x m) and D (d x m) with <v_i, D c_i> > <v_j, D c_i> (eq. 7, Sec. 4.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from symformer._rng import generator
from symformer._validation import check_choice, check_int, check_tensor
from symformer.facts.decodability import Decodability, decodability, require_vertices


@dataclass
class Decoder:
    """Codes and decoder of a construction: value i is encoded as c_i and decoded by argmax_j <v_j, D c_i>.

    Attributes:
        C (n_values, m): one code per value.
        D (d, m): the decoder, the factor the MLP's down projection ends with.
        kind (str): how it was built ("jl-gaussian", "jl-sign", "gd").

    Examples:
        >>> import torch
        >>> from symformer.facts import jl_decoder, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> dec = jl_decoder(fs.values, m=16, seed=0)
        >>> scores = (dec.C @ dec.D.T) @ fs.values.T  # (|V|, |V|): <v_j, D c_i>
        >>> torch.equal(scores.argmax(1), torch.arange(32))  # every value decodes from its code
        True
    """

    C: torch.Tensor  # (|V|, m) codes
    D: torch.Tensor  # (d, m)
    kind: str


def decodes(dec: Decoder, values: torch.Tensor) -> float:
    """Fraction of values i with argmax_j <v_j, D c_i> = i."""
    s = (dec.C @ dec.D.T) @ values.double().T
    return float((s.argmax(1) == torch.arange(values.shape[0])).double().mean())


def jl_decoder(
    values: torch.Tensor, m: int, kind: str = "gaussian", seed: int | None = 0, info: Decodability | None = None
) -> Decoder:
    """Alg. 4 / Construction 4.2: D i.i.d. Gaussian (or +-1) d x m, C = U* D. Works w.h.p. once
    m >= 32 rho^-2 ln(4|K|(|K|-1)/delta) (Thm B.5.3).

    Args:
        values (n_values, d): value embeddings, every one a vertex of their convex hull.
        m (int): the code width.
        kind (str): "gaussian" or "sign" (+-1 entries).
        seed (int | None): the draw of D.
        info (Decodability | None): `decodability(values)` if already computed.

    Returns:
        decoder (Decoder): C (|V|, m), D (d, m) float64, kind "jl-gaussian" or "jl-sign".

    Examples:
        >>> from symformer.facts import jl_decoder, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> dec = jl_decoder(fs.values, m=12, kind="sign", seed=0)
        >>> dec.C.shape, dec.D.shape, dec.kind
        (torch.Size([32, 12]), torch.Size([16, 12]), 'jl-sign')
    """
    check_tensor("values", values, 2)
    check_int("m", m, 1)
    check_choice("kind", kind, ("gaussian", "sign"))
    info = require_vertices(values, info)
    g = generator("jl", seed)  # independent of the values' stream (symformer._rng)
    d = values.shape[1]
    D = torch.randn(d, m, generator=g, dtype=torch.float64)
    if kind == "sign":
        D = torch.sign(D)
    D = D / math.sqrt(m)
    return Decoder(info.U.double() @ D, D, "jl-" + kind)


def jl_bound(rho: float, n_keys: int, delta: float = 1 / 3) -> int:
    """Thm B.5.3's sufficient m (a loose upper bound; the capacity search finds the real one)."""
    return math.ceil(32 / rho**2 * math.log(4 * n_keys * max(1, n_keys - 1) / delta))


def gd_decoder(
    values: torch.Tensor,
    m: int,
    steps: int = 1000,
    lr: float = 1.0,
    seed: int | None = 0,
    dtype: torch.dtype = torch.float32,
    early_stop: bool = True,
) -> Decoder:
    """GD decoder (App. A.1.3): learn C (|V| x m), M (m x d); scores (C M) V^T; cross-entropy; full-batch
    Adam lr 1 with cosine decay to 0.01, 1000 steps. Afterwards the rows of C are normalised (argmax per
    row is scale-free) and M is scaled by one scalar; normalising M's rows, as the appendix says, changes
    the decoding map itself, so we do not. early_stop: stop (checked every 25 steps) once every value
    decodes; the appendix runs all `steps`, which keeps widening the margins the encoder may use.

    Args:
        values (n_values, d): value embeddings.
        m (int): the code width.
        steps (int): Adam steps.
        lr (float): Adam's learning rate (cosine decay to lr / 100).
        seed (int | None): the initial C and M.
        dtype (torch.dtype): the dtype of the optimisation.
        early_stop (bool): stop once every value decodes.

    Returns:
        decoder (Decoder): C (|V|, m) with unit rows, D (d, m), float64, kind "gd".

    Examples:
        >>> import torch
        >>> from symformer.facts import gd_decoder, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> dec = gd_decoder(fs.values, m=8, steps=50, seed=0)
        >>> torch.equal(((dec.C @ dec.D.T) @ fs.values.T).argmax(1), torch.arange(32))
        True
    """
    check_tensor("values", values, 2)
    check_int("m", m, 1)
    check_int("steps", steps, 1)
    n, d = values.shape
    g = generator("gd_decoder", seed)
    C = (torch.randn(n, m, generator=g) / math.sqrt(m)).to(dtype).requires_grad_()
    M = (torch.randn(m, d, generator=g) / math.sqrt(d)).to(dtype).requires_grad_()
    V = values.to(dtype)
    target = torch.arange(n)
    opt = torch.optim.Adam([C, M], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.01)
    for step in range(steps):
        opt.zero_grad()
        s = (C @ M) @ V.T
        loss = torch.nn.functional.cross_entropy(s, target)
        loss.backward()
        opt.step()
        sched.step()
        if early_stop and step % 25 == 24 and bool((s.argmax(1) == target).all()):
            break  # every value decodes: the codes are all the encoder needs
    with torch.no_grad():
        Cn = C.double() / C.double().norm(dim=1, keepdim=True).clamp_min(1e-300)
        Mn = M.double() / M.double().norm().clamp_min(1e-300) * math.sqrt(m)
    return Decoder(Cn, Mn.T.contiguous(), "gd")


def margin_optimal(values: torch.Tensor) -> torch.Tensor:
    """U* (eq. 4), the output directions with the best decoding margin."""
    return require_vertices(values, decodability(values)).U
