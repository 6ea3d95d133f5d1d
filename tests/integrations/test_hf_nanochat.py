"""NanoChat: its rotate_half is cat(x2, -x1), so its RoPE turns each pair by -theta p, and it normalises q and k per
head AFTER the rotation with parameter-free RMSNorms. The parts start from the negated frequencies and apply the
norms where HF does; the group leaves W_Q / W_K alone (rms(U q) != rms(q) for a scaling U) and keeps GL(d_h) on V/O,
head permutations. The generic family tests (parity, padding, far positions, cores, exact_float64) run on it too."""

from __future__ import annotations

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import (  # noqa: E402
    check_gradient_action,
    float64_reference,
    ids,
    logits,
    replaced_record,
    tiny,
)

from symformer.integrations import hf  # noqa: E402
from symformer.integrations.hf import _common  # noqa: E402


def _model(positional=None, **opts):
    model = tiny("nanochat", torch.float64)
    model = model if positional is None else hf.patch_positional(model, positional, **opts)
    return float64_reference(model)


def test_rope_parity_needs_the_negated_frequencies():
    """RoPE and ESPR (commuting init) patched in reproduce the native logits to float64 rounding; with the model's
    frequencies taken as they are (the other families' rule) the logits move: a part turning by +theta p."""
    x = ids(n=24)
    ref = logits(_model(), x)
    for positional in ("rope", "espr"):
        assert (logits(_model(positional), x) - ref).abs().max().item() <= 1e-10
    with replaced_record("nanochat", negated_rotation=False):
        assert (logits(_model("rope"), x) - ref).abs().max().item() > 1e-3


def test_the_norms_come_after_the_rotation():
    """ESPR with d_act < head_dim zeroes the null coordinates, so rms before and after the rotation differ: the patch
    must apply the norms after it, as HF does. Control: applied before (the Qwen3 order), the logits move."""
    x = ids(n=24)
    opts = {"d_act": 4, "commuting_init": False, "init_scale": 0.3}
    after = logits(_model("espr", **opts), x)
    with replaced_record("nanochat", qk_norm="before"):  # qk_norms hands the norms to _project, before the rotation
        before = logits(_model("espr", **opts), x)
    assert (after - before).abs().max().item() > 1e-3


@pytest.mark.parametrize(
    "positional,opts", [(None, {}), ("string", {"init_scale": 0.3}), ("espr", {"init_scale": 0.05})]
)
def test_logits_invariant_under_a_random_element(positional, opts):
    model, x = _model(positional, **opts), ids(n=24)
    ref = logits(model, x)
    group = hf.symmetry_group(model, ffn=True)
    group.apply(model, group.random(torch.Generator().manual_seed(1)))
    assert ((logits(model, x) - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_a_scaling_on_the_projections_breaks_the_logits():
    """Negative control for the trivial Q/K factor: a scaling in H(d_h) on W_Q and its inverse on W_K keep a plain
    RoPE model's logits, but the parameter-free norms after the rotation see |U q| != |q|, so the logits move."""
    from symformer.positional import RoPE
    from symformer.teleport.qk_groups import qk_group_for

    model, x = _model(), ids(n=24)
    ref = logits(model, x)
    u = qk_group_for(RoPE(8), 8).random((1,), torch.Generator().manual_seed(2))[0]
    attn = _common.attention_modules(model)[0]
    with torch.no_grad():
        attn.q_proj.weight[:8] = u @ attn.q_proj.weight[:8]
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
    assert (logits(model, x) - ref).abs().max().item() > 1e-4


def test_gradient_action_and_norms_match_autograd():
    check_gradient_action(_model(), False)
