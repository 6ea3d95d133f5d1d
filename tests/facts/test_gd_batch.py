"""facts.gd_batch: the stacked GD trainer equals train_mlp model by model (float64, both protocols, models that stop
early among ones that do not), and gd_capacity's threshold is verified and is the one train_mlp's builds give."""

from __future__ import annotations

import pytest
import torch

from symformer.facts import BuildOptions, baselines, build_fact_mlp, make_fact_set
from symformer.facts import gd_batch as gb
from symformer.facts.mlp import count_params, fact_accuracy

SETS = [make_fact_set(32, 8, seed=s) for s in range(2)]


def _sequential(fs, h, seed, **kw):
    mlp = baselines.train_mlp(fs.keys.double(), fs.values.double(), fs.facts, h, seed=seed, **kw)
    return mlp, fact_accuracy(mlp, fs.keys, fs.values, fs.facts)


@pytest.mark.parametrize(
    "protocol",
    [
        dict(activation="silu", bias=True, loss_cutoff=None),  # ours: stops at the first epoch with all stored
        dict(activation="linear", bias=False, loss_cutoff=0.05),  # theirs: stops after the loss reaches the cutoff
    ],
)
def test_stacked_models_equal_train_mlp_model_by_model(protocol):
    widths, seeds = [3, 16, 16], [0, 0, 1]
    sets = [SETS[s] for s in seeds]
    kw = dict(max_epochs=300, lr=1e-2, dtype=torch.float64, **protocol)
    got = gb.train_mlps(sets, widths, seeds=seeds, **kw)
    accs = []
    for mlp, fs, h, s in zip(got, sets, widths, seeds):
        ref, acc = _sequential(fs, h, s, **kw)
        assert mlp.h == h and mlp.accuracy == acc
        for a, b in zip(mlp.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
        accs.append(acc)
    assert min(accs) < 1.0 == max(accs)  # models that stopped early (the wide ones) beside ones that ran all epochs
    # a negative control: another seed's model is not within the tolerance
    other, _ = _sequential(SETS[0], 16, 1, **kw)
    assert not torch.allclose(got[1].up.weight, other.up.weight, rtol=1e-9, atol=1e-11)


def test_gd_capacity_verifies_the_threshold_and_matches_build_fact_mlp(tmp_path):
    opts = BuildOptions(train_epochs=200, train_lr=1e-2)
    r = gb.gd_capacity("gd-swiglu", SETS, 4, 64, opts, work_dir=tmp_path)
    assert r.size is not None and r.evaluations[r.size][0] == 1.0 and r.evaluations[r.size - 1][0] < 1.0
    for s, fs in enumerate(SETS):  # the threshold as method_capacity's own builds see it (float32: to rounding)
        at = build_fact_mlp(fs.keys, fs.values, fs.facts, "gd-swiglu", h=r.size, seed=s, strict=False, options=opts)
        assert at.accuracy == 1.0 and count_params(at) == r.params
    below = [
        build_fact_mlp(fs.keys, fs.values, fs.facts, "gd-swiglu", h=r.size - 1, seed=s, strict=False, options=opts)
        for s, fs in enumerate(SETS)
    ]
    assert min(m.accuracy for m in below) < 1.0


def test_gd_capacity_resumes_from_its_work_dir_without_training(tmp_path, monkeypatch):
    opts = BuildOptions(official_gd_epochs=50)
    first = gb.gd_capacity("gd-bilinear", SETS, 3, 8, opts, work_dir=tmp_path)
    monkeypatch.setattr(gb, "train_mlps", lambda *a, **k: pytest.fail("trained again"))
    again = gb.gd_capacity("gd-bilinear", SETS, 3, 8, opts, work_dir=tmp_path)
    assert (again.size, again.params, again.evaluations) == (first.size, first.params, first.evaluations)


def test_next_widths_brackets_then_closes_the_gap():
    assert gb._next_widths({}, 10, 4096, 4) == [5, 7, 10, 14, 20]
    assert gb._next_widths({5: (0.5, 1), 10: (0.9, 1)}, 10, 40, 4) == [20]  # none stores: double
    assert gb._next_widths({20: (0.9, 1)}, 10, 20, 4) == []  # none stores up to the cap
    assert gb._next_widths({7: (0.9, 1), 14: (1.0, 1)}, 10, 99, 4) == [8, 10, 11, 13]
    assert gb._next_widths({7: (0.9, 1), 8: (1.0, 1)}, 10, 99, 4) == []  # verified: 8 stores, 7 does not
    assert gb._next_widths({3: (1.0, 1)}, 10, 99, 4) == [1, 2]  # the smallest tried stores: look below it


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="widths"):
        gb.train_mlps(SETS, [2])
    with pytest.raises(ValueError, match="activation"):
        gb.train_mlps(SETS[:1], [2], activation="relu")
    with pytest.raises(ValueError, match="method"):
        gb.gd_capacity("gd-relu", SETS, 4, 8)
    with pytest.raises(ValueError, match="guess"):
        gb.gd_capacity("gd-swiglu", SETS, 0, 8)


def _grads_dying_in_epoch(monkeypatch, epoch: int) -> dict:
    """gb._grads counting its calls, raising KeyboardInterrupt (a kill) in the given epoch (0-based) of a
    training; returns the counter."""
    real, calls = gb._grads, {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == epoch + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(gb, "_grads", dying)
    return calls


@pytest.mark.parametrize("protocol", [dict(activation="silu", bias=True), dict(activation="linear", bias=False)])
def test_train_mlps_killed_and_resumed_from_its_checkpoint_is_exact(tmp_path, monkeypatch, protocol):
    """Killed in epoch 256 (after models have left the batch at epoch 200), resumed from epoch 250's save: the
    same bits as the uninterrupted training, and only the epochs after the save run again."""
    widths, seeds = [3, 16, 16], [0, 0, 1]
    sets = [SETS[s] for s in seeds]
    kw = dict(seeds=seeds, max_epochs=400, lr=1e-2, **protocol)
    plain = gb.train_mlps(sets, widths, **kw)
    calls = _grads_dying_in_epoch(monkeypatch, 256)
    ck = tmp_path / "round.pt"
    with pytest.raises(KeyboardInterrupt):
        gb.train_mlps(sets, widths, checkpoint=ck, checkpoint_every=50, **kw)
    calls["n"] = 0
    resumed = gb.train_mlps(sets, widths, checkpoint=ck, checkpoint_every=50, **kw)
    assert calls["n"] == 400 - 250
    for a, b in zip(plain, resumed):
        assert a.accuracy == b.accuracy
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            assert torch.equal(x, y), name


def test_train_mlps_rejects_a_checkpoint_of_other_models(tmp_path):
    from symformer.data.files import DataFileError

    ck = tmp_path / "round.pt"
    gb.train_mlps(SETS, [3, 4], max_epochs=120, checkpoint=ck, checkpoint_every=100)
    with pytest.raises(DataFileError, match="round.pt is not a batched GD training checkpoint of these 3 models"):
        gb.train_mlps([*SETS, SETS[0]], [3, 4, 4], max_epochs=120, checkpoint=ck)
    other = "is a batched GD training checkpoint of other fact sets or settings"
    for kw in (dict(lr=2e-3), dict(max_epochs=121), dict(seeds=[0, 1]), dict(activation="linear")):
        with pytest.raises(DataFileError, match=other):
            gb.train_mlps(SETS, [3, 4], **{"max_epochs": 120, "checkpoint": ck, **kw})
    with pytest.raises(DataFileError, match=other):
        gb.train_mlps(SETS[::-1], [3, 4], max_epochs=120, checkpoint=ck)
    gb.train_mlps(SETS, [3, 4], max_epochs=120, checkpoint=ck)  # the same arguments: it goes on
    ck.write_bytes(b"junk")
    with pytest.raises(DataFileError, match="round.pt is not a batched GD training checkpoint"):
        gb.train_mlps(SETS, [3, 4], max_epochs=120, checkpoint=ck)


def test_gd_capacity_resumes_a_round_killed_midway(tmp_path, monkeypatch):
    """A round killed midway goes on from its checkpoint in work_dir (not from epoch 0) and gives the uninterrupted
    search's result; once the round is remembered its checkpoint is gone."""
    opts = BuildOptions(official_gd_epochs=1200)
    plain = gb.gd_capacity("gd-bilinear", SETS, 3, 8, opts)
    real = gb._grads
    _grads_dying_in_epoch(monkeypatch, 700)
    with pytest.raises(KeyboardInterrupt):
        gb.gd_capacity("gd-bilinear", SETS, 3, 8, opts, work_dir=tmp_path)
    assert len(list(tmp_path.glob("*_round_*.pt"))) == 1
    monkeypatch.setattr(gb, "_grads", real)
    again = gb.gd_capacity("gd-bilinear", SETS, 3, 8, opts, work_dir=tmp_path)
    assert (again.size, again.params, again.evaluations) == (plain.size, plain.params, plain.evaluations)
    assert not list(tmp_path.glob("*.pt"))
