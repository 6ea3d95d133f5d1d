"""Forward-pass error certificate of PLASH against exact softmax attention (Thm 3.2 / H.3).

||Y_soft - Y_PLASH||_F <= eps_I + eps_det + eps_II  (eq. 97) where
- eps_I   = sqrt(N_q) (Gamma_Q rho_K V_max + rho_V), the hard-routing comparator (Lemma F.2, eq. 100);
- eps_det = ||Y_q - Y_det||_F, with Y_det the PLASH output on deterministic features (eq. 101);
- eps_II  <= C tau_g^{-k_min}, C = sqrt(N_q) L_post ||W_out|| (sum_k beta_k^2 (sqrt(1+eta) + D_k^{(k-1)/2})^2)^{1/2}
  on the sketch event of probability >= 1 - delta (Thm G.4 + Lemma H.1). Eqs. (96), (98), (103) of the
  paper drop the D_k^{(k-1)/2} factor (only right for k = 1); it is restored here. For |K| > 1 the step
  tau_g^{-k} <= tau_g^{-k_min} (eq. 107) also needs tau_g >= 1, which `certified` requires.

Every function takes folded inputs: q (n, N_q, d_k), k (n, N_k, d_k), v (n, N_k, d_v) and returns one
value per problem n. Where the paper bounds the image of the segment S by its endpoints (Thm B.8 for
layers after the first, r_{l,A}), which is not a bound for a nonlinear image, we use the sound
ball bound: every point of the image lies within (product of earlier layer constants) * r_0 of the
deterministic endpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from symformer._rng import seeded_generator
from symformer._validation import check_float, check_int, check_tensor, fail


def row_norm_max(x: torch.Tensor) -> torch.Tensor:
    """||X||_{2,inf} = max_i ||X_i,:||_2 over the last two axes."""
    return x.norm(dim=-1).amax(dim=-1)


def op_norm(w: torch.Tensor, iters: int = 200, seed: int | None = 0) -> torch.Tensor:
    """Spectral norm by power iteration on W^T W (Thm B.8: 'operator norms by power iteration')."""
    check_tensor("w", w, 2)
    check_int("iters", iters, 1)
    g = seeded_generator(seed)
    x = torch.randn(w.shape[1], generator=g, dtype=w.dtype)
    x = x / x.norm()
    wd = w.detach()
    gram = wd.t() @ wd
    prev = torch.zeros((), dtype=w.dtype)
    for _ in range(iters):
        y = gram @ x
        n = y.norm()
        if n == 0:
            return n
        x = y / n
        if abs(float(n - prev)) <= 1e-13 * float(n):  # converged to machine precision
            break
        prev = n
    return (wd @ x).norm()


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def hard_routing(k: torch.Tensor, v: torch.Tensor, prototypes: torch.Tensor):
    """K^q, V^q: every key replaced by the mean of its cluster c(i) = argmax_j (K P^T)_ij (eqs. 57-59)."""
    c = (k @ prototypes.to(k.dtype).t()).argmax(dim=-1)
    onehot = F.one_hot(c, prototypes.shape[0]).to(k.dtype)  # (n, N_k, M)
    counts = onehot.sum(dim=-2).clamp_min(1.0)[..., None]
    kbar = onehot.transpose(-1, -2) @ k / counts
    vbar = onehot.transpose(-1, -2) @ v / counts
    return onehot @ kbar, onehot @ vbar


def eps_stage1(q, k, v, prototypes, scale=None):
    """(eps_I, Y_q): Lemma F.2 / eq. (100), deterministic."""
    kq, vq = hard_routing(k, v, prototypes)
    s = _scale(q, scale)
    rho_k, rho_v = row_norm_max(k - kq), row_norm_max(v - vq)
    gamma_q = s * row_norm_max(q)  # Gamma_Q = ||Q||_{2,inf} / sqrt(d_k) for the default scale
    eps = math.sqrt(q.shape[-2]) * (gamma_q * rho_k * row_norm_max(v) + rho_v)
    y_q = F.scaled_dot_product_attention(q, kq, vq, scale=s)
    return eps, y_q


def _ln_lipschitz(rows: torch.Tensor, delta: torch.Tensor, gamma: torch.Tensor, eps_ln: float) -> torch.Tensor:
    """Lemma B.4 with the endpoint bounds (35)/(37): every pre-LN row lies within `delta` of a row of `rows`."""
    d = rows.shape[-1]
    c = (rows - rows.mean(dim=-1, keepdim=True)).norm(dim=-1)
    m = (torch.clamp(c.amin(-1) - 2 * delta, min=0.0) ** 2) / d + eps_ln
    cmax = c.amax(-1) + 2 * delta
    return gamma.abs().max() * (2 / m.sqrt() + (2 / d) * cmax**2 / m**1.5)


def _heads(layer):
    att = layer.self_attn
    d, h = att.embed_dim, att.num_heads
    dh = d // h
    w = att.in_proj_weight.detach()
    b = att.in_proj_bias.detach() if att.in_proj_bias is not None else torch.zeros(3 * d, dtype=w.dtype)
    split = [
        (w[i * d + j * dh : i * d + (j + 1) * dh], b[i * d + j * dh : i * d + (j + 1) * dh])
        for i in range(3)
        for j in range(h)
    ]
    return split[:h], split[h : 2 * h], split[2 * h :], dh


def layer_lipschitz(
    layer, y_det: torch.Tensor, radius: torch.Tensor, y_ts: torch.Tensor | None = None, paper: bool = True
):
    """Thm B.8 bound L_l for one post-LN encoder layer on the set of inputs within `radius` (per problem)
    of y_det (and, for the first layer, on the segment [y_det, y_ts]: envelopes by convexity, eq. 27).
    paper=True takes the FFN-side radius r_{l,A} as the endpoint distance ||A - A^det|| as Thm B.8 does;
    paper=False uses the ball bound, which is rigorous for the (curved) image F(S) but far looser."""
    wq, wk, wv, dh = _heads(layer)

    def env(w, b):
        e = row_norm_max(y_det @ w.t() + b)
        if y_ts is not None:  # segment: sup of a convex function at an endpoint (eq. 27)
            return torch.maximum(e, row_norm_max(y_ts @ w.t() + b))
        return e + op_norm(w) * radius

    wo = op_norm(layer.self_attn.out_proj.weight)
    l_mhsa = 0.0
    for (aq, bq), (ak, bk), (av, bv) in zip(wq, wk, wv):
        g_q, g_k, g_v = env(aq, bq) / math.sqrt(dh), env(ak, bk), env(av, bv)
        l_mhsa = l_mhsa + g_q * g_v * op_norm(ak) + g_k * g_v * op_norm(aq) + op_norm(av)  # Lemma B.7
    l_mhsa = wo * l_mhsa
    l_ffn = op_norm(layer.linear2.weight) * op_norm(layer.linear1.weight)  # ReLU: L_sigma = 1
    with torch.no_grad():
        h_f = y_det + layer.self_attn(y_det, y_det, y_det, need_weights=False)[0]
        ln_f = _ln_lipschitz(h_f, (1 + l_mhsa) * radius, layer.norm1.weight.detach(), layer.norm1.eps)
        a_det = layer.norm1(h_f)
        h_g = a_det + layer.linear2(torch.relu(layer.linear1(a_det)))
        if y_ts is not None and paper:  # Thm B.8 step 3b: endpoint distance r_{l,A} (paper's reading)
            h_ts = y_ts + layer.self_attn(y_ts, y_ts, y_ts, need_weights=False)[0]
            r_a = row_norm_max(layer.norm1(h_ts) - a_det)
        else:  # sound: every point of F(S) lies within L_LN,F (1 + L_MHSA) radius of a_det
            r_a = ln_f * (1 + l_mhsa) * radius
        ln_g = _ln_lipschitz(h_g, (1 + l_ffn) * r_a, layer.norm2.weight.detach(), layer.norm2.eps)
    return ln_g * (1 + l_ffn) * ln_f * (1 + l_mhsa)


def mixer_lipschitz(mixer, y_det: torch.Tensor, y_ts: torch.Tensor, paper: bool = True) -> torch.Tensor:
    """L_mix = prod_l L_l (Thm B.5 / B.8) on the segment between the two Stage II embeddings."""
    r0 = row_norm_max(y_ts - y_det)
    total = torch.ones_like(r0)
    x_det = y_det
    with torch.no_grad():
        for i, layer in enumerate(mixer.layers):
            lip = layer_lipschitz(layer, x_det, total * r0, y_ts if i == 0 else None, paper)
            total = total * lip
            x_det = layer(x_det)
    return total


@dataclass
class Certificate:
    eps_I: torch.Tensor  # (n,) Stage I comparator bound
    eps_det: torch.Tensor  # (n,) deterministic bias ||Y_q - Y_det||_F
    coef: torch.Tensor  # (n,) C: eps_II <= C tau_g^{-k_min} on the sketch event
    l_mix: torch.Tensor  # (n,)
    l_post: torch.Tensor  # (n,)
    error: torch.Tensor  # (n,) measured ||Y_soft - Y_PLASH||_F
    sketch_event: torch.Tensor  # (n,) bool: ||z^ts_jk|| <= sqrt(1+eta) tau_g^{-k} for all j, k (Lemma G.3)
    tau_g: float
    k_min: int
    delta: float  # failure probability implied by the sizing rule (99) for the given eta


def stage2_factor(module, eta: float) -> torch.Tensor:
    """(sum_k beta_k^2 (sqrt(1+eta) + D_k^{(k-1)/2})^2)^{1/2}: eq. (103) with the D_k factor restored."""
    b = module.beta.detach().double()
    terms = [(math.sqrt(1 + eta) + dk ** ((k - 1) / 2)) ** 2 for k, dk in zip(module.degrees, module.D_k)]
    return (b**2 * torch.tensor(terms, dtype=torch.float64)).sum().sqrt()


def sizing_delta(module, eta: float) -> float:
    """Smallest total delta allowed by D_k >= 2M / (eta^2 delta_k) (eq. 99), split over the degrees."""
    return sum(2 * module.M / (eta**2 * dk) for dk in module.D_k)


def certify(module, q, k, v, eta: float = 0.99, scale: float | None = None, paper: bool = True) -> Certificate:
    """All forward-pass quantities of Thm H.3 for a PLASH module on folded inputs (n, N, d).
    paper=True follows Thm B.8 / eq. (87) literally (endpoint envelopes; Gamma_V(S) as the larger
    endpoint value); paper=False adds the ball terms that make every step rigorous."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, 3)
    if k.shape[-1] != q.shape[-1]:
        fail("k", f"width {k.shape[-1]}", f"the width of q ({q.shape[-1]})")
    if k.shape[-2] == 0:
        fail("k", f"shape {tuple(k.shape)}", "at least one key")
    check_float("eta", eta, 0.0, 1.0, low_open=True, high_open=True)
    s = _scale(q, scale)
    with torch.no_grad():
        eps_i, y_q = eps_stage1(q, k, v, module.prototypes, s)
        t_ts = module.trace(q, k, v, s)
        t_det = module.trace(q, k, v, s, deterministic=True)
        y_soft = F.scaled_dot_product_attention(q, k, v, scale=s)
        l_mix = mixer_lipschitz(module.mixer, t_det.y_enh, t_ts.y_enh, paper)
        l_k, l_v = op_norm(module.w_k.weight), op_norm(module.w_v.weight)
        r0 = row_norm_max(t_ts.y_enh - t_det.y_enh)
        if paper:  # endpoint values of ||V_g||_{2,inf}
            gamma_v = torch.maximum(row_norm_max(t_det.v_g), row_norm_max(t_ts.v_g))
        else:  # sup over S of ||V_g(U)||_{2,inf}, rigorous
            gamma_v = row_norm_max(t_det.v_g) + l_v * l_mix * r0
        l_post = l_mix * (s * row_norm_max(q) * l_k * gamma_v + l_v)  # eq. (87)
        coef = math.sqrt(q.shape[-2]) * l_post * op_norm(module.w_out.weight) * stage2_factor(module, eta)
        feats = module.sketch_features(t_ts.g_tilde)
        event = torch.ones(q.shape[0], dtype=torch.bool)
        for kk, z in zip(module.degrees, feats):
            event &= (z.norm(dim=-1) <= math.sqrt(1 + eta) * module.tau_g ** (-kk) * (1 + 1e-9)).all(-1)
    return Certificate(
        eps_i,
        (y_q - t_det.out).flatten(1).norm(dim=-1),
        coef.to(q.dtype),
        l_mix,
        l_post,
        (y_soft - t_ts.out).flatten(1).norm(dim=-1),
        event,
        module.tau_g,
        min(module.degrees),
        sizing_delta(module, eta),
    )


def combine_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Per-(draw, head) Frobenius terms -> per-draw: sqrt(sum_h x_h^2) (Frobenius over all heads)."""
    return x.reshape(-1, heads).pow(2).sum(-1).sqrt()


def certified(eps_i, eps_det, coef, tau_g: float, eps_out, k_min: int = 1, n_degrees: int = 1):
    """Thm H.3: slack Delta = eps_out - eps_I - eps_det > 0 and tau_g >= (C / Delta)^{1/k_min} (eq. 103,
    restored). eps_out may be a tensor of tolerances (broadcast against the per-draw terms)."""
    eps_out = torch.as_tensor(eps_out, dtype=eps_i.dtype)
    slack = eps_out[..., None] - (eps_i + eps_det)
    ok = (slack > 0) & (tau_g >= (coef / slack.clamp_min(1e-300)) ** (1.0 / k_min))
    if n_degrees > 1 and tau_g < 1:
        ok &= False
    return ok


def cert_rate(eps_i, eps_det, coef, tau_g: float, eps_out, k_min: int = 1, n_degrees: int = 1) -> torch.Tensor:
    """CertRate(eps_out): fraction of draws certified (Sec. 3.3 / H.4)."""
    return certified(eps_i, eps_det, coef, tau_g, eps_out, k_min, n_degrees).double().mean(-1)
