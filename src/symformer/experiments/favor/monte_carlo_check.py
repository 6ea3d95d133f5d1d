"""Monte Carlo check of T7.3 (unbiasedness) and T7.4/T7.5 (closed-form variance, 1/n_rf scaling) of positive
random features, in float64 on the CPU (an exactness check: it does not follow RunContext.device)."""

from __future__ import annotations

import math

import torch

from symformer._rng import seeded_generator
from symformer.attention.favor import draw_features
from symformer.experiments.favor.plan import ESTIMABLE_SE, ROUNDING


def grid_points(d: int, norms: list[float], angles: list[float], seed: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Pairs (x, y) in R^d with prescribed |x|, |y| and angle, in random orientations."""
    g = seeded_generator(seed)
    xs, ys, meta = [], [], []
    for nx in norms:
        for ny in norms:
            for ang in angles:
                u = torch.linalg.qr(torch.randn(d, 2, generator=g, dtype=torch.float64))[0]
                xs.append(nx * u[:, 0])
                ys.append(ny * (math.cos(ang) * u[:, 0] + math.sin(ang) * u[:, 1]))
                meta.append((nx, ny, ang))
    return torch.stack(xs), torch.stack(ys), meta


def single_draw_variance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """T7.4: Var Z = exp(2 x.y) [exp(|x|^2 + |y|^2 + 2 x.y) - 1], with |x|^2 + |y|^2 + 2 x.y evaluated as
    |x + y|^2 (the same number, but without cancellation near y = -x, where the variance vanishes)."""
    xy = (x * y).sum(-1)
    return torch.exp(2 * xy) * torch.expm1(((x + y) ** 2).sum(-1))


def relative_se_of_variance(x: torch.Tensor, y: torch.Tensor, n_rf: int, reps: int) -> torch.Tensor:
    """Predicted relative s.e. of the sample variance of `reps` means of n_rf draws: Z is log-normal with
    log-variance s^2 = |x + y|^2, excess kurtosis e^{4s^2} + 2e^{3s^2} + 3e^{2s^2} - 6; averaging n_rf draws
    divides it by n_rf; Var(sample variance) ~ sigma^4 (kurtosis_excess + 2) / reps."""
    s2 = ((x + y) ** 2).sum(-1)
    kurt = torch.exp(4 * s2) + 2 * torch.exp(3 * s2) + 3 * torch.exp(2 * s2) - 6
    return torch.sqrt((kurt / n_rf + 2) / reps)


def draw_z(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Z(x, y; w_t) = exp(w_t.(x + y) - (|x|^2 + |y|^2)/2) (T7.1), shape (draws, points)."""
    return torch.exp(w @ (x + y).T - 0.5 * ((x * x).sum(-1) + (y * y).sum(-1)))


def monte_carlo(
    d: int, draws: int, n_rf_list: list[int], norms: list[float], angles: list[float], seed: int, chunk: int = 100_000
) -> dict:
    x, y, meta = grid_points(d, norms, angles, seed)
    target = torch.exp((x * y).sum(-1))
    var1 = single_draw_variance(x, y)
    out: dict = {"meta": meta, "z": {}, "var": {}}
    g = seeded_generator(seed + 1)
    for orth in (False, True):
        kind = "orthogonal" if orth else "iid"
        total = torch.zeros_like(target)
        means: dict[int, list[torch.Tensor]] = {n: [] for n in n_rf_list}
        done = 0
        while done < draws:
            c = min(chunk, draws - done)
            block = math.lcm(*n_rf_list, d)  # whole groups of n_rf draws and whole orthogonal blocks
            c = max(c - c % block, block)
            z = draw_z(draw_features(c, d, orth, g), x, y)
            total += z.sum(0)
            for n in n_rf_list:
                means[n].append(z.view(c // n, n, -1).mean(1))
            done += c
        mean = total / done
        # T7.3 z-score with the T7.4/T7.5 standard deviation of the mean of `done` i.i.d. draws (for orthogonal
        # features this is conservative when their variance is no larger, which part 2 measures). At y = -x the
        # estimator is the constant exp(-|x|^2) (variance 0): a rounding floor of 1e-12 relative keeps z finite
        sd = torch.sqrt(var1 / done + (ROUNDING * target) ** 2)
        out["z"][kind] = ((mean - target) / sd).tolist()
        for n in n_rf_list:
            m = torch.cat(means[n])
            emp = m.var(0)
            pred = var1 / n  # T7.5
            se = relative_se_of_variance(x, y, n, len(m))
            # a relative variance error is meaningless where the variance is 0 up to rounding (y = -x)
            ok = (se <= ESTIMABLE_SE) & (var1 > (ROUNDING * target) ** 2)
            out["var"][(kind, n)] = {"ratio": (emp / pred).tolist(), "estimable": ok.tolist()}
    return out
