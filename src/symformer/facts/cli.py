"""`symformer facts build` and `symformer facts rho` for users with their own embeddings (.pt or .npy)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import typer

from symformer._io import save_atomic
from symformer._validation import fail

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Fact-storing MLPs: build one from your key/value embeddings, or measure rho(V).")


def load_matrix(path: Path, name: str) -> torch.Tensor:
    """A 2-D float matrix from .pt (a tensor, loaded with weights_only=True) or .npy (allow_pickle=False)."""
    from symformer.data.files import load_array
    x = load_array(path, name)
    if x.ndim != 2 or not x.is_floating_point():
        fail(name, f"{path}: a {x.dtype} tensor of shape {tuple(x.shape)}", "a 2-D floating-point matrix")
    return x.double()


def _json_pairs(path: Path) -> list[tuple[int, int]]:
    from symformer.data.files import read_text
    try:
        pairs = json.loads(read_text(path, "a JSON list of [key, value] pairs"))
    except json.JSONDecodeError as e:
        fail("--facts", f"{path} ({e.msg} at line {e.lineno})", "valid JSON: [[key, value], ...]")
    ok = isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and all(
        isinstance(x, int) and not isinstance(x, bool) for x in p) for p in pairs)
    if not ok:
        fail("--facts", f"{path}: a JSON value that is not a list of integer [key, value] pairs", "[[key, value], ...]")
    return [(k, v) for k, v in pairs]


def load_facts(path: Optional[Path], n_keys: int, n_values: int) -> torch.Tensor:
    """Facts as a 1-D integer array (.pt/.npy: facts[i] = f(i)) or a JSON list of [key, value] pairs;
    default: the identity map (requires |K| = |V|)."""
    from symformer.data.files import load_array
    from symformer.facts.embeddings import fact_pairs_to_map
    if path is None:
        if n_keys != n_values:
            fail("--facts", None, f"a fact file when |K| ({n_keys}) != |V| ({n_values})")
        return torch.arange(n_keys)
    path = Path(path)
    if not path.is_file():
        fail("--facts", str(path), "an existing .json, .pt or .npy file")
    if path.suffix == ".json":
        return fact_pairs_to_map(_json_pairs(path), n_keys)
    f = load_array(path, "--facts")
    if f.ndim != 1 or f.is_floating_point():
        fail("--facts", f"{path}: a {f.dtype} tensor of shape {tuple(f.shape)}", "a 1-D integer array")
    return f.long()


def _check_out_file(out: Path) -> None:
    """Before any work: OUT must be a file we can create (its folder writable, not a folder itself)."""
    from symformer._io import check_writable_file
    check_writable_file(out, "--out")


@app.command()
def build(keys: Path = typer.Option(..., "--keys", help="key embeddings |K| x d (.pt or .npy)"),
          values: Path = typer.Option(..., "--values", help="value embeddings |V| x d (.pt or .npy)"),
          facts: Optional[Path] = typer.Option(None, "--facts", help="f: 1-D int array or JSON [[k, v], ...]"),
          method: str = typer.Option("bin+jl", "--method", help="e.g. bin+jl, bin+gd, gd+gd, naive, ntk"),
          m: Optional[int] = typer.Option(None, "--m", help="decoder width (default: smallest that stores, searched)"),
          h: Optional[int] = typer.Option(None, "--h", help="hidden size for ntk / gd-* methods"),
          whiten: float = typer.Option(0.0, "--whiten", help="partial ZCA strength alpha in [0, 1]"),
          seed: int = typer.Option(0, "--seed"),
          out: Path = typer.Option(Path("mlp.pt"), "--out")):
    """Build an MLP that stores every fact and save it (state_dict + config) to OUT."""
    from symformer.facts.capacity import (
        KNOB,
        METHODS,
        BuildOptions,
        build_fact_mlp,
        method_capacity,
    )
    from symformer.facts.embeddings import FactSet, validate_fact_set
    if method not in METHODS:
        fail("--method", method, f"one of {', '.join(METHODS)}")
    _check_out_file(out)
    K, V = load_matrix(keys, "--keys"), load_matrix(values, "--values")
    f = load_facts(facts, K.shape[0], V.shape[0])
    validate_fact_set(K, V, f)
    opts = BuildOptions(whiten=whiten)
    if KNOB[method] == "m" and m is None:
        r = method_capacity(method, [FactSet(K, V, f)], 1, 32, max_size=4096, options=opts)
        if r.size is None:
            fail("--method", method, "a method that stores this fact set with m <= 4096")
        m = r.size
    if KNOB[method] == "h" and h is None:
        fail("--h", None, f"a hidden size for method {method!r}")
    mlp = build_fact_mlp(K, V, f, method, m=m, h=h, seed=seed, options=opts)
    cfg = {"method": method, "m": m, "h": mlp.h, "d": mlp.d, "gated": mlp.gated, "activation": mlp.activation,
           "params": mlp.n_params(), "accuracy": mlp.accuracy, "n_facts": int(f.numel())}
    # plain dict of numbers/strings + tensors: loads with torch.load(weights_only=True), like checkpoints
    save_atomic({"config": cfg, "state_dict": mlp.state_dict()}, out)
    typer.echo(json.dumps({**cfg, "out": str(out)}))


@app.command()
def rho(values: Path = typer.Option(..., "--values", help="value embeddings |V| x d (.pt or .npy)"),
        out: Optional[Path] = typer.Option(None, "--out", help="save rho_i and U* here (.pt)")):
    """Decodability rho(V) (eq. 3); lists the values that are not vertices (never decodable)."""
    from symformer.facts.decodability import decodability
    if out is not None:
        _check_out_file(out)
    V = load_matrix(values, "--values")
    info = decodability(V)
    if out is not None:
        save_atomic({"rho": float(info.rho), "rho_i": torch.as_tensor(info.rho_i), "U": torch.as_tensor(info.U)}, out)
    typer.echo(json.dumps({"rho": info.rho, "n_values": V.shape[0], "d": V.shape[1],
                           "not_vertices": info.not_vertices}))
