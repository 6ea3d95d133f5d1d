"""Issue 42 item 4: build_fact_mlp with defaults searches the width as `symformer facts build` does, and
load_fact_mlp reads what `facts build` writes, safely (a crafted pickle runs no code), saying what it holds."""

from __future__ import annotations

import json
import pickle
import warnings

import pytest
import torch

from symformer.cli import main
from symformer.facts import (
    FactStorageError,
    SavedFactMLP,
    build_fact_mlp,
    fact_accuracy,
    load_fact_mlp,
    make_fact_set,
    save_fact_mlp,
)


class Evil:
    """Unpickling this calls open(marker, 'w'): the marker file appears if a loader runs pickled code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def fs():
    return make_fact_set(24, 8, seed=0)


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("seed, m", [(0, 18), (3, 33)])
def test_build_without_m_searches_the_width(fs, seed, m):
    """App. A.1.2's search: doubling from 32 to a width that stores every fact, then bisection below it, every
    width built with `seed`. (Storing is not monotone in m with a JL decoder: at seed 3, m = 13 stores too.)"""
    mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, seed=seed)  # bin+jl, m=None: searched
    assert mlp.down.m == m and mlp.accuracy == 1.0 == fact_accuracy(mlp, fs.keys, fs.values, fs.facts)
    assert (mlp.method, mlp.n_facts) == ("bin+jl", 24)
    # the MLP an explicit m gives with the same seed; the widths the search saw fail do not store every fact
    assert _same_weights(mlp, build_fact_mlp(fs.keys, fs.values, fs.facts, m=m, seed=seed))
    failed = [m - 1] + [32 * 2**k for k in range(8) if 32 * 2**k < m]
    assert all(
        build_fact_mlp(fs.keys, fs.values, fs.facts, m=k, seed=seed, strict=False).accuracy < 1.0 for k in failed
    )


def test_build_without_m_when_no_width_stores(fs):
    with pytest.raises(FactStorageError, match=r"^m: got None .* m <= 4\b.*'bin\+jl' stores all 24 facts") as e:
        build_fact_mlp(fs.keys, fs.values, fs.facts, max_m=4)
    assert "\n" not in str(e.value)
    widest = build_fact_mlp(fs.keys, fs.values, fs.facts, max_m=4, strict=False)
    assert widest.down.m == 4 and widest.accuracy < 1.0
    with pytest.raises(ValueError, match="max_m: got 0"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, max_m=0)
    with pytest.raises(ValueError, match="^keys: got 'keys that are not of the form e_i - e_j'"):
        build_fact_mlp(fs.keys, fs.values, fs.facts, "two-hot+jl")  # no width can be built: that error


def test_cli_build_and_python_api_agree_and_load(fs, tmp_path, capsys):
    torch.save(fs.keys, tmp_path / "K.pt")
    torch.save(fs.values, tmp_path / "V.pt")
    torch.save(fs.facts, tmp_path / "f.pt")
    out = tmp_path / "mlp.pt"
    assert (
        main(
            [
                "facts",
                "build",
                "--keys",
                str(tmp_path / "K.pt"),
                "--values",
                str(tmp_path / "V.pt"),
                "--facts",
                str(tmp_path / "f.pt"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    api = build_fact_mlp(fs.keys, fs.values, fs.facts)
    saved = load_fact_mlp(out)
    assert isinstance(saved, SavedFactMLP) and _same_weights(saved.mlp, api)
    assert (
        (saved.method, saved.m, saved.h, saved.d)
        == ("bin+jl", api.down.m, api.h, 8)
        == (printed["method"], printed["m"], printed["h"], printed["d"])
    )
    assert (saved.n_facts, saved.n_stored, saved.accuracy, saved.params) == (24, 24, 1.0, api.n_params())
    assert torch.equal((saved.mlp(fs.keys) @ fs.values.T).argmax(1), fs.facts)
    assert f"method='bin+jl', m={api.down.m}," in repr(saved) and "n_facts=24" in repr(saved)


def test_save_and_load_round_trip_of_a_dense_mlp(fs, tmp_path):
    naive = build_fact_mlp(fs.keys, fs.values, fs.facts, "naive")
    cfg = save_fact_mlp(tmp_path / "n.pt", naive)
    back = load_fact_mlp(tmp_path / "n.pt")
    assert cfg["m"] is None and back.m is None and _same_weights(back.mlp, naive) and back.n_stored == 24
    # a file the CLI wrote before save_fact_mlp: a baseline's config recorded the (unused) --m it was given
    torch.save({"config": {**cfg, "m": 5}, "state_dict": naive.state_dict()}, tmp_path / "old.pt")
    assert load_fact_mlp(tmp_path / "old.pt").m is None
    with pytest.raises(TypeError, match="^mlp: got 'Linear', expected a FactMLP returned by build_fact_mlp"):
        save_fact_mlp(tmp_path / "x.pt", torch.nn.Linear(2, 2))


def _files(tmp_path, fs):
    marker = tmp_path / "PWNED"
    good = build_fact_mlp(fs.keys, fs.values, fs.facts, "naive")
    files = {
        "zipped pickle": (
            lambda p: torch.save({"config": {}, "state_dict": Evil(marker)}, p),
            "would import and call io.open",
        ),
        "bare pickle": (lambda p: p.write_bytes(pickle.dumps({"config": Evil(marker)})), "not a torch file"),
        "garbage": (lambda p: p.write_bytes(b"not a file\n"), "not a torch file"),
        "empty": (lambda p: p.write_bytes(b""), "the file is empty"),
        "a tensor": (lambda p: torch.save(torch.zeros(3), p), "a Tensor without 'config' and 'state_dict'"),
        "other weights": (
            lambda p: torch.save(
                {
                    "config": {"method": "naive", "activation": "silu", "accuracy": 1.0, "n_facts": 3},
                    "state_dict": {"w": torch.zeros(2)},
                },
                p,
            ),
            "its state_dict is not a FactMLP's",
        ),
        "config and weights disagree": (
            lambda p: torch.save({"config": {**save_fact_mlp(p, good), "h": 5}, "state_dict": good.state_dict()}, p),
            "its config says h=5, its weights have h=24",
        ),
    }
    return marker, files


def test_load_fact_mlp_refuses_other_files_in_one_line_without_unpickling(fs, tmp_path):
    marker, files = _files(tmp_path, fs)
    for i, (name, (write, reason)) in enumerate(files.items()):
        path = tmp_path / f"bad{i}.pt"
        write(path)
        with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError) as e:
            warnings.simplefilter("always")
            load_fact_mlp(path)
        msg = str(e.value)
        assert msg.startswith(f"{path} is not a fact-MLP file written by `symformer facts build`"), (name, msg)
        assert reason in msg and "\n" not in msg and not caught, (name, msg, [str(w.message) for w in caught])
    assert not marker.exists()
    with pytest.raises(ValueError, match=r"^path: got '.*missing.pt', expected an existing file"):
        load_fact_mlp(tmp_path / "missing.pt")
    with pytest.raises(TypeError, match="^path: got 'int'"):
        load_fact_mlp(3)
