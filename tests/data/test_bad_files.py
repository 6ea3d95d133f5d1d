"""Every data-file defect gets one line naming the file and what is wrong (ETT CSV, text, .npy/.pt)."""

import pickle

import numpy as np
import pytest
import torch

from symformer.data import load_char_text, load_ett
from symformer.data.files import DataFileError, load_array, read_table
from symformer.data.text import min_chars

HEADER = "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n"
ROW = "2016-07-01 00:00:00,5.827,2.009,1.599,0.462,4.203,1.340,30.531\n"


def _ett(tmp_path, text, name="ETTh1.csv"):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def _one_line(e, *parts):
    msg = str(e.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, (p, msg)
    return msg


def test_ett_too_few_rows_says_how_many(tmp_path):
    p = _ett(tmp_path, HEADER + ROW)
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path)
    _one_line(e, str(p), "has 1 row;", "at least 14400")
    # a small month unit: the borders need 20 units of rows
    _ett(tmp_path, HEADER + ROW * 50)
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path, seq_len=4, label_len=2, pred_len=2, unit=3)
    _one_line(e, "has 50 rows;", "at least 60")
    assert len(load_ett(data_dir=tmp_path, seq_len=4, label_len=2, pred_len=2, unit=2).train) == 24 - 6 + 1


def test_ett_lengths_longer_than_a_split(tmp_path):
    _ett(tmp_path, HEADER + ROW * 60)
    with pytest.raises(ValueError) as e:
        load_ett(data_dir=tmp_path, seq_len=8, label_len=2, pred_len=13, unit=3)
    _one_line(e, "seq_len + pred_len: got 8 + 13 = 21", "at most the 20 rows of the val split")


def test_ett_missing_columns(tmp_path):
    p = _ett(tmp_path, "date,HUFL,OT\n2016-07-01 00:00:00,1,2\n")
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path)
    _one_line(e, str(p), "missing columns HULL, MUFL, MULL, LUFL, LULL", "got date, HUFL, OT")


@pytest.mark.parametrize("cell, shown", [("abc", "'abc'"), ("NaN", "'NaN'"), ("", "an empty cell"), ("inf", "'inf'")])
def test_ett_bad_cell_names_file_column_row(tmp_path, cell, shown):
    bad = ROW.replace("1.599", cell)
    p = _ett(tmp_path, HEADER + ROW * 3 + bad + ROW)
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path)
    _one_line(e, str(p), "column MUFL, row 4 (line 5)", f"got {shown}", "expected a finite number")


def test_ett_bad_date(tmp_path):
    _ett(tmp_path, HEADER + ROW + ROW.replace("2016-07-01 00:00:00", "yesterday"))
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path)
    _one_line(e, "column date, row 2", "'yesterday'", "expected a date")


@pytest.mark.parametrize(
    "content, part",
    [
        ("", "is empty"),
        ("\n  \n", "is empty"),
        (b"date,HUFL\n\xff\xfe,1\n", "is not UTF-8 text (byte 0xff at offset 10)"),
        (HEADER + "1,2\n3,4,5,6,7,8,9,10,11,12\n", "is not a valid CSV table"),
    ],
)
def test_ett_empty_binary_or_ragged(tmp_path, content, part):
    p = _ett(tmp_path, content)
    with pytest.raises(DataFileError) as e:
        load_ett(data_dir=tmp_path)
    _one_line(e, str(p), part)


def test_read_table_good(tmp_path):
    p = _ett(tmp_path, HEADER + ROW * 2, "t.csv")
    df = read_table(p, ("HUFL", "OT"), date_column="date")
    assert df["OT"].tolist() == [30.531, 30.531] and str(df["date"].dtype).startswith("datetime64")


# ---------------------------------------------------------------- text corpora
def test_text_empty_non_utf8_and_short(tmp_path):
    p = tmp_path / "tinyshakespeare.txt"
    p.write_text("")
    with pytest.raises(DataFileError) as e:
        load_char_text(data_dir=tmp_path)
    _one_line(e, str(p), "is empty")
    p.write_bytes("First Citizen:\n".encode() + b"\xe9t\xe9")
    with pytest.raises(DataFileError) as e:
        load_char_text(data_dir=tmp_path)
    _one_line(e, str(p), "is not UTF-8 text (byte 0xe9 at offset 15)")
    p.write_text("abc" * 100)
    with pytest.raises(DataFileError) as e:
        load_char_text(block=64, data_dir=tmp_path)
    _one_line(e, "has 300 characters", f"at least {min_chars(64)}")


def test_text_min_chars_is_tight(tmp_path):
    p = tmp_path / "tinyshakespeare.txt"
    n = min_chars(8)
    p.write_text(("abcdefg\n" * n)[:n])
    s = load_char_text(block=8, data_dir=tmp_path)
    assert min(len(s.train), len(s.val), len(s.test)) == 1
    p.write_text(("abcdefg\n" * n)[: n - 1])
    with pytest.raises(DataFileError):
        load_char_text(block=8, data_dir=tmp_path)


# ---------------------------------------------------------------- arrays
class Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_npy_object_dtype_rejected_without_unpickling(tmp_path):
    marker = tmp_path / "PWNED"
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = Evil(marker), 1
    np.save(tmp_path / "obj.npy", arr, allow_pickle=True)
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "obj.npy", "--values")
    _one_line(e, "--values:", "holds an object array (dtype object)", "never unpickled")
    assert not marker.exists()


def test_pickle_named_npy_rejected(tmp_path):
    marker = tmp_path / "PWNED"
    (tmp_path / "p.npy").write_bytes(pickle.dumps(Evil(marker)))
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "p.npy", "--keys")
    _one_line(e, "--keys:", "holds pickled Python objects")
    assert not marker.exists()


def test_npy_empty_truncated_and_string(tmp_path):
    (tmp_path / "e.npy").write_bytes(b"")
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "e.npy", "--keys")
    _one_line(e, "is empty")
    np.save(tmp_path / "t.npy", np.ones((50, 50)))
    (tmp_path / "t.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:300])
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "t.npy", "--keys")
    _one_line(e, "is not a readable .npy array")
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "s.npy", "--keys")
    _one_line(e, "holds dtype <U1", "numeric")


def test_pt_with_code_or_non_tensor_rejected(tmp_path):
    marker = tmp_path / "PWNED"
    torch.save(Evil(marker), tmp_path / "evil.pt")
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "evil.pt", "--keys")
    _one_line(e, "--keys:", "would import and call io.open", "never runs code")
    assert not marker.exists()
    torch.save({"a": torch.ones(2)}, tmp_path / "d.pt")
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "d.pt", "--keys")
    _one_line(e, "holds a dict, expected a single tensor")
    (tmp_path / "x.txt").write_text("1 2 3")
    with pytest.raises(DataFileError) as e:
        load_array(tmp_path / "x.txt", "--keys")
    _one_line(e, "expected a file ending in .pt or .npy")


def test_good_arrays_load(tmp_path):
    np.save(tmp_path / "a.npy", np.eye(3))
    torch.save(torch.eye(3), tmp_path / "a.pt")
    assert torch.equal(load_array(tmp_path / "a.npy", "x"), load_array(tmp_path / "a.pt", "x").double())
