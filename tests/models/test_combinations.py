"""Forward and backward of every registered combination of parts at tiny sizes."""

import itertools

import pytest
import torch

import symformer  # noqa: F401  (registers the parts)
from symformer.models import CausalLM, Forecaster, TransformerConfig, ViTClassifier
from symformer.registry import ATTENTION, MLP, POSITIONAL

COMBOS = list(itertools.product(POSITIONAL.names(), ATTENTION.names(), MLP.names()))


def _backward_ok(model, out):
    out.float().pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("positional,attention,mlp", COMBOS)
def test_vit_2d(positional, attention, mlp):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=1, positional=positional, attention=attention, mlp=mlp, coord_dim=2, max_len=8
    )
    m = ViTClassifier(cfg, token_dim=4, n_classes=3)
    if mlp == "fact":  # an empty fact slot refuses to run: fill it with a (frozen) fact MLP of the model width
        from symformer.facts import FactMLP, swap_fact_mlp

        swap_fact_mlp(m, FactMLP(16, 8, dtype=torch.float32))
    pos = torch.stack(torch.meshgrid(torch.arange(3.0), torch.arange(3.0), indexing="ij"), -1).reshape(9, 2)
    out = m(torch.randn(2, 9, 4), pos)
    assert out.shape == (2, 3)
    _backward_ok(m, out)


@pytest.mark.parametrize("positional,attention", list(itertools.product(POSITIONAL.names(), ATTENTION.names())))
def test_causal_lm(positional, attention):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=1, positional=positional, attention=attention, norm="rms", max_len=16
    )
    m = CausalLM(cfg, vocab_size=11)
    idx = torch.randint(0, 11, (2, 7))
    core = m.encoder.blocks[0].attn.core
    if not getattr(core, "supports_causal", True):
        with pytest.raises(ValueError, match="causal"):
            m(idx)
        return
    out = m(idx)
    assert out.shape == (2, 7, 11)
    _backward_ok(m, out)
    # causality: changing a later token never changes earlier logits
    idx2 = idx.clone()
    idx2[:, -1] = (idx2[:, -1] + 1) % 11
    with torch.no_grad():
        assert torch.allclose(m(idx)[:, :-1], m(idx2)[:, :-1], atol=1e-5)


@pytest.mark.parametrize("positional,attention", list(itertools.product(POSITIONAL.names(), ATTENTION.names())))
def test_forecaster(positional, attention):
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, n_layers=1, positional=positional, attention=attention, prenorm=False, max_len=64
    )
    m = Forecaster(cfg, n_vars=3, seq_len=12, label_len=6, pred_len=4)
    out = m(torch.randn(2, 12, 3), torch.randn(2, 12, 4), torch.randn(2, 10, 4))
    assert out.shape == (2, 4, 3)
    _backward_ok(m, out)


def test_config_rejects_bad_names():
    with pytest.raises(ValueError, match="positional"):
        TransformerConfig(positional="nope")
    with pytest.raises(ValueError, match="n_heads"):
        TransformerConfig(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="norm"):
        TransformerConfig(norm="batch")


def test_rope_pairing_exposed():
    cfg = TransformerConfig(d_model=16, n_heads=2, positional="rope", positional_kwargs={"pairing": "interleaved"})
    m = ViTClassifier(cfg, 4, 3)
    assert all(b.attn.rotary.pairing == "interleaved" for b in m.encoder.blocks)


def test_naive_matches_sdpa():
    from symformer.attention import NaiveAttention, SoftmaxAttention

    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        a = SoftmaxAttention()(q, k, v, is_causal=causal)
        b = NaiveAttention()(q, k, v, is_causal=causal)
        assert (a - b).abs().max() < 1e-12


@pytest.mark.parametrize("attention,buffer", [("favor", "features"), ("plash", "hash_0")])
def test_every_layer_draws_its_own_random_structure(attention, buffer):
    """Each layer's FAVOR+ features / PLASH hashes come from its own seed, drawn from the global generator: layers
    differ, the same torch.manual_seed rebuilds the same model, another seed another one; an explicit
    attention_kwargs seed is made each layer's own (_rng.layer_kwargs): layers differ, and the seed alone (not the
    global generator) fixes them."""

    def cores(run_seed, **kw):
        torch.manual_seed(run_seed)
        cfg = TransformerConfig(d_model=32, n_heads=2, n_layers=2, attention=attention, attention_kwargs=kw)
        return [getattr(b.attn.core, buffer) for b in CausalLM(cfg, vocab_size=11).encoder.blocks]

    a, b = cores(0), cores(0)
    assert not torch.equal(a[0], a[1]) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(cores(1)[0], a[0])
    fixed = cores(0, seed=5)
    assert not torch.equal(fixed[0], fixed[1])
    assert all(torch.equal(x, y) for x, y in zip(fixed, cores(1, seed=5), strict=True))
    assert not torch.equal(cores(0, seed=6)[0], fixed[0])
