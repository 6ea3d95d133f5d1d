"""Reading user data files with one clear line per defect: CSV tables, UTF-8 text, .npy/.pt arrays.

Every error is a `DataFileError` (a ValueError) whose message names the file, what is wrong there (column,
first bad row, byte offset) and what is expected; the CLI prints it as one line. Nothing is unpickled:
`np.load(allow_pickle=False)` and `torch.load(weights_only=True)` only."""

from __future__ import annotations

import io
import pickle
import re
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch


class DataFileError(ValueError):
    """A data file with a defect; the message is one line naming the file."""


def read_text(path: str | Path, what: str = "text") -> str:
    """The file as UTF-8 text; empty files and bytes that are not UTF-8 are errors naming the offset."""
    path = Path(path)
    raw = path.read_bytes()
    if not raw.strip():
        raise DataFileError(f"{path} is empty; expected {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(
            f"{path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            f"expected {what} encoded as UTF-8"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as Path.read_text


def read_table(path: str | Path, columns: Sequence[str], date_column: str | None = None):
    """A CSV as a DataFrame with the named `columns` (numbers, finite) and an optional date column.
    Missing columns, a cell that is not a number, NaN/inf or an unparsable date: one line naming the
    file, the column and the first bad row (row 1 = the first line after the header)."""
    import pandas as pd

    path = Path(path)
    text = read_text(path, "a CSV table with a header row")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        first = str(e).strip().splitlines()[0]
        raise DataFileError(f"{path} is not a valid CSV table ({first})") from None
    need = ([date_column] if date_column else []) + list(columns)
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise DataFileError(
            f"{path}: missing columns {', '.join(missing)}; got {', '.join(map(str, df.columns))}, "
            f"expected {', '.join(need)}"
        )
    out = pd.DataFrame(index=df.index)
    if date_column:
        stamps = pd.to_datetime(df[date_column], errors="coerce")
        _first_bad(path, date_column, df[date_column], stamps.isna().to_numpy(), "a date")
        out[date_column] = stamps
    for c in columns:
        vals = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64)
        _first_bad(path, c, df[c], ~np.isfinite(vals), "a finite number")
        out[c] = vals
    return out


def _first_bad(path: Path, column: str, raw, bad: np.ndarray, expected: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        cell = raw.iloc[i]
        got = "an empty cell" if cell.strip() == "" else repr(cell)
        raise DataFileError(f"{path}: column {column}, row {i + 1} (line {i + 2}): got {got}, expected {expected}")


def need_rows(path: str | Path, have: int, need: int, why: str, unit: str = "rows") -> None:
    if have < need:
        unit_n = unit[:-1] if have == 1 and unit.endswith("s") else unit
        raise DataFileError(f"{path} has {have} {unit_n}; expected at least {need} ({why})")


# ---------------------------------------------------------------- arrays (.npy, .pt)
def torch_load(path: str | Path, what: str) -> Any:
    """torch.load(weights_only=True) with one-line errors: a file that would need to run code, a truncated
    or foreign file, an empty file."""
    path = Path(path)
    if path.stat().st_size == 0:
        raise DataFileError(f"{path} is not {what} (the file is empty)")
    try:
        with warnings.catch_warnings():
            # torch warns (two lines on stderr) whenever a pickle's protocol is not 2, before the weights-only
            # unpickler refuses or reads it; a bare pickle.dumps file gets it. Either way the outcome is told:
            # the data, or the one line below. Only this warning, only for this load.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        zipfile.BadZipFile,
        UnicodeDecodeError,
        KeyError,
        IndexError,
        OSError,
        struct.error,  # a file starting with a pickle GET opcode and too short for its operand, e.g. b"junk"
    ) as e:
        raise DataFileError(f"{path} is not {what} ({_torch_reason(e)})") from None


def _torch_reason(e: BaseException) -> str:
    """One short clause from torch's multi-paragraph load errors."""
    text = str(e)
    # torch >= 2.4 says "Unsupported global: GLOBAL io.open", torch 2.3 "Unsupported class io.open"
    m = re.search(r"Unsupported (?:global: GLOBAL|class) ([\w.]+)", text)
    if m:
        return f"loading it would import and call {m.group(1)}; symformer never runs code from a file"
    m = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
    if m:
        detail = m.group(1).strip().rstrip(".")
        if detail.startswith("Unsupported operand"):
            return f"not a torch file: its bytes are not a torch pickle ({detail})"
        return f"it holds objects other than tensors and plain containers ({detail})"
    first = (text.strip().splitlines() or [type(e).__name__])[0].split(". ")[0].rstrip(".")
    if (
        isinstance(e, (EOFError, OSError, zipfile.BadZipFile, struct.error))
        or "zip archive" in first
        or "central directory" in first
    ):
        return f"truncated or not a torch file: {first}"
    return f"{type(e).__name__}: {first}"


def load_array(path: str | Path, name: str) -> torch.Tensor:
    """A numeric tensor from .npy (never unpickled) or .pt (weights_only); `name` is the option or argument."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{name}: got {str(path)!r}, expected an existing .pt or .npy file")
    if path.suffix == ".npy":
        return torch.from_numpy(_load_npy(path, name))
    if path.suffix != ".pt":
        raise DataFileError(f"{name}: got {str(path)!r}, expected a file ending in .pt or .npy")
    try:
        x = torch_load(path, "a tensor file")
    except DataFileError as e:
        raise DataFileError(f"{name}: {e}") from None
    if not isinstance(x, torch.Tensor):
        raise DataFileError(f"{name}: {path} holds a {type(x).__name__}, expected a single tensor")
    return x


def _load_npy(path: Path, name: str) -> np.ndarray:
    if path.stat().st_size == 0:
        raise DataFileError(f"{name}: {path} is empty; expected a .npy array")
    try:
        a = np.load(path, allow_pickle=False)
    except ValueError as e:
        msg = str(e)
        if "Object arrays" in msg:
            raise DataFileError(
                f"{name}: {path} holds an object array (dtype object); expected a numeric array "
                "(object arrays are never unpickled)"
            ) from None
        if "pickled" in msg:
            raise DataFileError(
                f"{name}: {path} holds pickled Python objects, not a .npy array (pickles are never loaded)"
            ) from None
        raise DataFileError(f"{name}: {path} is not a readable .npy array ({msg.splitlines()[0]})") from None
    except (EOFError, OSError) as e:
        raise DataFileError(f"{name}: {path} is not a readable .npy array (truncated: {e})") from None
    if not isinstance(a, np.ndarray):
        raise DataFileError(f"{name}: {path} is an .npz archive; expected a single .npy array")
    if a.dtype.kind not in "biuf":
        raise DataFileError(f"{name}: {path} holds dtype {a.dtype}; expected a numeric (integer or float) array")
    return a
