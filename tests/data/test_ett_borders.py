"""ETT borders by sampling interval (Informer's Dataset_ETT_hour / Dataset_ETT_minute) and timeF features."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from symformer.data import load_ett
from symformer.data.ett import ETT_COLUMNS, time_features


def _csv(path, n, freq):
    t = pd.date_range("2016-07-01", periods=n, freq=freq)
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(n, len(ETT_COLUMNS))), columns=list(ETT_COLUMNS))  # every ETT file's columns
    df.insert(0, "date", t.strftime("%Y-%m-%d %H:%M:%S"))
    df.to_csv(path, index=False)


def test_ettm_borders_are_four_times_the_hourly_ones(tmp_path):
    _csv(tmp_path / "ETTm9.csv", 20 * 30 * 24 * 4, "15min")
    s = load_ett("ETTm9.csv", seq_len=96, label_len=48, pred_len=24, data_dir=tmp_path)
    unit = 30 * 24 * 4
    assert s.meta["unit"] == unit
    assert s.meta["borders"] == ([0, 12 * unit - 96, 16 * unit - 96], [12 * unit, 16 * unit, 20 * unit])
    assert len(s.train) == 12 * unit - 96 - 24 + 1 and len(s.test) == 4 * unit - 24 + 1


def test_other_sampling_interval_is_an_error(tmp_path):
    _csv(tmp_path / "ETTx.csv", 20 * 30 * 48, "30min")
    with pytest.raises(ValueError, match="ETTx.csv"):
        load_ett("ETTx.csv", data_dir=tmp_path)


def test_timef_matches_informer_definitions():
    t = pd.Series(pd.to_datetime(["2016-01-01 00:00", "2016-12-31 23:00"]))
    f = time_features(t)
    # hour/23, weekday/6, (day-1)/30, (dayofyear-1)/365, each minus 0.5 (Informer utils/timefeatures.py)
    assert np.allclose(f[0], [-0.5, 4 / 6 - 0.5, -0.5, -0.5])
    assert np.allclose(f[1], [0.5, 5 / 6 - 0.5, 30 / 30 - 0.5, 365 / 365 - 0.5])
