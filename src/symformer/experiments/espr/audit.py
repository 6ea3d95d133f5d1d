"""The `espr` audit: a numerical check of the ESPR derivation (T0.4 ... T8'.23).

Conventions (ours):
* every check runs in float64; statements that quantify over inputs are checked on `n_draws`
  (>= 10,000) random draws, batched;
* "bounds we state as proven" (their proofs are in the docstrings of audit_series.py and audit_bounds.py) are tallied in
  the metrics `bound_checks` / `bound_violations`; a paper statement that fails goes to `statements_failed`;
* R_sp(r) = R_STR(r) P (T3.5) everywhere except where a check says it uses the conjugation
  R_sp(r) = P R_STR(r) P^T of T8'.7.
The rows live in audit_exact.py and audit_tiers.py (Tiers 0-4), audit_series.py, audit_bounds.py and
audit_tier8.py (Tiers 5-8'); the float64 toolkit in audit_tools.py."""

from __future__ import annotations

import torch

from symformer._rng import seeded_generator
from symformer._validation import check_int
from symformer.experiments.espr.audit_bounds import audit_bounds
from symformer.experiments.espr.audit_exact import audit_exact
from symformer.experiments.espr.audit_tools import Audit, rand_skew, randn, tr
from symformer.positional import ESPR, STRING, RoPE
from symformer.results import Claim, verdict

PAPER_SETTING = "a boxed statement of the derivation (proved or asserted there; no experiment)"


@torch.no_grad()
def _module_checks(a: Audit) -> None:
    """Relative property and orthogonality of the library's modules in float64 (target <= 1e-12, EXACT_TOL)."""
    g = a.g
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pos = 20 * randn(g, 64, 2)
        i, j = torch.randint(0, 64, (2, 2000), generator=g)
        for name, mod in (
            ("RoPE half 2-D", RoPE(16, 2, pairing="half")),
            ("RoPE interleaved 1-D", RoPE(16, 1, pairing="interleaved")),
            # the recorded runs' pairing (the parts default to "half") and random-direction init
            ("STRING", STRING(16, 2, init_scale=0.3, seed=1, pairing="interleaved", mode="mixed_random")),
        ):
            p = pos[:, : mod.coord_dim]
            Rm = mod.matrix(p)
            rel = (tr(Rm[i]) @ Rm[j] - mod.matrix(p[j] - p[i])).abs().amax((-2, -1))
            a.rel(name, rel)
            a.orth(name, Rm)
        esp = ESPR(16, 2, d_act=8, pairing="interleaved", mode="mixed_random")
        dn = 8
        sn = rand_skew(g, 1, dn, 0.7)[0]
        S = torch.zeros(16, 16, dtype=torch.float64)
        S[8:, 8:] = sn  # Cayley parameter on the null block only: P in A (T3.4)
        esp.set_skew(S)
        Rm = esp.matrix(pos)
        Pi = esp.projector()
        lhs = Pi @ tr(Rm[i]) @ Rm[j] @ Pi
        rhs = Pi @ esp.exp_generator(pos[j] - pos[i]) @ Pi
        a.rel("ESPR module, P in A", (lhs - rhs).abs().amax((-2, -1)))
        a.orth("ESPR module R_sp", Rm)
        a.orth("ESPR module P", esp.post_rotation())
    finally:
        torch.set_default_dtype(old)


def run_audit(seed: int = 0, n_draws: int = 10000) -> tuple[list[Claim], dict]:
    """Run every check; returns the claim rows and the audit metrics."""
    check_int("seed", seed, 0)
    check_int("n_draws", n_draws, 100)
    a = Audit(seeded_generator(seed), n_draws)
    audit_exact(a)
    extra = audit_bounds(a)
    _module_checks(a)
    st = f"ours: float64, {n_draws} random draws per statement (Tier 7: fixed Monte Carlo sizes), seed {seed}"
    claims = [
        Claim(r.id, r.statement, r.paper, r.measured, verdict(r.ok), r.evidence, st, PAPER_SETTING) for r in a.rows
    ]
    decided = [c for c in claims if c.verdict != "inconclusive"]
    metrics = {
        "relative_property_max_abs_err": max(a.rel_err.values()),
        "orthogonality_max_abs_err": max(a.orth_err.values()),
        "statements_checked": len(decided),
        "statements_failed": sum(c.verdict == "fails" for c in decided),
        "bound_checks": sum(v[0] for v in a.bounds.values()),
        "bound_violations": sum(v[1] for v in a.bounds.values()),
    }
    details = {
        "relative_property_by_case": dict(a.rel_err),
        "orthogonality_by_case": dict(a.orth_err),
        "bounds": {k: {"checks": v[0], "violations": v[1]} for k, v in a.bounds.items()},
        "failed_statements": [c.id for c in decided if c.verdict == "fails"],
        **extra,
    }
    return claims, {"metrics": metrics, "details": details}
