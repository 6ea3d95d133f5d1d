"""Book -> author LM with a fact expert and the editors applied to it (fact-storing-mlps.txt App. A.3)."""

import pytest
import torch

from symformer.facts.lm.books import TEMPLATES, generate_names, make_books
from symformer.facts.lm.books_lm import LMConfig, build_lm, lm_eval, mlp_for, swap_check, train_lm
from symformer.facts.lm.editing import (
    apply_editor,
    edit_caches,
    edit_scores,
    grid_configs,
    key_moment,
    make_split,
    mlp_io,
    prompts,
    run_editors,
    target_trajectory,
    target_values,
)


def test_names_are_deterministic_and_distinct():
    a = generate_names(200, "author", seed=3)
    assert a == generate_names(200, "author", seed=3) and len(set(a)) == 200
    assert a != generate_names(200, "author", seed=4)
    assert len(set(generate_names(200, "book", seed=3))) == 200


def test_books_sequences():
    t = make_books(10, seed=0)
    assert len(TEMPLATES) == 16 and sorted(t.facts.tolist()) == list(range(10))
    tok, mask, pos = t.sequences(torch.tensor([2, 5]), torch.tensor([0, 1]))
    row = tok[0][mask[0]].tolist()
    assert row[0] == 0 and row[-1] == t.author_token(int(t.facts[2]))
    words = [t.words[i] for i in row[1:] if i < t.n_words]
    assert " ".join(words) == "The author of is"
    assert int(tok[1, pos[1] + 1]) == t.author_token(int(t.facts[5]))


def test_split_alters_only_the_altered_facts():
    t = make_books(50, seed=0)
    s = make_split(t, 0.2, seed=1)
    assert len(s.altered) == 10 and len(s.preserved) == 40
    assert bool((s.new_facts[s.altered] != t.facts[s.altered]).all())
    assert torch.equal(s.new_facts[s.preserved], t.facts[s.preserved])
    assert sorted(s.new_facts.tolist()) == list(range(50))  # still one book per author


@pytest.fixture(scope="module")
def tiny_lm():
    t = make_books(24, seed=0)
    cfg = LMConfig(d_model=32, mlp_hidden=64, mlp_steps=600, steps=80, batch_size=64, lr=3e-3)
    model, E = build_lm(t, cfg)
    train_lm(model, t, cfg)
    return t, cfg, model, E


def _edit_inputs(t, model, fraction: float, ridge: float):
    """A split at `fraction` altered, the altered facts' edit prompts, their MLP keys, targets v* (10 steps,
    lr 0.5) and the preserved facts' key moment C + ridge I."""
    split = make_split(t, fraction, seed=0)
    tok, mask = prompts(t, split.altered)
    keys, _ = mlp_io(model, tok, mask)
    v = target_values(model, tok, mask, t.author_token(split.new_facts[split.altered]), 10, 0.5)
    C = key_moment(model, t, split.preserved) + ridge * torch.eye(keys.shape[1], dtype=torch.float64)
    return split, tok, mask, keys, v, C


def test_rome_and_memit_write_the_targets_into_the_mlp(tiny_lm):
    """Exact answers inside the model: after ROME (one fact) or MEMIT with lam = 0 (n <= h keys), the fact
    MLP maps each edited key to its target v* (float32 weights: 1e-4 relative)."""
    t, cfg, model, _ = tiny_lm
    split, tok, mask, keys, v, C = _edit_inputs(t, model, 0.15, 1e-6)
    for method, hp, n in (("rome", {}, 1), ("memit", {"lam": 0.0}, len(keys))):
        mlp = apply_editor(model.fact.mlp, method, keys[:n], v[:n], C, hp)
        out = mlp.down(keys[:n].float()).double()
        assert torch.allclose(out, v[:n], rtol=0, atol=1e-4 * float(v.abs().max())), method
    assert model.fact.mlp.down.weight.data_ptr() != mlp.down.weight.data_ptr()  # the model's MLP is untouched


def test_editing_pipeline_scores(tiny_lm):
    t, cfg, model, E = tiny_lm
    split = make_split(t, 0.2, seed=0)
    new_mlp = mlp_for(t.with_facts(split.new_facts), E, cfg, seed=2)
    small = {
        "rome": [{"train_steps": 10, "lr": 0.5, "wd": 0.0, "early_stopping_loss": None}],
        "memit": [{"train_steps": 10, "lr": 0.5, "lam": lam, "clip_norm": 1.0} for lam in (1.0, 150.0)],
        "alphaedit": [{"train_steps": 10, "lr": 0.5, "clip_norm": None, "tol": 1.0}],
    }
    res = run_editors(model, t, split, new_mlp, configs=small)
    assert set(res) == {"swap", "rome", "memit", "alphaedit"}
    for r in res.values():
        assert 0.0 <= r["score"] <= 1.0
        assert r["score"] <= min(r["efficacy"], r["paraphrase"], r["specificity"]) * 3 + 1e-12
    assert res["memit"]["n_configs"] == 2 and len(grid_configs("memit", True)) == 12
    assert len(grid_configs("memit", False)) == 108 and len(grid_configs("rome", False)) == 54
    before = edit_scores(model, t, split)  # unedited model: efficacy on the new facts is ~0
    assert before["efficacy"] <= 0.25
    sw = swap_check(model, t, E, cfg)
    assert 0.0 <= sw["new_fact_accuracy"] <= 1.0 and sw["nonfact_ce_before"] > 0
    assert lm_eval(model, t)["fact_accuracy"] == sw["train_fact_accuracy"]
    parts = sw["nonfact_ce_parts"]
    assert 0.0 <= sw["nonfact_fact_gate"] <= 1.0 and set(parts) == {"before_key", "from_key"}
    ev = lm_eval(model, t)
    n_before, n_from = _nonfact_counts(t)  # the split is a partition of the non-fact targets
    mixed = (n_before * ev["nonfact_ce_before_key"] + n_from * ev["nonfact_ce_from_key"]) / (n_before + n_from)
    assert mixed == pytest.approx(ev["nonfact_ce"], rel=1e-6)  # float32 sums in another order


def _nonfact_counts(t):
    tok, mask, _ = t.sequences(*t.all_sequences())
    tgt, valid = tok[:, 1:], mask[:, 1:] & mask[:, :-1]
    nonfact = valid & (tgt < t.n_words)
    seen = torch.cumsum((tok[:, :-1] >= t.n_words).long(), 1) > 0
    return int((nonfact & ~seen).sum()), int((nonfact & seen).sum())


def test_moe_experts_share_the_frozen_norm_input_and_top1_routes_one_expert():
    """App. A.3.2 reading: the MoE sits where the MLP was, behind the frozen pre-MLP norm, so with moe_norm the
    mixer is invariant to the scale of its input (all three parts see x/|x|); without it, it is not. Top-1
    routing leaves exactly one expert's output at each position."""
    from symformer.facts.lm.model import FactRecallConfig, FactRecallTransformer
    from symformer.facts.slot import swap_fact_mlp

    t = make_books(8, seed=0)
    E = torch.randn(t.vocab_size, 16, generator=torch.Generator().manual_seed(0))
    cfg_mlp = LMConfig(d_model=16, mlp_hidden=16, mlp_steps=5)
    h = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    for norm in (True, False):
        torch.manual_seed(0)
        m = FactRecallTransformer(FactRecallConfig(t.vocab_size, 16, qk_mlp=True, moe=True, moe_norm=norm), E)
        swap_fact_mlp(m, mlp_for(t, E, cfg_mlp))
        with torch.no_grad():
            same = torch.allclose(m.mixer(3.0 * h), m.mixer(h), atol=1e-5)
        assert same == norm
    torch.manual_seed(0)
    m = FactRecallTransformer(FactRecallConfig(t.vocab_size, 16, qk_mlp=True, moe=True, router_top1=True), E)
    swap_fact_mlp(m, mlp_for(t, E, cfg_mlp))
    with torch.no_grad():
        hn, gate = m.routed(h)
        assert bool(((gate > 0).sum(-1) == 1).all())
        soft = torch.softmax(m.router(hn), -1)
        assert torch.allclose(gate.sum(-1), soft.max(-1).values)


def test_split_preserves_four_times_the_altered_facts():
    """App. A.3.4 splits (6554, 1638), (3277, 819), (1311, 327) of 2^14 facts: preserved = 4 x altered, the rest
    in neither set (unchanged, unscored)."""
    t = make_books(100, seed=0)
    s = make_split(t, 0.1, seed=1)
    assert len(s.altered) == 10 and len(s.preserved) == 40
    assert not set(s.altered.tolist()) & set(s.preserved.tolist())
    rest = sorted(set(range(100)) - set(s.altered.tolist()) - set(s.preserved.tolist()))
    assert len(rest) == 50 and torch.equal(s.new_facts[rest], t.facts[rest])
    full = make_split(t, 0.1, seed=1, preserved_ratio=9.0)  # every other fact preserved
    assert len(full.preserved) == 90 and torch.equal(full.altered, s.altered)
    with pytest.raises(ValueError, match="preserved_ratio"):
        make_split(t, 0.3, seed=1)  # 30 + 120 > 100 facts


def test_target_values_run_per_fact_like_rome_compute_v(tiny_lm):
    """ROME's compute_v / MEMIT's compute_z optimise one fact at a time: a batch gives each fact the v* it gets
    alone (weight decay and early stopping per fact); train_steps = s makes s - 1 updates (the last iteration
    only evaluates the loss), so s = 1 leaves the MLP output; shorter runs are prefixes of longer ones."""
    t, cfg, model, _ = tiny_lm
    split = make_split(t, 0.2, seed=0)
    tok, mask = prompts(t, split.altered)
    tgt = t.author_token(split.new_facts[split.altered])
    _, out = mlp_io(model, tok, mask)
    assert torch.equal(target_values(model, tok, mask, tgt, 1, 0.5), out)
    hp = dict(lr=0.05, clip_norm=0.75, wd=0.5, early_stopping_loss=0.5)
    batch = target_values(model, tok, mask, tgt, 25, **hp)
    for i in range(len(tgt)):
        alone = target_values(model, tok[i : i + 1], mask[i : i + 1], tgt[i : i + 1], 25, **hp)
        assert torch.allclose(batch[i : i + 1], alone, rtol=1e-5, atol=1e-5), i
    traj = target_trajectory(model, tok, mask, tgt, [3, 10, 25], **hp)
    assert torch.equal(traj[25], batch) and torch.equal(traj[10], target_values(model, tok, mask, tgt, 10, **hp))


def test_cached_scores_match_running_the_model(tiny_lm):
    """edit_scores through LastTokenCache equals lm_eval's fact accuracy with the MLP put in the slot, for the
    model's MLP, a swapped one and an edited one; ROME with C^-1 k precomputed equals solving per fact."""
    t, cfg, model, E = tiny_lm
    split, tok, mask, keys, v, C = _edit_inputs(t, model, 0.2, 1e-3)
    edited = apply_editor(model.fact.mlp, "memit", keys, v, C, {"lam": 1.0})
    swapped = mlp_for(t.with_facts(split.new_facts), E, cfg, seed=2)
    edited_t = t.with_facts(split.new_facts)
    nt = len(TEMPLATES)
    caches = edit_caches(model, t, split)
    for mlp in (model.fact.mlp, swapped, edited):
        got = edit_scores(model, t, split, mlp, caches)
        old = model.fact.swap(mlp)
        try:
            eff = lm_eval(model, edited_t, split.altered, torch.zeros_like(split.altered))["fact_accuracy"]
            para = lm_eval(
                model, edited_t, split.altered.repeat_interleave(nt - 1), torch.arange(1, nt).repeat(len(split.altered))
            )["fact_accuracy"]
            spec = lm_eval(
                model, edited_t, split.preserved.repeat_interleave(nt), torch.arange(nt).repeat(len(split.preserved))
            )["fact_accuracy"]
        finally:
            model.fact.swap(old)
        assert (got["efficacy"], got["paraphrase"], got["specificity"]) == (eff, para, spec)
    pre: dict = {}
    a = apply_editor(model.fact.mlp, "rome", keys, v, C, {}, pre)
    b = apply_editor(model.fact.mlp, "rome", keys, v, C, {})
    assert "rome_u" in pre and torch.allclose(a.down.weight, b.down.weight, rtol=1e-6, atol=1e-6)


def test_train_lm_killed_and_resumed_from_its_checkpoint_is_exact(tmp_path):
    t = make_books(12, seed=0)
    cfg = LMConfig(d_model=16, mlp_hidden=32, mlp_steps=50, steps=25, batch_size=16, lr=3e-3)
    plain, _ = build_lm(t, cfg)
    want = train_lm(plain, t, cfg)
    model, _ = build_lm(t, cfg)
    forward, calls = model.forward, {"n": 0}

    def dies_in_step_17(*a, **k):
        calls["n"] += 1
        if calls["n"] == 18:
            raise KeyboardInterrupt
        return forward(*a, **k)

    model.forward = dies_in_step_17
    ck = tmp_path / "lm.pt"
    with pytest.raises(KeyboardInterrupt):
        train_lm(model, t, cfg, checkpoint=ck, checkpoint_every=8)
    resumed, _ = build_lm(t, cfg)  # a fresh process rebuilds the seeded model, then loads step 16
    got = train_lm(resumed, t, cfg, checkpoint=ck, checkpoint_every=8)
    assert got["final_loss"] == want["final_loss"] and got["steps"] == 25
    for (name, a), b in zip(plain.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    again, _ = build_lm(t, cfg)  # the final checkpoint: a finished training is not repeated
    again.forward = None
    assert train_lm(again, t, cfg, checkpoint=ck)["final_loss"] == want["final_loss"]


def test_train_lm_rejects_a_checkpoint_for_fewer_steps(tmp_path):
    from symformer.train.checkpoint import CheckpointError

    t = make_books(12, seed=0)
    cfg = LMConfig(d_model=16, mlp_hidden=32, mlp_steps=50, steps=6, batch_size=16)
    model, _ = build_lm(t, cfg)
    ck = tmp_path / "lm.pt"
    train_lm(model, t, LMConfig(**{**cfg.__dict__, "steps": 9}), checkpoint=ck)
    with pytest.raises(CheckpointError, match="lm.pt is not a fact-LM training checkpoint for 6 steps"):
        train_lm(model, t, cfg, checkpoint=ck)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="junk.pt"):
        train_lm(model, t, cfg, checkpoint=tmp_path / "junk.pt")


def test_a_loop_checkpoint_missing_an_entry_is_one_line(tmp_path):
    from symformer.train.checkpoint import CheckpointError, load_loop_state

    path = tmp_path / "other.pt"
    torch.save({"model": {}, "step": 3}, path)
    with pytest.raises(CheckpointError, match="other.pt is not an SSFR training checkpoint .needs entries model, opt"):
        load_loop_state(path, "an SSFR training checkpoint", ("step", "acc", "loss"))
    assert load_loop_state(tmp_path / "absent.pt", "x", ()) is None and load_loop_state(None, "x", ()) is None
