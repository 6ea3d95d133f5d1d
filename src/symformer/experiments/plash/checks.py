"""Sketch moments (Prop. C.4 and the Avron-Nguyen-Woodruff bound) and the certification simulation of
Fig. 2/4 (Sec. H.5) for the `plash` experiment (plash-attention.txt)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from symformer._rng import seeded_generator
from symformer.attention.certificate import cert_rate, certified, certify, combine_heads
from symformer.attention.plash import PlashAttention
from symformer.attention.sketch import bucket_hashes, sign_hashes, tensor_sketch

DEGREES = (1, 2, 3)


# ------------------------------------------------------------------------------------------------ sketches
def sketch_checks(draws: int, seed: int) -> dict:
    """z-scores of E<TS_k(x), TS_k(y)> = <x, y>^k (eq. 47); measured variance against Prop. C.4 (eq. 48)
    and against Avron-Nguyen-Woodruff (2014, Lemma 2): Var <= (2 + 3^k) |x|^2k |y|^2k / D."""
    g = seeded_generator(seed)
    d, D = 16, 16
    x = torch.randn(d, generator=g, dtype=torch.float64)
    y = x + 0.7 * torch.randn(d, generator=g, dtype=torch.float64)
    x, y = x / x.norm(), y / y.norm()
    u = torch.full((d,), d**-0.5, dtype=torch.float64)  # x = y = uniform: the worst case for k >= 2
    out: dict = {key: {} for key in ("z", "var", "bound", "var_uniform", "bound_uniform", "anw_ratio")}
    for k in DEGREES:
        h = bucket_hashes(k * draws, d, D, g).view(k, draws, d)
        s = sign_hashes(k * draws, d, g).double().view(k, draws, d)
        est = (tensor_sketch(x, h, s, D) * tensor_sketch(y, h, s, D)).sum(-1)
        ip = float(x @ y)
        out["z"][k] = float((est.mean() - ip**k) / (est.std() / math.sqrt(draws)))
        out["var"][k] = float(est.var())
        out["bound"][k] = (ip ** (2 * k) + 1.0) / D
        eu = tensor_sketch(u, h, s, D).pow(2).sum(-1)
        out["var_uniform"][k] = float(eu.var())
        out["bound_uniform"][k] = 2.0 / D
        anw = (2 + 3**k) / D  # unit vectors: |x|^2k |y|^2k = 1
        out["anw_ratio"][k] = max(out["var"][k], out["var_uniform"][k]) / anw
    return out


# ----------------------------------------------------------------------------------------- certification
def _draws(n: int, seed: int):
    """Fig. 2/4 inputs: h = 4 heads, d = 32, N_q = 32, N_k = 64, entries N(0, sigma^2), sigma ~ U[0.004, 0.08]."""
    g = seeded_generator(seed)
    sig = torch.rand(n, 1, 1, 1, generator=g, dtype=torch.float64) * (0.08 - 0.004) + 0.004
    q, k, v = (torch.randn(n, 4, m, 32, generator=g, dtype=torch.float64) * sig for m in (32, 64, 64))
    return q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)


def _module(m: int, tau_g: float, seed: int) -> PlashAttention:
    # K = {1}, D = 256, tau = 1 (Sec. H.5); the rest at our defaults (the paper does not state them)
    return PlashAttention(32, 1, 32, M=m, degrees=(1,), D_k=256, tau=1.0, tau_g=tau_g, seed=seed + m).double().eval()


def tau_star(taus: list[float], rates: list[float], level: float = 0.5) -> float:
    """First tau_g where the CertRate curve reaches `level`, log-linearly interpolated; inf if never."""
    for i, r in enumerate(rates):
        if r >= level:
            if i == 0:
                return taus[0]
            t0, t1, r0 = math.log(taus[i - 1]), math.log(taus[i]), rates[i - 1]
            return math.exp(t0 + (level - r0) / (r - r0) * (t1 - t0))
    return math.inf


def trivial_bound(m: int, q, k, v, seed: int) -> torch.Tensor:
    """Per-draw ||Y_soft||_F + ||Y_PLASH||_F (heads combined): every eps_out above it certifies trivially."""
    mod = _module(m, 1.0, seed)
    with torch.no_grad():
        y_soft = F.scaled_dot_product_attention(q, k, v)
        y_pl = mod.trace(q, k, v).out
    return combine_heads(y_soft.flatten(1).norm(dim=-1), 4) + combine_heads(y_pl.flatten(1).norm(dim=-1), 4)


def cert_simulation(quick: bool, seed: int) -> dict:
    """CertRate(M, tau_g, eps_out) over a log grid tau_g in [631, 1e5] and the paper's eps_out window [520, 853],
    the crossing tau_g*(M) of the eps-averaged CertRate through 0.5, and soundness over every certified cell."""
    # quick: M in {16, 64}, 20 draws, 6 x 5 grid (a fraction of quick `plash`); full: the paper's four M, 200
    # draws and 15 x 15 grid, over the wider tau_g range
    draws, n_tau, n_eps = (20, 6, 5) if quick else (200, 15, 15)
    ms = (16, 64) if quick else (16, 32, 48, 64)
    taus = torch.logspace(math.log10(631.0), 5.0, n_tau, dtype=torch.float64).tolist()
    eps_grid = torch.logspace(math.log10(520.0), math.log10(853.0), n_eps, dtype=torch.float64)
    q, k, v = _draws(draws, seed)
    res: dict = {
        "grid": {},
        "certrate": {},
        "tau_star": {},
        "violations": 0,
        "certified_cells": 0,
        "trivial_bound_median": {},
        "median_eps_I_plus_det": {},
        "median_error": {},
        "median_C": {},
        "delta": {},
        "draws": draws,
        "tau_grid": taus,
        "eps_grid": eps_grid.tolist(),
    }
    for m in ms:
        per_tau, coefs = [], []
        for tg in taus:
            c = certify(_module(m, tg, seed), q, k, v)
            ei, ed, co, err = (combine_heads(x, 4) for x in (c.eps_I, c.eps_det, c.coef, c.error))
            per_tau.append(cert_rate(ei, ed, co, tg, eps_grid).tolist())  # one rate per eps_out
            ok = certified(ei, ed, co, tg, eps_grid)  # (n_eps, draws)
            res["certified_cells"] += int(ok.sum())
            res["violations"] += int((ok & (err[None] > eps_grid[:, None])).sum())
            coefs.append(float(co.median()))
        mean_rate = [sum(r) / len(r) for r in per_tau]
        res["grid"][m] = {f"{tg:.4g}": r for tg, r in zip(taus, per_tau)}
        res["certrate"][m] = mean_rate
        res["tau_star"][m] = tau_star(taus, mean_rate)
        res["median_C"][m] = {"tau_g_min": coefs[0], "tau_g_max": coefs[-1]}
        res["trivial_bound_median"][m] = float(trivial_bound(m, q, k, v, seed).median())
        res["median_eps_I_plus_det"][m] = float((ei + ed).median())
        res["median_error"][m] = float(err.median())
        res["delta"][m] = c.delta
    return res
