"""SSFR task and the fact-recall transformer (fact-storing-mlps.txt Sec. 5.1, App. A.2)."""

import pytest
import torch

from symformer.facts import FactMLP, build_fact_mlp, swap_fact_mlp
from symformer.facts.lm import FactRecallConfig, FactRecallTransformer
from symformer.facts.lm.recall import (
    SSFRTrainConfig,
    build_recall_model,
    fact_adaptive_accuracy,
    ssfr_accuracy,
    train_ssfr,
)
from symformer.facts.lm.ssfr import make_ssfr
from symformer.models import TransformerConfig
from symformer.models.transformer import Encoder


def test_ssfr_sequences_follow_app_a21():
    t = make_ssfr(32, 16, seed=1)
    assert t.vocab_size == 32 + 32 + 16 and len(t.prefixes) == 16
    assert all(8 <= len(p) <= 16 for p in t.prefixes + t.suffixes)
    keys, pairs = t.all_pairs()
    tok, mask, tgt = t.batch(keys, pairs)
    assert len(keys) == 32 * 16
    for b in (0, 17, 300):
        seq = tok[b][mask[b]]
        p = int(pairs[b])
        expect = torch.cat([t.prefixes[p], torch.tensor([int(keys[b])]), t.suffixes[p]])
        assert torch.equal(seq, expect)
        assert bool(mask[b, -1]) and int(tgt[b]) == int(t.facts[keys[b]])
    junk = tok[mask & (tok >= 64)]
    assert junk.min() >= 64 and junk.max() < 80


def test_ssfr_kappa_conditions_key_and_value_blocks():
    t = make_ssfr(64, 16, kappa=100.0, seed=0, dtype=torch.float64)
    for block in (t.key_embeddings, t.value_embeddings):
        s = torch.linalg.svdvals(block)
        assert float(s[0] / s[-1]) == pytest.approx(100.0, rel=1e-9)


def test_fact_mlp_width_mismatch_names_both():
    t = make_ssfr(16, 8, seed=0)
    mlp = FactMLP(8, 4)
    cfg = FactRecallConfig(vocab_size=t.vocab_size, d_model=16)
    model = FactRecallTransformer(cfg, torch.randn(t.vocab_size, 16))
    with pytest.raises(ValueError, match=r"fact_mlp: got 'an MLP of width d=8', expected the model width d_model=16"):
        swap_fact_mlp(model, mlp)
    with pytest.raises(TypeError, match="fact_mlp"):
        swap_fact_mlp(model, torch.nn.Linear(16, 16))


def test_mlp_fact_composes_in_the_generic_encoder():
    enc = Encoder(TransformerConfig(d_model=8, n_heads=2, n_layers=2, mlp="fact"))
    t = make_ssfr(16, 8, seed=0)
    K, V = t.mlp_embeddings()
    mlp = build_fact_mlp(K, V, t.facts, "gd-swiglu", h=16, strict=False)
    assert len(swap_fact_mlp(enc, mlp)) == 2
    y = enc(torch.randn(2, 5, 8), torch.arange(5.0).view(5, 1))
    assert y.shape == (2, 5, 8)
    assert all(not p.requires_grad for p in mlp.parameters())


def test_switches_change_the_parameters():
    t = make_ssfr(16, 8, seed=0)
    paper = FactRecallTransformer(FactRecallConfig(t.vocab_size, 8), t.embeddings)
    vanilla = FactRecallTransformer(
        FactRecallConfig(t.vocab_size, 8, tied=False, residual=True, frozen_norm=False, identity_vo=False), t.embeddings
    )
    names = {n for n, p in paper.named_parameters() if p.requires_grad}
    assert not any(n.startswith(("v_proj", "o_proj", "mlp_norm", "unembed")) for n in names)
    vnames = {n for n, _ in vanilla.named_parameters()}
    assert {"v_proj.weight", "o_proj.weight", "mlp_norm.weight", "unembed.weight"} <= vnames


def test_padding_does_not_change_the_prediction():
    t = make_ssfr(16, 8, seed=0)
    K, V = t.mlp_embeddings()
    model = build_recall_model(t, build_fact_mlp(K, V, t.facts, "gd-swiglu", h=16, strict=False))
    tok, mask, _ = t.batch(torch.tensor([3]), torch.tensor([2]))
    short = model(tok[:, mask[0]], None, last_only=True)
    padded = model(
        torch.cat([torch.zeros(1, 4, dtype=torch.long), tok], 1),
        torch.cat([torch.zeros(1, 4, dtype=torch.bool), mask], 1),
        last_only=True,
    )
    assert torch.allclose(short, padded, atol=1e-5)
    assert torch.allclose(model(tok, mask)[:, -1], model(tok, mask, last_only=True), atol=1e-5)


def test_transformer_uses_a_swapped_gd_mlp():
    """Sec. 5.1 at a tiny size: trained with f, the model recalls f' once an MLP storing f' is swapped in."""
    torch.manual_seed(0)
    t = make_ssfr(32, 32, seed=0)
    K, V = t.mlp_embeddings()
    mlp = build_fact_mlp(K, V, t.facts, "gd-swiglu", h=32)
    f2 = torch.randperm(32, generator=torch.Generator().manual_seed(9))
    mlp2 = build_fact_mlp(K, V, f2, "gd-swiglu", h=32, seed=1)
    model = build_recall_model(t, mlp)
    before = ssfr_accuracy(model, t)
    train_ssfr(model, t, SSFRTrainConfig(steps=300, batch_size=64, lr=3e-3, eval_every=50))
    after = ssfr_accuracy(model, t)
    assert after > max(0.9, before + 0.3)
    assert fact_adaptive_accuracy(model, t.with_facts(f2), mlp2) > 0.9
    assert model.fact.mlp is mlp  # the swap check restores the model's own MLP


def test_lipschitz_estimate_matches_the_closed_form():
    """Eq. (8) on an MLP that is linear on the keys (ReLU of positive inputs): J = V W (I - x x^T/|x|^2) / |x|."""
    from symformer.facts.lm.recall import lipschitz_estimate

    g = torch.Generator().manual_seed(0)
    mlp = FactMLP(4, 4, activation="relu", gated=False)
    W = torch.randn(4, 4, generator=g, dtype=torch.float64)
    with torch.no_grad():
        mlp.up.weight.copy_(torch.eye(4, dtype=torch.float64))
        mlp.down.weight.copy_(W)
    keys = torch.rand(6, 4, generator=g, dtype=torch.float64) + 0.1
    V = torch.randn(5, 4, generator=g, dtype=torch.float64)
    ref = 0.0
    for x in keys:
        n = x.norm()
        J = V @ W @ (torch.eye(4, dtype=torch.float64) - torch.outer(x, x) / n**2) / n
        ref = max(ref, float(torch.linalg.svdvals(J)[0]))
    assert lipschitz_estimate(mlp, keys, V, n=100) == pytest.approx(ref, rel=1e-12)


def test_recall_model_trains_the_junk_rows_only():
    """App. A.2.2 freezes the key and value embeddings: only the junk rows of the table receive gradient."""
    t = make_ssfr(16, 16, seed=0)
    K, V = t.mlp_embeddings()
    mlp = build_fact_mlp(K, V, t.facts, "gd-swiglu", h=8, strict=False, options=None)
    for train_junk, expect in ((True, 1), (False, 0)):
        model = build_recall_model(t, mlp, train_junk=train_junk)
        tok, mask, tgt = t.batch(*t.all_pairs())
        torch.nn.functional.cross_entropy(model(tok, mask, last_only=True), tgt + t.n_keys).backward()
        moved = model.emb_delta.grad.abs().sum(1) > 0
        assert not moved[: 2 * 16].any()
        assert int(moved[2 * 16 :].all()) == expect


def test_minimal_gadget_width_makes_an_unusable_interpolant():
    """Why the SSFR search grows the gadget width h~ (experiments.fact_recall.search.ssfr_search): at h~ =
    ceil(F/d) the system M vec(A) = o is square and the construction's Lipschitz constant (eq. 8) explodes,
    while both MLPs store every fact."""
    from symformer.facts.capacity import BuildOptions
    from symformer.facts.decodability import decodability
    from symformer.facts.lm.recall import lipschitz_estimate

    torch.set_num_threads(1)
    t = make_ssfr(64, 32, seed=0)
    K, V = t.mlp_embeddings()
    info = decodability(V.double())
    lip = {}
    for ht in (2, 8):
        mlp = build_fact_mlp(K, V, t.facts, "bin+jl", m=32, info=info, options=BuildOptions(encoder_hidden=ht))
        assert mlp.h == 32 * ht and mlp.accuracy == 1.0
        lip[ht] = lipschitz_estimate(mlp, t.key_embeddings, t.value_embeddings, n=20)
    assert lip[2] > 10 * lip[8]


@pytest.mark.parametrize("bad, err", [(1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_encoder_hidden_below_the_gadget_minimum_is_refused(bad, err):
    """h~ < ceil(|K|/d) (Alg. 3) cannot store the facts: named, with the minimum, instead of a silent miss."""
    from symformer.facts import BuildOptions, build_fact_mlp
    from symformer.facts.embeddings import make_fact_set

    fs = make_fact_set(64, 16, seed=0)  # minimum gadget width ceil(64 / 16) = 4
    with pytest.raises(err, match="options.encoder_hidden"):
        build_fact_mlp(
            fs.keys, fs.values, fs.facts, "bin+jl", m=16, strict=False, options=BuildOptions(encoder_hidden=bad)
        )


def test_train_ssfr_killed_and_resumed_from_its_checkpoint_is_exact(tmp_path, monkeypatch):
    import symformer.facts.lm.recall as TR
    from symformer.facts.lm.recall import SSFRTrainConfig, build_recall_model, train_ssfr

    class Killed(Exception):
        pass

    task = make_ssfr(16, 16, seed=0)
    mlp = build_fact_mlp(*task.mlp_embeddings(), task.facts, "bin+jl", m=16, strict=False)
    cfg = SSFRTrainConfig(steps=10, batch_size=8, lr=1e-3, seed=1, stop_accuracy=1.1, eval_every=4)
    plain_model = build_recall_model(task, mlp, seed=0)
    plain = train_ssfr(plain_model, task, cfg)
    real, calls = TR.value_logits, {"n": 0}

    def dies_at_step_7(*a):
        calls["n"] += 1
        if calls["n"] == 7:  # steps 1-4, the evaluation at step 4, steps 5-6, then step 7
            raise Killed
        return real(*a)

    monkeypatch.setattr(TR, "value_logits", dies_at_step_7)
    ck = tmp_path / "ssfr.pt"
    with pytest.raises(Killed):
        train_ssfr(build_recall_model(task, mlp, seed=0), task, cfg, checkpoint=ck)
    model = build_recall_model(task, mlp, seed=0)
    got = train_ssfr(model, task, cfg, checkpoint=ck)
    assert calls["n"] == 7 + 6 + 2  # from the checkpoint after step 4: steps 5..10 and the evaluations at 8, 10
    assert got == plain
    for (name, a), b in zip(plain_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name


def test_ssfr_accuracy_batches_capped_by_the_mlp_width(monkeypatch):
    """ssfr_accuracy caps its batches at MAX_ACTIVATIONS hidden activations of the fact MLP: same accuracy."""
    import symformer.facts.mlp as mlp_mod

    t = make_ssfr(32, 32, seed=0)
    K, V = t.mlp_embeddings()
    model = build_recall_model(t, build_fact_mlp(K, V, t.facts, "gd-swiglu", h=32))
    train_ssfr(model, t, SSFRTrainConfig(steps=60, batch_size=64, lr=3e-3, eval_every=60))
    full = ssfr_accuracy(model, t)
    monkeypatch.setattr(mlp_mod, "MAX_ACTIVATIONS", 32 * 7)  # batches of 7 sequences
    assert ssfr_accuracy(model, t) == full and 0 < full


def _small_model(seed=0):
    t = make_ssfr(16, 16, seed=seed)
    K, V = t.mlp_embeddings()
    return t, K, V, build_recall_model(t, build_fact_mlp(K, V, t.facts, "gd-swiglu", h=16, strict=False), seed=seed)


def test_attention_weights_are_what_attend_averages():
    """attention_weights (B, N) sum to 1 over the allowed positions, are 0 on pads, and with identity V / O their
    mix of the embeddings is attend's output at the read-out position (float64)."""
    t, _, _, model = _small_model()
    model = model.double()
    with torch.no_grad():
        model.q_proj.weight.normal_(0, 1.0)  # away from the init, so the weights are not near uniform
        tok, mask, _ = t.batch(*[x[:40] for x in t.all_pairs()])
        w = model.attention_weights(tok, mask)
        x = torch.nn.functional.embedding(tok, model.embedding_table())
        y = model.attend(x, mask, True)[:, -1]
    assert torch.allclose(w.sum(-1), torch.ones(40, dtype=torch.float64), atol=1e-12)
    assert float(w[~mask].abs().max()) == 0.0
    assert float((torch.einsum("bn,bnd->bd", w, x) - y).abs().max()) <= 1e-12
    assert float(w.max()) > 2 * float(w[mask].min())


def test_swap_diagnostics_agree_with_the_accuracies_and_uniform_attention():
    """new_on_inputs is the fact-adaptive accuracy and own_on_inputs the model's own recall (same inputs, same
    read-out); with Q = 0 the attention is uniform over the allowed positions, so key_attention is the mean of
    1 / (valid length), an independent count."""
    from symformer.facts.lm.recall import swap_diagnostics

    t, K, V, model = _small_model()
    f2 = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    mlp2 = build_fact_mlp(K, V, f2, "gd-swiglu", h=16, seed=1, strict=False)
    train_ssfr(model, t, SSFRTrainConfig(steps=60, batch_size=64, lr=3e-3, eval_every=60))
    d = swap_diagnostics(model, t, t.with_facts(f2), mlp2)
    assert d["new_on_inputs"] == fact_adaptive_accuracy(model, t.with_facts(f2), mlp2)
    assert d["own_on_inputs"] == ssfr_accuracy(model, t)
    assert 0.0 < d["key_attention"] < 1.0 and -1.0 <= d["key_cosine"] <= 1.0
    assert 0.0 <= d["own_on_shuffled"] <= 1.0 and 0.0 <= d["new_on_shuffled"] <= 1.0
    with torch.no_grad():
        for p in model.q_proj.parameters():  # q = 0: every score 0
            p.zero_()
    _, mask, _ = t.batch(*t.all_pairs())
    want = float((1.0 / mask.sum(-1).double()).mean())
    assert abs(swap_diagnostics(model, t, t.with_facts(f2), mlp2)["key_attention"] - want) <= 1e-6
    with pytest.raises(ValueError, match="^model: got"):
        swap_diagnostics(
            FactRecallTransformer(FactRecallConfig(t.vocab_size, 16, residual=True), t.embeddings),
            t,
            t.with_facts(f2),
            mlp2,
        )
    with pytest.raises(TypeError, match="^task_new: got 'Tensor', expected an SSFRTask"):
        swap_diagnostics(model, t, f2, mlp2)
    with pytest.raises(TypeError, match="^model: got 'Linear'"):
        swap_diagnostics(torch.nn.Linear(2, 2), t, t.with_facts(f2), mlp2)
    with pytest.raises(ValueError, match="^task_new: got 'a task with 32 keys"):
        swap_diagnostics(model, t, make_ssfr(32, 16, seed=0), mlp2)
    with pytest.raises(ValueError, match="^mlp_new: got 'an MLP of width d=8', expected the model width d_model=16"):
        swap_diagnostics(model, t, t.with_facts(f2), FactMLP(8, 4))


@pytest.mark.parametrize("method", ["forward", "attention_weights", "fact_gate"])
def test_token_and_mask_inputs_are_checked_by_every_entry_point(method):
    """Out-of-vocabulary ids get a ValueError naming the range (not an IndexError from the embedding), and a mask
    of another shape or dtype is named (not broadcast)."""
    t, _, _, model = _small_model()
    if method == "fact_gate":
        with pytest.raises(ValueError, match=r"^model: got 'a model without an MoE \(moe=False\)'"):
            model.fact_gate(*t.batch(*t.all_pairs())[:2])
        model = FactRecallTransformer(FactRecallConfig(t.vocab_size, 16, moe=True), t.embeddings)
    call = getattr(model, method)
    tok, mask, _ = t.batch(*t.all_pairs())
    tok, mask = tok[:4], mask[:4]
    with pytest.raises(ValueError, match=rf"^tokens: got 'ids in \[0, {t.vocab_size}\]', expected ids in \[0, "):
        call(torch.where(mask, tok, t.vocab_size), mask)
    with pytest.raises(ValueError, match=r"^tokens: got 'shape \(4, \d+, 1\) dtype torch.int64'"):
        call(tok[..., None], None)
    with pytest.raises(ValueError, match=r"^tokens: got 'shape \(4, \d+\) dtype torch.float32'"):
        call(tok.float(), mask)
    with pytest.raises(TypeError, match="^tokens: got 'list'"):
        call(tok.tolist(), mask)
    with pytest.raises(ValueError, match=r"^mask: got 'shape \(4, \d+\) dtype torch.int64', expected None or a bool"):
        call(tok, mask.long())
    with pytest.raises(ValueError, match=r"^mask: got 'shape \(1, \d+\) dtype torch.bool'"):
        call(tok, mask[:1])
    assert call(tok, mask).shape[:2] == tok.shape
