"""Teleportation on HF Llama-family models: the GQA symmetry group (U shared by the query heads of one key head),
float64 invariance, the closed-form gradient action against autograd and brute force, and a plain-loop callback."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tests.integrations._hf_models import float64_reference, ids, tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402
from symformer.teleport import GroupElement, brute_force_norms, closed_form_norms, symmetry_group  # noqa: E402

CASES = [("llama", None, {}), ("llama", "rope", {}), ("mistral", "string", {"init_scale": 0.3}),
         ("qwen2", "espr", {"init_scale": 0.05}), ("llama", "circulant_string", {})]


def _model(family, positional, opts, kv_heads=2):
    model = tiny(family, torch.float64, kv_heads=kv_heads, attention_bias=family == "llama")
    model = model if positional is None else hf.patch_positional(model, positional, **opts)
    return float64_reference(model)  # float64 norms and rotary table: invariance is then read at float64 rounding


def _loss(model, x):
    return model(x, labels=x).loss


@pytest.mark.parametrize("family,positional,opts", CASES)
def test_output_invariant_under_random_element(family, positional, opts):
    model, x = _model(family, positional, opts), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model, ffn=True)
    g = group.random(torch.Generator().manual_seed(1))
    assert g.qk[0].shape == (2, 8, 8)  # one factor per KEY head: shared by the 2 query heads reading it
    group.apply(model, g)
    with torch.no_grad():
        out = model(x).logits
    assert ((out - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_invariance_can_fail():
    """Negative controls: a GL(d_h) factor on a RoPE model, or different U for two query heads of one group."""
    model, x = _model("llama", "rope", {}), ids()
    with torch.no_grad():
        ref = model(x).logits
    group = hf.symmetry_group(model)
    gen = torch.Generator().manual_seed(2)
    site = group.sites[0]
    eye = torch.eye(8, dtype=torch.float64)
    g = group.identity()
    g.qk[0] = eye + 0.3 * torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)  # not in H(d_h)
    saved = [p.detach().clone() for p in group.parameters()]
    group.apply(model, g)
    with torch.no_grad():
        assert (model(x).logits - ref).abs().max() > 1e-4
        for p, s in zip(group.parameters(), saved):
            p.copy_(s)
        u = site.qk.random((1,), gen)[0]
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[:8] = u @ attn.q_proj.weight[:8]
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
        assert (model(x).logits - ref).abs().max() > 1e-4  # query head 1 also reads key head 0 but kept I


def test_teleport_symmetry_group_dispatches_and_refuses_approximate_cores():
    model = _model("qwen2", "string", {"init_scale": 0.2})
    group = symmetry_group(model)  # symformer.teleport's entry point, through the integration's hook
    assert type(group).__name__ == "GQASymmetryGroup" and {s.qk.kind for s in group.sites} == {"string"}
    hf.configure(model, "favor", n_features=16)
    with pytest.raises(ValueError, match="exact softmax"):
        hf.symmetry_group(model)


@pytest.mark.parametrize("positional", [None, "espr"])
def test_gradient_action_and_norms_match_autograd(positional):
    """grad L(g theta) from autograd equals grad_action(g, grad L(theta)); closed-form candidate norms equal the
    brute-force ones (apply, backward, restore), GQA and the gated-MLP rescaling included."""
    model, x = _model("llama", positional, {"init_scale": 0.05} if positional else {}), ids(n=8)
    group = hf.symmetry_group(model, ffn=True)
    params = group.parameters()
    g0 = torch.autograd.grad(_loss(model, x), params)
    g = group.random(torch.Generator().manual_seed(3), scale=0.2)
    pred = group.grad_action(g, {id(p): gr for p, gr in zip(params, g0)})
    group.apply(model, g)
    g1 = torch.autograd.grad(_loss(model, x), params)
    err = max(((pred[id(p)] - gr).abs().max() / gr.abs().max().clamp_min(1e-30)).item() for p, gr in zip(params, g1))
    assert err <= 1e-8
    model.zero_grad()
    _loss(model, x).backward()
    cands = group.sample(4, 0.3, torch.Generator().manual_seed(4), ffn=True)
    closed = closed_form_norms(model, group, cands)
    brute = brute_force_norms(model, group, cands, lambda: _loss(model, x))
    assert torch.allclose(closed, brute, rtol=1e-9, atol=0)
    assert isinstance(cands, GroupElement)


def test_hf_teleport_in_a_plain_loop():
    model = hf.patch_positional(tiny("llama", kv_heads=2), "string", init_scale=0.1)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.randint(0, 40, (6, 4, 13), generator=torch.Generator().manual_seed(0))
    tele = hf.HFTeleport(model, opt, _loss, total_steps=6, step=2, steps=2, samples=8, alpha=0.3,
                         state_policy="transform")
    for step in range(6):
        loss = _loss(model, data[step])
        loss.backward()
        tele.after_backward(step, data[step], loss)
        opt.step()
        opt.zero_grad()
    assert [e["step"] for e in tele.log] == [2, 3]
    assert all(e["skipped"] == 0 for e in tele.log)
    with pytest.raises(ValueError, match="step"):
        hf.HFTeleport(model, opt, _loss, total_steps=3, step=5)


def test_qwen3_query_key_norms_are_refused_with_the_reason():
    """Qwen3 normalises q and k per head before the rotation: an H(d_h) factor on W_Q / W_K (the Llama-family
    Q/K action) changes the logits there, so symmetry_group refuses the model instead of teleporting wrongly."""
    model, x = _model("qwen3", None, {}), ids()
    with pytest.raises(ValueError, match=r"^model: got .Qwen3ForCausalLM \(model_type='qwen3'\) with a per-head q"):
        hf.symmetry_group(model)
    with pytest.raises(ValueError, match="q_norm"):
        hf.HFTeleport(model, None, _loss, total_steps=10, step=2)
    site = hf.symmetry_group(_model("qwen2", None, {})).sites[0]  # the same dims without the norms
    u = site.qk.random((1,), torch.Generator().manual_seed(3))[0]
    with torch.no_grad():
        ref = model(x).logits
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[:16] = torch.block_diag(u, u) @ attn.q_proj.weight[:16]  # both query heads of group 0
        attn.k_proj.weight[:8] = torch.linalg.inv(u).T @ attn.k_proj.weight[:8]
        assert (model(x).logits - ref).abs().max() > 1e-4
