"""`symformer facts build | rho | edit`: stored-fact MLPs for users with their own embeddings (.pt or .npy), and
MLP swapping on a fact-recall checkpoint. The command-line layer (it reaches down to facts.lm for `edit`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Optional

import torch
import typer

from symformer._io import check_writable_dir, check_writable_file, save_atomic
from symformer._validation import check_int, fail
from symformer.data.files import load_array, read_text
from symformer.experiments.facts.solver_audit import ANCHORS, audit
from symformer.facts.capacity import KNOB, METHODS, BuildOptions, build_fact_mlp
from symformer.facts.decodability import decodability
from symformer.facts.embeddings import fact_pairs_to_map
from symformer.facts.lm.checkpoint import edit_by_swap, load_fact_model, parse_edits, save_fact_model
from symformer.facts.saved import save_fact_mlp

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Fact-storing MLPs: build one from your key/value embeddings, or measure rho(V).",
)


def load_matrix(path: Path, name: str) -> torch.Tensor:
    """A 2-D float matrix from .pt (a tensor, loaded with weights_only=True) or .npy (allow_pickle=False)."""
    x = load_array(path, name)
    if x.ndim != 2 or not x.is_floating_point():
        fail(name, f"{path}: a {x.dtype} tensor of shape {tuple(x.shape)}", "a 2-D floating-point matrix")
    return x.double()


JSON_FACTS = "[[key, value], ...] or a list of integers [f(0), f(1), ...]"


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _json_facts(path: Path, n_keys: int) -> torch.Tensor:
    """The fact map of a JSON file: integer [key, value] pairs, or a 1-D list of integers (facts[i] = f(i))."""
    try:
        data = json.loads(read_text(path, f"a JSON file: {JSON_FACTS}"))
    except json.JSONDecodeError as e:
        fail("--facts", f"{path} ({e.msg} at line {e.lineno})", f"valid JSON: {JSON_FACTS}")
    if isinstance(data, list) and data and all(_is_int(x) for x in data):
        return torch.tensor(data, dtype=torch.long)
    ok = isinstance(data, list) and all(isinstance(p, list) and len(p) == 2 and all(map(_is_int, p)) for p in data)
    if not ok:
        fail("--facts", f"{path}: a JSON value that is neither", JSON_FACTS)
    return fact_pairs_to_map([(k, v) for k, v in data], n_keys)


def load_facts(path: Optional[Path], n_keys: int, n_values: int) -> torch.Tensor:
    """Facts as a 1-D integer array (.pt/.npy, or a JSON list: facts[i] = f(i)) or a JSON list of [key, value] pairs;
    default: the identity map (requires |K| = |V|)."""
    if path is None:
        if n_keys != n_values:
            fail("--facts", None, f"a fact file when |K| ({n_keys}) != |V| ({n_values})")
        return torch.arange(n_keys)
    path = Path(path)
    if not path.is_file():
        fail("--facts", str(path), "an existing .json, .pt or .npy file")
    f = _json_facts(path, n_keys) if path.suffix == ".json" else load_array(path, "--facts")
    if f.ndim != 1 or f.is_floating_point():
        fail("--facts", f"{path}: a {f.dtype} tensor of shape {tuple(f.shape)}", "a 1-D integer array")
    return f.long()


def _check_out_file(out: Path) -> None:
    """Before any work: OUT must be a file we can create (its folder writable, not a folder itself)."""
    check_writable_file(out, "--out")


@app.command()
def build(
    keys: Path = typer.Option(..., "--keys", help="key embeddings |K| x d (.pt or .npy)"),
    values: Path = typer.Option(..., "--values", help="value embeddings |V| x d (.pt or .npy)"),
    facts: Optional[Path] = typer.Option(
        None,
        "--facts",
        help=r"f as a 1-D int array (.pt, .npy, or a JSON list \[f(0), f(1), ...]) or JSON \[\[k, v], ...]",
    ),
    method: str = typer.Option("bin+jl", "--method", help="e.g. bin+jl, bin+gd, gd+gd, naive, ntk"),
    m: Optional[int] = typer.Option(None, "--m", help="decoder width (default: smallest that stores, searched)"),
    h: Optional[int] = typer.Option(None, "--h", help="hidden size for ntk / gd-* methods"),
    whiten: float = typer.Option(0.0, "--whiten", help="partial ZCA strength alpha in [0, 1]"),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(Path("mlp.pt"), "--out"),
):
    """Build an MLP that stores every fact and save it (state_dict + config) to OUT; load it with
    symformer.facts.load_fact_mlp. Without --m a construction gets the smallest width that stores every fact."""
    if method not in METHODS:
        fail("--method", method, f"one of {', '.join(METHODS)}")
    _check_out_file(out)
    K, V = load_matrix(keys, "--keys"), load_matrix(values, "--values")
    f = load_facts(facts, K.shape[0], V.shape[0])
    if KNOB[method] == "h" and h is None:
        fail("--h", None, f"a hidden size for method {method!r}")
    mlp = build_fact_mlp(K, V, f, method, m=m, h=h, seed=seed, options=BuildOptions(whiten=whiten))
    cfg = save_fact_mlp(out, mlp)  # plain numbers/strings + tensors: loads with torch.load(weights_only=True)
    typer.echo(json.dumps({**cfg, "out": str(out)}))


@app.command()
def rho(
    values: Path = typer.Option(..., "--values", help="value embeddings |V| x d (.pt or .npy)"),
    out: Optional[Path] = typer.Option(None, "--out", help="save rho_i and U* here (.pt)"),
):
    """Decodability rho(V) (eq. 3); lists the values that are not vertices (never decodable)."""
    if out is not None:
        _check_out_file(out)
    V = load_matrix(values, "--values")
    info = decodability(V)
    if out is not None:
        save_atomic({"rho": float(info.rho), "rho_i": torch.as_tensor(info.rho_i), "U": torch.as_tensor(info.U)}, out)
    typer.echo(
        json.dumps({"rho": info.rho, "n_values": V.shape[0], "d": V.shape[1], "not_vertices": info.not_vertices})
    )


@app.command()
def edit(
    model: Path = typer.Option(..., "--model", help="a fact-recall checkpoint (facts.lm.checkpoint)"),
    facts: Path = typer.Option(..., "--facts", help=r"JSON \[\[key, value], ...] by name or index"),
    out: Path = typer.Option(..., "--out", help="where to write the edited checkpoint"),
    min_accuracy: float = typer.Option(0.99, "--min-accuracy", help="recall needed on the edited facts"),
    seed: int = typer.Option(0, "--seed"),
):
    """Edit facts by MLP swapping (Sec. 5.4): build an MLP storing the edited fact set, swap it in, verify
    that the model recalls the edited facts, and only then write OUT (exit 2 with the accuracy otherwise)."""
    _check_out_file(out)
    if not model.is_file():
        fail("--model", str(model), "an existing checkpoint file")
    if not facts.is_file():
        fail("--facts", str(facts), "an existing JSON file of [key, value] pairs")
    try:
        pairs = json.loads(read_text(facts, "a JSON list of [key, value] pairs"))
    except json.JSONDecodeError as e:
        fail("--facts", f"{facts} ({e.msg} at line {e.lineno})", "valid JSON: [[key, value], ...]")
    if not (isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs)):
        fail("--facts", f"{facts}: not a list of [key, value] pairs", "[[key, value], ...]")
    net, task, ck = load_fact_model(model)
    edits = parse_edits(pairs, task)
    report = edit_by_swap(net, task, ck, edits, seed)
    new_facts = report.pop("new_facts")
    if report["mlp_stores"] < 1.0 or report["edited_accuracy"] < min_accuracy:
        # a ValueError: main() prints this one line and exits 2
        fail(
            "--facts",
            f"an edit after which the model recalls {report['edited_accuracy']:.4f} of the edited facts "
            f"and its new MLP stores {report['mlp_stores']:.4f} of all facts",
            f"recall >= {min_accuracy} and an MLP storing every fact ({out} was not written)",
        )
    save_fact_model(out, net, ck["task_kind"], ck["task_args"], new_facts, ck["mlp_build"])
    typer.echo(json.dumps({**report, "out": str(out)}))


@app.command("solver-check")
def solver_check(
    out: Path = typer.Option(Path("results"), "--out", help="writes OUT/facts/solver_check/ and solver_check.json"),
    quick: bool = typer.Option(False, "--quick", help="the sets of `reproduce facts --quick` (default: full)"),
    jobs: int = typer.Option(1, "--jobs", help="worker processes (one thread each)"),
    resume: bool = typer.Option(False, "--resume", help="reuse the sets recorded under OUT/facts/solver_check"),
    seed: int = typer.Option(0, "--seed", help="the plan's seed (reproduce --seed)"),
    anchors: Optional[int] = typer.Option(None, "--anchors", help="random anchors per set (full 32, quick 8)"),
    lowest: Optional[int] = typer.Option(None, "--lowest", help="anchors of smallest rho_i per set (full 8, quick 4)"),
):
    """Check rho_i against cvxpy and the hull LP on every fact set `reproduce facts` computes rho on;
    prints the summary (OUT/facts/solver_check.json). Needs cvxpy and scipy (the `dev` extra)."""
    missing = [m for m in ("cvxpy", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        fail("solver-check", f"no {' or '.join(missing)} installed", "cvxpy and scipy (pip install 'symformer[dev]')")
    check_int("--jobs", jobs, 1)
    for name, v in (("--anchors", anchors), ("--lowest", lowest)):
        if v is not None:
            check_int(name, v, 0)
    n_random, n_lowest = ANCHORS[quick]
    pair = (n_random if anchors is None else anchors, n_lowest if lowest is None else lowest)
    if pair == (0, 0):
        fail("--anchors", "0 random and 0 lowest anchors", "at least one anchor per set")
    check_writable_dir(out)
    summary = audit(
        out,
        quick,
        seed,
        jobs,
        resume,
        pair,
        log=lambda msg: print(f"[solver-check] {msg}", file=sys.stderr, flush=True),
    )
    typer.echo(json.dumps({k: v for k, v in summary.items() if k != "per_set"}))
