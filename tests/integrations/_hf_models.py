"""Tiny config-built Llama-family models (no download) for the integration tests."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

import torch

from symformer.integrations.hf.families import family_record, family_records, register_family

#: the family test matrix: every registered record (integrations.hf.families), whose tiny configs the experiment reads
FAMILIES = tuple(r.name for r in family_records())


@contextmanager
def replaced_record(family: str, **changes):
    """The family's record with `changes` (dataclasses.replace) registered in its place for the block: negative
    controls that take a record's field away."""
    old = family_record(family)
    register_family(dataclasses.replace(old, **changes), replace=True)
    try:
        yield
    finally:
        register_family(old, replace=True)


def transformers_or_skip():
    """transformers, or a skip (of the module where called at import) when symformer.integrations.hf cannot run
    here: transformers missing, or unable to use this torch (transformers 5 disables PyTorch < 2.6)."""
    import pytest

    from symformer.integrations.hf._common import hf_unavailable

    problem = hf_unavailable()
    if problem is not None:
        pytest.skip(problem, allow_module_level=True)
    import transformers

    return transformers


def tiny(family: str = "llama", dtype=torch.float32, seed: int = 0, kv_heads: int = 2, init: float = 0.2, **kw):
    """d_model 32, 4 query heads of Dh 8 reading `kv_heads` key heads (GQA when < 4), 2 layers, vocab 40, with the
    family's own settings from its record's tiny config (MoE experts, Gemma 2's cap and window, ...).
    init: weight std (0.2 makes attention move the logits; HF's 0.02 leaves them almost attention-free)."""
    import transformers as tf

    record = family_record(family)
    conf, cls, extra = record.config_class, record.model_class, record.tiny_config()
    if not hasattr(tf, conf):  # the family is newer than the installed transformers (the package supports >= 4.48)
        import pytest

        pytest.skip(f"transformers {tf.__version__} has no {conf} (family {family!r})")
    args = dict(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
        initializer_range=init,
        bos_token_id=None,
        eos_token_id=None,
        head_dim=8,
    )
    args.update(extra)  # the family's own settings win (MLA: as many key heads as heads), then the test's
    args.update(kw)
    config = getattr(tf, conf)(**args)
    if config.model_type != record.name:  # a family registered on another family's classes (a toy) is its own type
        config.model_type = record.name
    torch.manual_seed(seed)
    return getattr(tf, cls)(config).to(dtype).eval()


def float64_reference(model):
    """HF runs its rotary table and RMSNorms in float32 for every dtype; exact_float64 makes float64 mean float64."""
    from symformer.integrations.hf import exact_float64

    return exact_float64(model)


def parity_error(family: str, positional: str, n: int = 24, **opts) -> float:
    """Max |logit difference| in float64 (exact_float64 on both sides) between the family's tiny model patched with
    `positional` and the native one: 0 to rounding for "rope", STRING at P = I and ESPR at its commuting init."""
    x = ids(n=n)
    ref = logits(float64_reference(tiny(family, torch.float64)), x)
    out = logits(float64_reference(patched(family, positional, torch.float64, **opts)), x)
    return (out - ref).abs().max().item()


def invariance_error(family: str, positional: str | None = None, seed: int = 1, **opts) -> float:
    """max |logits(g theta) - logits(theta)| / max |logits| in float64 for a random element g of the family's
    symmetry group (teleportation paper eq. (9): the logits are invariant), the MLP rescaling included."""
    from symformer.integrations import hf

    model = tiny(family, torch.float64) if positional is None else patched(family, positional, torch.float64, **opts)
    model, x = float64_reference(model), ids()
    ref = logits(model, x)
    group = hf.symmetry_group(model, ffn=True)
    group.apply(model, group.random(torch.Generator().manual_seed(seed)))
    return ((logits(model, x) - ref).abs().max() / ref.abs().max()).item()


def ids(batch: int = 2, n: int = 16, vocab: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def logits(model, x, **kw):
    """The full forward's logits: no cache (a model configured with FAVOR+ / PLASH would otherwise fill a state
    cache, hf.cache.install_forward_cache, whose prefill rounds differently in float32)."""
    kw.setdefault("use_cache", False)
    with torch.no_grad():
        return model(x, **kw).logits


def lm_loss(model, x):
    return model(x, labels=x).loss


def teleport_in_plain_loop(model, opt, total: int, step: int):
    """A plain training loop of `total` steps on random tokens with HFTeleport (2 teleports from `step`); returns
    the callback, whose log says which teleports ran."""
    from symformer.integrations import hf

    model.train()
    data = torch.randint(0, 40, (total, 4, 13), generator=torch.Generator().manual_seed(0))
    tele = hf.HFTeleport(
        model, opt, lm_loss, total_steps=total, start_step=step, steps=2, samples=8, alpha=0.3, state_policy="transform"
    )
    for i in range(total):
        loss = lm_loss(model, data[i])
        loss.backward()
        tele.after_backward(i, data[i], loss)
        opt.step()
        opt.zero_grad()
    return tele


def patched(family, positional, dtype, **opts):
    from symformer.integrations import hf

    return hf.patch_positional(tiny(family, dtype), positional, **opts)


def check_gradient_action(model, norms: bool) -> None:
    """grad L(g theta) from autograd equals grad_action(g, grad L(theta)) (a generic element, heads permuted where the
    sites allow it); the inverse undoes g; closed-form candidate norms equal the brute-force ones (apply, backward,
    restore). norms: the sites' q/k-norm scalings are sampled (not all 1)."""
    from symformer.integrations import hf
    from symformer.teleport import GroupElement, brute_force_norms, closed_form_norms

    x = ids(n=8)
    group = hf.symmetry_group(model, ffn=True)
    params = group.parameters()
    orig = [p.detach().clone() for p in params]
    g0 = torch.autograd.grad(lm_loss(model, x), params)
    g = group.random(torch.Generator().manual_seed(3), scale=0.2)
    # never the identity (randperm(2) may be); MLA's two sites per layer share the heads: not permuted
    g.perm = [torch.arange(c.site.n_heads).flip(0) for c in group.part("perm")]
    pred = group.grad_action(g, {id(p): gr for p, gr in zip(params, g0, strict=True)})
    group.apply(model, g)
    g1 = torch.autograd.grad(lm_loss(model, x), params)
    err = max(
        ((pred[id(p)] - gr).abs().max() / gr.abs().max().clamp_min(1e-30)).item()
        for p, gr in zip(params, g1, strict=True)
    )
    assert err <= 1e-8
    group.apply(model, group.inverse(g))
    assert max(((p - o).abs().max() / o.abs().max()).item() for p, o in zip(params, orig, strict=True)) <= 1e-12
    model.zero_grad()
    lm_loss(model, x).backward()
    cands = group.sample(4, 0.3, torch.Generator().manual_seed(4), ffn=True)
    assert isinstance(cands, GroupElement)
    if norms:
        assert not torch.equal(cands.norm[0], torch.ones_like(cands.norm[0]))
    closed = closed_form_norms(model, group, cands)
    brute = brute_force_norms(model, group, cands, lambda: lm_loss(model, x))
    assert torch.allclose(closed, brute, rtol=1e-9, atol=0)
