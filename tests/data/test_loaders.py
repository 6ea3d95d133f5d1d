import pytest
import torch

from symformer.data import load_char_text, load_digits_patches, load_ett, load_mnist1d
from symformer.data.base import batches
from symformer.data.ett import ett_borders
from symformer.data.paths import ENV_VAR, MissingDataError, data_file


def _rows(t):
    return {tuple(r.flatten().tolist()) for r in t}


def test_digits_shapes_split_and_disjoint():
    s = load_digits_patches(patch=2)
    assert s.train.x.shape[1:] == (16, 4) and s.train.pos.shape == (16, 2)
    assert len(s.train) + len(s.val) + len(s.test) == 1797
    assert (len(s.train), len(s.val), len(s.test)) == (1078, 359, 360)
    # positions are the (row, col) of each 2x2 patch on the 4x4 grid
    assert s.train.pos[5].tolist() == [1.0, 1.0]
    # the splits are disjoint sets of samples (digits has a few exact duplicate images, so compare indices)
    from symformer.data.digits import load_digits_images

    _, _, idx = load_digits_images()
    a, b, c = (set(idx[k].tolist()) for k in ("train", "val", "test"))
    assert not (a & b) and not (a & c) and not (b & c)


def test_mnist1d_shapes_and_disjoint():
    s = load_mnist1d(patch=4, num_samples=1000)
    assert s.train.x.shape[1:] == (10, 4) and s.train.pos.shape == (10, 1)
    assert len(s.train) + len(s.val) == 800 and len(s.test) == 200
    assert not (_rows(s.train.x) & _rows(s.val.x))
    assert not (_rows(s.train.x) & _rows(s.test.x))


def test_char_text_splits_contiguous(data_dir):
    s = load_char_text(block=32, data_dir=data_dir, max_chars=20000)
    a, b, n = s.meta["boundaries"]
    assert (a, b, n) == (18000, 19000, 20000)
    assert s.train.x.shape[1] == 32 and torch.equal(s.train.x[0, 1:], s.train.y[0, :-1])
    # windows never cross a split boundary: every train window ends before `a`
    assert len(s.train) * 32 + 1 <= a
    assert s.meta["vocab_size"] > 30


def test_ett_protocol_and_train_only_standardisation(data_dir):
    import numpy as np
    import pandas as pd

    s = load_ett(data_dir=data_dir, seq_len=96, label_len=48, pred_len=24)
    b1, b2 = ett_borders(96)
    assert b2 == [8640, 11520, 14400]
    raw = pd.read_csv(data_dir / "ETTh1.csv").iloc[:, 1:].to_numpy()
    np.testing.assert_allclose(s.meta["mean"], raw[:8640].mean(0))
    np.testing.assert_allclose(s.meta["std"], raw[:8640].std(0))
    assert not np.allclose(s.meta["mean"], raw.mean(0))  # not fitted on all rows
    assert s.train.x.shape[1:] == (96, 7) and s.train.y.shape[1:] == (72, 7)
    assert len(s.train) == 8640 - 96 - 24 + 1
    assert len(s.val) == 2880 + 96 - 96 - 24 + 1 and len(s.test) == len(s.val)
    # decoder label window overlaps the last label_len input steps exactly
    assert torch.equal(s.train.x[0, -48:], s.train.y[0, :48])
    # train targets stop before the validation period starts
    last_train_target_row = (len(s.train) - 1) + 96 + 24 - 1
    assert last_train_target_row < 8640


def test_missing_file_names_option_and_variable(tmp_path):
    with pytest.raises(MissingDataError, match=ENV_VAR) as e:
        data_file("ETTh1.csv", tmp_path)
    assert "--data-dir" in str(e.value) and "\n" not in str(e.value)


def test_batches_cover_epoch_and_shard_union():
    s = load_digits_patches()
    full = [y for _, y in batches(s.train, 64, seed=3, epoch=1, drop_last=True)]
    shards = [[y for _, y in batches(s.train, 64, seed=3, epoch=1, drop_last=True, rank=r, world=2)] for r in (0, 1)]
    for f, a, b in zip(full, *shards):
        assert torch.equal(f, torch.cat([a, b]))


def test_bad_arguments():
    with pytest.raises(ValueError, match="patch"):
        load_digits_patches(patch=0)
    with pytest.raises(TypeError, match="patch"):
        load_mnist1d(patch=2.5)
