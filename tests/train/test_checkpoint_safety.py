"""Checkpoints load with weights_only=True: crafted pickles run no code; bad files get one line naming the file."""

import json
import pickle
import pickletools
import random
import warnings
import zipfile

import numpy as np
import pytest
import torch

from symformer import cli
from symformer.data import load_digits_patches
from symformer.models import TransformerConfig, ViTClassifier
from symformer.train import Classification, TrainConfig, Trainer
from symformer.train.checkpoint import (
    CheckpointError,
    load,
    load_checkpoint,
    rng_state,
    set_rng_state,
)


class Evil:
    """Unpickling this calls open(marker, 'w'): a file appears if any loader executes pickled code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _trainer(out, d_model=16, **tkw):
    s = load_digits_patches()
    torch.manual_seed(0)
    model = ViTClassifier(TransformerConfig(d_model=d_model, n_heads=2, n_layers=1, coord_dim=2), 4, 10)
    cfg = TrainConfig(**{"epochs": 1, "batch_size": 64, "max_steps": 3, **tkw})
    return Trainer(model, Classification(), s.train.subset(torch.arange(128)), None, cfg, out_dir=out)


def _crafted(path, marker, zipped):
    if zipped:  # torch's zip format, pickle inside
        torch.save({"format": "symformer-checkpoint", "version": 1, "model": Evil(marker)}, path)
    else:  # a bare pickle, as older torch.save wrote
        path.write_bytes(pickle.dumps({"model": Evil(marker)}))
    assert not marker.exists()


@pytest.mark.parametrize(
    "zipped, reason", [(True, "would import and call io.open; symformer never runs code"), (False, "not a torch file")]
)
def test_crafted_pickle_runs_no_code_via_trainer(tmp_path, zipped, reason):
    marker = tmp_path / "PWNED"
    t = _trainer(tmp_path / "run")
    (tmp_path / "run").mkdir()
    _crafted(t.ckpt_path, marker, zipped)
    with pytest.raises(CheckpointError) as e:
        t.fit(resume=True)
    assert not marker.exists()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{t.ckpt_path} is not a symformer checkpoint (") and reason in msg


@pytest.mark.parametrize("zipped, reason", [(True, "would import and call io.open"), (False, "not a torch file")])
def test_crafted_pickle_runs_no_code_via_cli(tmp_path, capsys, zipped, reason):
    """stderr is our one line alone: torch's two-line UserWarning about a bare pickle's protocol (issue 42
    item 5) is not printed before it. pytest records warnings instead of printing them: they are counted here."""
    out, marker = tmp_path / "out", tmp_path / "PWNED"
    out.mkdir()
    _crafted(out / "checkpoint.pt", marker, zipped)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main(["train", "--preset", "digits-vit", "--set", "model.d_model=16", "--resume", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert not caught, [str(w.message) for w in caught]
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err and reason in err
    assert err.startswith(f"error: --resume: {out / 'checkpoint.pt'} is not a symformer checkpoint (")


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"garbage\n", "not a torch file"),
        (b"junk", "not a torch file"),  # the weights-only unpickler's struct.error
        (b"", "the file is empty"),
        ("truncated", "truncated or not a torch file"),
        ("foreign", "without the 'symformer-checkpoint' marker"),
    ],
)
def test_bad_files_one_line(tmp_path, content, reason):
    t = _trainer(tmp_path / "run")
    t.fit()
    good = t.ckpt_path.read_bytes()
    if content == "truncated":
        content = good[: len(good) // 2]
    elif content == "foreign":
        torch.save({"weights": torch.zeros(3)}, t.ckpt_path)
        content = t.ckpt_path.read_bytes()
    t.ckpt_path.write_bytes(content)
    with pytest.raises(CheckpointError) as e:
        _trainer(tmp_path / "run").fit(resume=True)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{t.ckpt_path} is not ") and reason in msg


def test_checkpoint_of_another_model_or_config(tmp_path):
    _trainer(tmp_path / "run").fit()
    with pytest.raises(CheckpointError, match=r"checkpoint of another model \(.*shape") as e:
        _trainer(tmp_path / "run", d_model=32).fit(resume=True)
    assert str(tmp_path / "run" / "checkpoint.pt") in str(e.value)
    with pytest.raises(CheckpointError, match=r"another training config \(lr=0.001 there, 0.01 here"):
        _trainer(tmp_path / "run", lr=0.01).fit(resume=True)
    # settings that do not change the trajectory may differ
    _trainer(tmp_path / "run", checkpoint_every=2).fit(resume=True)


def test_saved_checkpoint_is_plain_and_loads_weights_only(tmp_path):
    t = _trainer(tmp_path / "run")
    t.fit()
    ck = torch.load(t.ckpt_path, weights_only=True)  # raises if anything but tensors/plain containers is inside
    assert ck["format"] == "symformer-checkpoint" and load_checkpoint(t.ckpt_path)["state"]["step"] == 2
    assert isinstance(ck["config"], dict) and isinstance(ck["rng"]["numpy"]["keys"], torch.Tensor)
    with zipfile.ZipFile(t.ckpt_path) as z:  # no pickled class other than torch's own rebuild helpers
        data = next(z.read(n) for n in z.namelist() if n.endswith("data.pkl"))
    globals_ = {arg for op, arg, _ in pickletools.genops(data) if op.name in ("GLOBAL", "STACK_GLOBAL")}
    assert globals_ and all(
        g == "collections OrderedDict" or g.startswith("torch ") or g.startswith("torch._utils ") for g in globals_
    ), globals_


def test_rng_state_round_trip():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # a cached Gaussian in Python's state
    st = rng_state()
    a = (random.random(), random.gauss(0, 1), np.random.rand(), np.random.randn(), torch.rand(1).item())
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    set_rng_state(st)
    assert (random.random(), random.gauss(0, 1), np.random.rand(), np.random.randn(), torch.rand(1).item()) == a


def test_load_of_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="is not a file"):
        load(tmp_path / "nope.pt")


def test_facts_outputs_load_weights_only(tmp_path, capsys):
    g = torch.Generator().manual_seed(0)
    keys = torch.nn.functional.normalize(torch.randn(8, 6, generator=g, dtype=torch.float64), dim=1)
    torch.save(keys, tmp_path / "k.pt")
    np.save(tmp_path / "v.npy", keys.numpy())
    code = cli.main(
        [
            "facts",
            "build",
            "--keys",
            str(tmp_path / "k.pt"),
            "--values",
            str(tmp_path / "v.npy"),
            "--method",
            "naive",
            "--out",
            str(tmp_path / "mlp.pt"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    built = torch.load(tmp_path / "mlp.pt", weights_only=True)
    assert set(built) == {"config", "state_dict"} and json.dumps(built["config"])
    code = cli.main(["facts", "rho", "--values", str(tmp_path / "v.npy"), "--out", str(tmp_path / "rho.pt")])
    assert code == 0
    rho = torch.load(tmp_path / "rho.pt", weights_only=True)
    assert isinstance(rho["rho"], float) and rho["U"].shape == (8, 6)
