"""ETT (Informer protocol): 12/4/4-month train/val/test, standardisation fitted on train only,
windows of input `seq_len`, decoder label `label_len` and horizon `pred_len`."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np
import torch

from symformer._validation import check_int, fail
from symformer.data.base import Split, TensorData
from symformer.data.files import need_rows, read_table
from symformer.data.paths import data_file

if TYPE_CHECKING:  # pandas is read only when a file is (data.files): `import symformer` does not load it
    import pandas as pd

HOURS_PER_MONTH = 30 * 24  # the Informer protocol's month
ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")  # after `date`, in every ETT file
#: rows per protocol month by sampling interval: ETTh* hourly (Dataset_ETT_hour), ETTm* every 15 minutes
#: (Dataset_ETT_minute: borders 12*30*24*4, ...)
ROWS_PER_MONTH = {timedelta(hours=1): HOURS_PER_MONTH, timedelta(minutes=15): 4 * HOURS_PER_MONTH}


def time_features(t: pd.Series) -> np.ndarray:
    """Informer's timeF encoding for freq 'h' (utils/timefeatures.py), each in [-0.5, 0.5]: hour of day,
    day of week, day of month, day of year. Informer's ETTm scripts keep freq 'h', so ETTm uses it too."""
    return np.stack(
        [
            t.dt.hour / 23.0 - 0.5,
            t.dt.day_of_week / 6.0 - 0.5,
            (t.dt.day - 1) / 30.0 - 0.5,
            (t.dt.day_of_year - 1) / 365.0 - 0.5,
        ],
        axis=1,
    )


def rows_per_month(filename: str, t: pd.Series) -> int:
    """The protocol month in rows, from the sampling interval of the first two timestamps."""
    if len(t) < 2:  # too short to tell: the length check then names the rows the borders need
        return HOURS_PER_MONTH
    step = t.iloc[1] - t.iloc[0]
    if step not in ROWS_PER_MONTH:
        fail(
            "filename",
            f"{filename} sampled every {step}",
            "an ETT file sampled hourly (ETTh*) or every 15 minutes (ETTm*)",
        )
    return ROWS_PER_MONTH[step]


def ett_borders(seq_len: int, unit: int = HOURS_PER_MONTH) -> tuple[list[int], list[int]]:
    """Start/end rows of train/val/test; val and test start seq_len early so their first window
    has a full input, exactly as Informer's Dataset_ETT_hour."""
    b1 = [0, 12 * unit - seq_len, 16 * unit - seq_len]
    b2 = [12 * unit, 16 * unit, 20 * unit]
    return b1, b2


def _windows(arr: torch.Tensor, stamps: torch.Tensor, seq_len: int, label_len: int, pred_len: int) -> TensorData:
    n = arr.shape[0] - seq_len - pred_len + 1
    s = torch.arange(n)
    xi = s[:, None] + torch.arange(seq_len)[None]
    yi = s[:, None] + seq_len - label_len + torch.arange(label_len + pred_len)[None]
    # x: encoder input; y: decoder label window (label_len known steps + pred_len targets)
    data = TensorData(arr[xi], arr[yi], torch.arange(seq_len, dtype=torch.float32)[:, None])
    data.x_time = stamps[xi]  # type: ignore[attr-defined]
    data.y_time = stamps[yi]  # type: ignore[attr-defined]
    return data


def _check_lengths(path, n_rows: int, b1: list[int], b2: list[int], seq_len: int, pred_len: int) -> None:
    """Every split must hold one full window and the file every row up to the last border."""
    for name, a, b in zip(("train", "val", "test"), b1, b2):
        if b - a < seq_len + pred_len:
            raise ValueError(
                f"seq_len + pred_len: got {seq_len} + {pred_len} = {seq_len + pred_len}, expected at most "
                f"the {b - a} rows of the {name} split (rows {a}..{b})"
            )
    need_rows(path, n_rows, b2[-1], f"the Informer train/val/test borders end at row {b2[-1]}")


def load_ett(
    filename: str = "ETTh1.csv",
    seq_len: int = 96,
    label_len: int = 48,
    pred_len: int = 24,
    data_dir=None,
    unit: int | None = None,
) -> Split:
    """unit: rows per protocol month (None: inferred from the timestamps, 720 hourly, 2880 every 15 min)."""
    check_int("seq_len", seq_len, 1)
    check_int("label_len", label_len, 0, seq_len)
    check_int("pred_len", pred_len, 1)
    path = data_file(filename, data_dir)
    df = read_table(path, ETT_COLUMNS, date_column="date")  # one line per defect: column and first bad row
    values = df[list(ETT_COLUMNS)].to_numpy(dtype=np.float64)
    t = df["date"]
    unit = rows_per_month(str(filename), t) if unit is None else check_int("unit", unit, 1)
    b1, b2 = ett_borders(seq_len, unit)
    _check_lengths(path, len(df), b1, b2, seq_len, pred_len)
    train_raw = values[b1[0] : b2[0]]
    mean, std = train_raw.mean(0), train_raw.std(0)  # fitted on train only
    std = np.where(std > 0, std, 1.0)
    scaled = torch.tensor((values - mean) / std, dtype=torch.float32)
    stamps = torch.tensor(time_features(t), dtype=torch.float32)
    parts = [_windows(scaled[a:b], stamps[a:b], seq_len, label_len, pred_len) for a, b in zip(b1, b2)]
    return Split(
        *parts,
        {
            "n_vars": values.shape[1],
            "columns": list(ETT_COLUMNS),
            "mean": mean,
            "std": std,
            "borders": (b1, b2),
            "seq_len": seq_len,
            "label_len": label_len,
            "pred_len": pred_len,
            "coord_dim": 1,
            "unit": unit,
            "filename": str(filename),
        },
    )
