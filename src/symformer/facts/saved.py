"""Fact-MLP files: what `symformer facts build` writes (`save_fact_mlp`) and `load_fact_mlp` reads back.

A file is {"config": plain numbers and strings, "state_dict": tensors}, so `torch.load(weights_only=True)` reads
it and nothing in it is unpickled. The MLP's shape is read from the state dict's names and shapes (what
`FactMLP.__init__` creates for each option), the activation from the config; the strict `load_state_dict` then
checks every entry, so a file that is not a fact MLP is one error naming the file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from symformer._io import save_atomic
from symformer._validation import fail
from symformer.data.files import DataFileError, torch_load
from symformer.facts.capacity import METHODS
from symformer.facts.mlp import ACTIVATIONS, FactMLP, FactorisedDown

WHAT = "a fact-MLP file written by `symformer facts build` or symformer.facts.save_fact_mlp"


@dataclass(frozen=True)
class SavedFactMLP:
    """A fact MLP read from a file, and what it holds. `mlp(x)` maps keys (rows of width d) to outputs
    that decode to values by argmax <mlp(k), v_j> (eq. 1).

    Attributes:
        mlp (FactMLP): the MLP, in eval mode.
        method (str): how it was built (symformer.facts.METHODS).
        m (int | None): decoder width (codes) of a construction; None for a dense down projection.
        h (int): hidden width.
        d (int): key / value width.
        params (int): stored parameter entries (count_params).
        n_facts (int): facts in the fact set it was built for.
        accuracy (float): fraction of those facts it stores, measured when it was built.
        path (str): the file it was read from.

    Examples:
        >>> import os, tempfile
        >>> from symformer.facts import build_fact_mlp, load_fact_mlp, make_fact_set, save_fact_mlp
        >>> fs = make_fact_set(16, 8, seed=0)
        >>> path = os.path.join(tempfile.mkdtemp(), "facts.pt")
        >>> cfg = save_fact_mlp(path, build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=8))
        >>> saved = load_fact_mlp(path)
        >>> saved.method, saved.m, saved.d, saved.n_stored
        ('bin+jl', 8, 8, 16)
    """

    mlp: FactMLP = field(repr=False)
    method: str  # how it was built (symformer.facts.METHODS)
    m: int | None  # decoder width (codes) of a construction; None for a dense down projection
    h: int  # hidden width
    d: int  # key / value width
    params: int  # stored parameter entries (count_params)
    n_facts: int  # facts in the fact set it was built for
    accuracy: float  # fraction of those facts it stores, measured when it was built
    path: str

    @property
    def n_stored(self) -> int:
        """How many of the n_facts facts it stores."""
        return round(self.accuracy * self.n_facts)


def save_fact_mlp(path: str | os.PathLike, mlp: FactMLP) -> dict:
    """Write an MLP returned by `build_fact_mlp` to `path` (atomically); returns the config saved with it.

    Args:
        path (str | os.PathLike): the file to write.
        mlp (FactMLP): an MLP from `build_fact_mlp` (with .method, .accuracy, .n_facts).

    Returns:
        config (dict): method, m, h, d, gated, activation, params, accuracy and n_facts, as written.

    Examples:
        >>> import os, tempfile
        >>> from symformer.facts import build_fact_mlp, make_fact_set, save_fact_mlp
        >>> fs = make_fact_set(16, 8, seed=0)
        >>> path = os.path.join(tempfile.mkdtemp(), "facts.pt")
        >>> cfg = save_fact_mlp(path, build_fact_mlp(fs.keys, fs.values, fs.facts, "naive"))
        >>> cfg["method"], cfg["accuracy"], cfg["n_facts"]
        ('naive', 1.0, 16)
    """
    if not isinstance(mlp, FactMLP) or not all(hasattr(mlp, a) for a in ("method", "accuracy", "n_facts")):
        fail(
            "mlp",
            type(mlp).__name__,
            "a FactMLP returned by build_fact_mlp (with .method, .accuracy, .n_facts)",
            TypeError,
        )
    down = mlp.down
    cfg = {
        "method": mlp.method,
        "m": down.m if isinstance(down, FactorisedDown) else None,
        "h": mlp.h,
        "d": mlp.d,
        "gated": mlp.gated,
        "activation": mlp.activation,
        "params": mlp.n_params(),
        "accuracy": float(mlp.accuracy),
        "n_facts": int(mlp.n_facts),
    }
    save_atomic({"config": cfg, "state_dict": mlp.state_dict()}, path)
    return cfg


def _spec(sd: dict, activation: str) -> dict:
    """FactMLP arguments from the state dict's entry names and shapes (KeyError when one it needs is absent)."""
    h, d = sd["up.weight"].shape
    fac = "down.D" in sd
    return {
        "d": d,
        "h": h,
        "activation": activation,
        "gated": "gate.weight" in sd,
        "bias": "up.bias" in sd,
        "m": sd["down.D"].shape[1] if fac else None,
        "dense_codes": "down.E" in sd,
        "code_bias": "down.code_bias" in sd,
        "out_bias": "down.out_bias" in sd or "down.bias" in sd,
        "dtype": sd["up.weight"].dtype,
    }


def load_fact_mlp(path: str | os.PathLike) -> SavedFactMLP:
    """The MLP in a file written by `symformer facts build` (or `save_fact_mlp`), loaded with weights_only=True
    (nothing is unpickled), and what it holds. A file that is not one: one-line ValueError naming the file.

    Args:
        path (str | os.PathLike): a file written by `save_fact_mlp`.

    Returns:
        saved (SavedFactMLP): the MLP and what it holds.

    Raises:
        ValueError: the path is not a file, or the file is not a fact MLP (DataFileError, naming it).

    Examples:
        >>> import os, tempfile, torch
        >>> from symformer.facts import build_fact_mlp, load_fact_mlp, make_fact_set, save_fact_mlp
        >>> fs = make_fact_set(16, 8, seed=0)
        >>> mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, "naive")
        >>> path = os.path.join(tempfile.mkdtemp(), "facts.pt")
        >>> _ = save_fact_mlp(path, mlp)
        >>> torch.equal(load_fact_mlp(path).mlp(fs.keys), mlp(fs.keys))  # the same function
        True
    """
    if not isinstance(path, (str, os.PathLike)):
        fail("path", type(path).__name__, "a file path (str or os.PathLike)", TypeError)
    path = Path(path)
    if not path.is_file():
        fail("path", str(path), f"an existing file: {WHAT}")
    ck = torch_load(path, WHAT)

    def bad(why: str) -> DataFileError:
        return DataFileError(f"{path} is not {WHAT} ({why})")

    if not isinstance(ck, dict) or not {"config", "state_dict"} <= set(ck):
        raise bad(f"a {type(ck).__name__} without 'config' and 'state_dict' entries")
    cfg, sd = ck["config"], ck["state_dict"]
    if (
        not isinstance(cfg, dict)
        or not isinstance(sd, dict)
        or not all(isinstance(v, torch.Tensor) for v in sd.values())
    ):
        raise bad("its config is not a dict or its state_dict not a dict of tensors")
    if cfg.get("method") not in METHODS or cfg.get("activation") not in ACTIVATIONS:
        raise bad(
            f"method {cfg.get('method')!r}, activation {cfg.get('activation')!r}; expected one of "
            f"symformer.facts.METHODS and one of {', '.join(ACTIVATIONS)}"
        )
    acc, n = cfg.get("accuracy"), cfg.get("n_facts")
    if not isinstance(acc, float) or not 0.0 <= acc <= 1.0 or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad(f"accuracy {acc!r}, n_facts {n!r}; expected a fraction in [0, 1] and a count >= 1")
    try:
        mlp = FactMLP(**_spec(sd, cfg["activation"]))
        mlp.load_state_dict(sd)
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise bad(f"its state_dict is not a FactMLP's: {first}") from None
    m = mlp.down.m if isinstance(mlp.down, FactorisedDown) else None
    checks = {"d": mlp.d, "h": mlp.h}
    if "+" in cfg["method"]:  # not for baselines: their files from before save_fact_mlp record an unused --m
        checks["m"] = m
    for key, have in checks.items():
        if key in cfg and cfg[key] != have:
            raise bad(f"its config says {key}={cfg[key]!r}, its weights have {key}={have!r}")
    mlp.method, mlp.accuracy, mlp.n_facts = cfg["method"], acc, n
    mlp.eval()
    return SavedFactMLP(mlp, cfg["method"], m, mlp.h, mlp.d, mlp.n_params(), n, acc, str(path))
