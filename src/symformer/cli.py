"""The `symformer` command line: reproduce, bench, train, data (and facts)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import List, Optional

import typer

import symformer.teleport  # noqa: F401  (registers the "teleport" callback of `train --teleport`)
from symformer import benchmarks, experiments  # their load_all is looked up at each call (tests replace it)
from symformer._io import output_dir
from symformer._rng import seeded_generator
from symformer._validation import check_device
from symformer.benchmarks.report import write_bench
from symformer.cli_facts import app as facts_app
from symformer.cli_linearize import linearize_command
from symformer.data import DATASETS, ENV_VAR
from symformer.data.paths import MissingDataError, data_file
from symformer.data.paths import data_dir as resolve_dir
from symformer.experiments import RunContext
from symformer.registry import CALLBACKS
from symformer.report import write_index
from symformer.results import environment, set_command, write_experiment, write_json
from symformer.runner.executors import make_engine, using_engine
from symformer.runner.jobs import JobError, records_where, where_note, write_provenance
from symformer.train import CheckpointError, Trainer, distributed
from symformer.train.presets import PRESETS, build, load_config, load_trained, parse_set, resolve, result_metrics
from symformer.train.trainer import seed_everything

try:  # typer >= 0.20 vendors click as typer._click; older typer depends on click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Structured transformers: reproduce the papers' claims, benchmark, train. Bad input gets one line on "
    "stderr and exit status 2; add --debug anywhere on the line to see the traceback behind that line.",
)
data_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Data sets and where their files go.")
app.add_typer(data_app, name="data")
app.command("linearize")(linearize_command)


class CLIError(Exception):
    """One line for the user; exit status 2."""


#: anywhere on the command line: print the traceback behind a one-line error (taken out before the commands parse)
DEBUG_FLAG = "--debug"


def _error(message: str, exc: BaseException, debug: bool) -> None:
    """The one-line error on stderr; with --debug the traceback behind it first, including the error a CLIError
    rewords (raised `from None`, which hides it from a plain traceback)."""
    if debug:
        exc.__suppress_context__ = False
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    typer.echo(message, err=True)


def _threads() -> None:
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, min(os.cpu_count() or 1, 16)))


def _check_names(kind: str, names: list[str], known: list[str]) -> None:
    bad = [n for n in names if n not in known]
    if bad:
        raise CLIError(
            f"unknown {kind} {', '.join(repr(b) for b in bad)}: "
            f"expected one of {', '.join(known) or '(none registered)'}"
        )


@app.command()
def reproduce(
    names: Optional[List[str]] = typer.Argument(None, help="experiments to run (default: all)"),
    quick: bool = typer.Option(False, "--quick", help="short runs (<= 3 minutes each on 2 cores)"),
    out: Path = typer.Option(Path("out/reproduce"), "--out", help="folder for results and report.md"),
    seed: int = typer.Option(0, "--seed"),
    list_: bool = typer.Option(False, "--list", help="list the registered experiments and exit"),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="folder with data files (else $SYMFORMER_DATA)"),
    jobs: int = typer.Option(
        1,
        "--jobs",
        help="worker processes, one thread each, for the experiments made of independent recorded runs (the "
        "others run in this process)",
    ),
    resume: bool = typer.Option(
        False, "--resume", help="reuse the runs an interrupted call recorded under OUT/<name>/runs"
    ),
    set_: Optional[List[str]] = typer.Option(
        None, "--set", help="experiment option NAME.option=value (see --list), repeatable"
    ),
    full: bool = typer.Option(
        False, "--full", help="paper-size models where an experiment has them (plash: Informer 512/8/2+1/2048)"
    ),
    executor: str = typer.Option("local", "--executor", help="local (process pool), submitit or ray"),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="submitit: partition"),
    slurm_time: Optional[int] = typer.Option(
        None,
        "--slurm-time",
        help="submitit: time limit of each slot (a worker that runs job after job), minutes (default 1440)",
    ),
    gpus_per_job: Optional[int] = typer.Option(
        None, "--gpus-per-job", help="submitit/ray: GPUs per job, needs --device cuda (default there: 1)"
    ),
    cpus_per_job: int = typer.Option(1, "--cpus-per-job", help="submitit/ray: CPU cores per job"),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="ray: host:port of a head (default: a local instance)"
    ),
    device: str = typer.Option(
        "cpu",
        "--device",
        help="cpu, cuda (cuda:N) or mps: where the experiments train and run their models (checks stay on cpu)",
    ),
):
    """Run the papers' experiments and write OUT/<name>/results.json and OUT/report.md."""
    reg = experiments.load_all()
    if list_:
        for n in reg.names():
            spec = reg.get(n)
            files = f"  [data: {', '.join(spec.data_files)}]" if spec.data_files else ""
            typer.echo(f"{n:12s} {spec.description}{files}")
            for opt, (default, text) in getattr(spec, "options", {}).items():
                typer.echo(f"{'':12s}   --set {n}.{opt}={json.dumps(default)}  {text}")
        return
    chosen = list(names or reg.names())
    _check_names("experiment", chosen, reg.names())
    if jobs < 1:
        raise CLIError(f"--jobs: got {jobs}, expected an integer >= 1")
    options = experiment_options(reg, chosen, set_ or [])
    # before any work: an unwritable --out costs one line, not a lost run; a failed call leaves no empty folder
    with output_dir(out, "--out"):
        engine = make_engine(
            executor,
            out / ".submitit",
            jobs,
            device,
            slurm_partition,
            slurm_time,
            gpus_per_job,
            cpus_per_job,
            ray_address,
        )
        if executor != "local":
            typer.echo(f"[engine] {engine.describe()} started in {engine.startup_seconds:.2f} s", err=True)
        _threads()
        with using_engine(engine):
            _reproduce(reg, chosen, names, out, quick, seed, data_dir, jobs, resume, options, full, device)


def _reproduce(reg, chosen, names, out, quick, seed, data_dir, jobs, resume, options, full, device="cpu") -> None:
    entries = []
    from tqdm import tqdm

    for name in tqdm(chosen, desc="reproduce", disable=not sys.stderr.isatty()):
        spec = reg.get(name)
        try:
            for f in spec.data_files:
                data_file(f, data_dir)
        except MissingDataError as e:
            if names:
                raise CLIError(str(e)) from None
            entries.append({"name": name, "status": "skipped", "reason": str(e)})
            continue
        missing = spec.missing_requirement()
        if missing:  # an optional extra not installed: skipped like a missing data file
            if names:
                raise CLIError(f"experiment {name}: {missing}")
            entries.append({"name": name, "status": "skipped", "reason": missing})
            continue
        ctx = RunContext(
            out_dir=out / name,
            quick=quick,
            seed=seed,
            data_dir=data_dir,
            device=device,
            jobs=jobs,
            resume=resume,
            options=options[name],
            extra={"full": full},
        )
        t0 = time.perf_counter()
        typer.echo(f"[{name}] running{' (quick)' if quick else ''} ...", err=True)
        # torch's default generator starts from a random seed in every process: seed the global RNGs so a
        # part drawn from them (e.g. default nn.Linear init) is the same in a resumed and an uninterrupted run
        seed_everything(seed)
        result = spec.fn(ctx)
        if ctx.options:
            result.config = {**result.config, "options": ctx.options}
        where = records_where(out / name / "runs")
        if where_note(where):  # which engines, devices and hosts made the records (PROVENANCE lists them)
            result.config = {**result.config, "runs_provenance": where}
            result.notes = [*result.notes, where_note(where)]
            write_provenance(out / name, where)
        secs = time.perf_counter() - t0
        payload = write_experiment(out / name, name, quick, result, device=device, seconds=secs)
        entries.append({"name": name, "status": "ran", "payload": payload, "seconds": secs})
        typer.echo(f"[{name}] done in {secs:.1f}s -> {out / name / 'results.json'}", err=True)
    path = write_index(out, entries, quick)
    typer.echo(f"report: {path}")


def experiment_options(reg, chosen: list[str], items: list[str]) -> dict[str, dict]:
    """`--set NAME.option=value` (or `option=value` when one experiment runs) -> {name: resolved options}.
    Values are JSON where they parse, else strings; unknown names and options name the closest valid one."""
    import difflib

    given: dict[str, dict] = {n: {} for n in chosen}
    for item in items:
        path, value = parse_set(item)
        if len(path) == 1 and len(chosen) == 1:
            path = [chosen[0], path[0]]
        if len(path) != 2:
            raise CLIError(f"--set: got {item!r}, expected EXPERIMENT.option=value (see reproduce --list)")
        name, opt = path
        if name not in chosen:
            close = difflib.get_close_matches(name, reg.names(), n=1)
            why = (
                f"this call does not run {name}"
                if name in reg.names()
                else f"no experiment {name!r}" + (f"; did you mean {close[0]}?" if close else "")
            )
            raise CLIError(f"--set: got {item!r}, expected an option of an experiment this call runs ({why})")
        given[name][opt] = value
    return {n: reg.get(n).resolve_options(given[n]) if hasattr(reg.get(n), "resolve_options") else {} for n in chosen}


@app.command()
def bench(
    suites: Optional[List[str]] = typer.Argument(None, help="suites to run (default: all)"),
    quick: bool = typer.Option(False, "--quick"),
    out: Path = typer.Option(Path("out/bench"), "--out"),
    list_: bool = typer.Option(False, "--list", help="list the registered suites and exit"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda (cuda:N) or mps"),
):
    """Time implementations side by side in one process; write OUT/<suite>/results.json."""
    reg = benchmarks.load_all()
    if list_:
        for n in reg.names():
            only = " (run when named)" if reg.get(n).by_name_only else ""
            typer.echo(f"{n:12s} {reg.get(n).description}{only}")
        return
    chosen = list(suites or [n for n in reg.names() if not reg.get(n).by_name_only])
    _check_names("benchmark suite", chosen, reg.names())
    check_device(device, "--device")
    with output_dir(out, "--out"):
        _threads()
        for name in chosen:
            typer.echo(f"[{name}] timing ...", err=True)
            t0 = time.perf_counter()
            res = reg.get(name).fn(benchmarks.BenchContext(out_dir=out / name, quick=quick, device=device))
            write_bench(out / name, name, quick, res, device, time.perf_counter() - t0)
            typer.echo(f"[{name}] -> {out / name / 'results.json'}")


def parse_kv(text: str, option: str) -> dict:
    """'alpha=0.65,samples=16' -> {'alpha': 0.65, 'samples': 16}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise CLIError(f"{option}: got {part!r}, expected key=value pairs separated by commas")
        k, v = (s.strip() for s in part.split("=", 1))
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


@app.command()
def train(
    preset: Optional[str] = typer.Option(None, "--preset", help="a named setup (see --list-presets)"),
    config: Optional[Path] = typer.Option(
        None, "--config", help="JSON/TOML with task, data, model, train (applied after --preset)"
    ),
    set_: Optional[List[str]] = typer.Option(
        None, "--set", help="key.sub=value, applied last (e.g. train.lr=3e-3), repeatable"
    ),
    out: Path = typer.Option(Path("out/train"), "--out"),
    resume: bool = typer.Option(False, "--resume", help="continue from OUT/checkpoint.pt"),
    teleport: Optional[str] = typer.Option(None, "--teleport", help="e.g. alpha=0.65,samples=16,epoch=1,steps=4"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    checkpoint_every: int = typer.Option(50, "--checkpoint-every", help="steps between checkpoints"),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    list_presets: bool = typer.Option(False, "--list-presets"),
    pack: bool = typer.Option(
        False, "--pack", help="text presets: paragraphs packed in rows, positions and attention restarting at each"
    ),
):
    """Train a model from a preset or config file; write OUT/results.json and OUT/metrics.jsonl."""
    if list_presets:
        for n in PRESETS:
            typer.echo(n)
        return
    if preset is None and config is None:
        raise CLIError("train: give --preset NAME, --config FILE or both (then --set key.sub=value to adjust)")
    spec = resolve(preset, load_config(config) if config else None, set_ or [])
    if pack:  # documents (paragraphs) packed in rows: data.text.packed_rows
        if spec["task"] != "shakespeare":
            raise CLIError(
                f"--pack: packs text documents; got task {spec['task']!r}, expected a text preset (shakespeare)"
            )
        spec["data"] = {**spec.get("data", {}), "layout": "packed"}
    if seed is not None:  # recorded in OUT/config.json, so --config OUT/config.json repeats this run
        spec["train"] = {**spec.get("train", {}), "seed": seed}
    tele_kw = parse_kv(teleport, "--teleport") if teleport else None  # bad options: one line before any work
    with output_dir(out, "--out"):  # a failed run leaves no --out folder it created behind
        _train(spec, preset, out, resume, tele_kw, seed, checkpoint_every, data_dir)


def _train(spec, preset, out, resume, tele_kw, seed, checkpoint_every, data_dir) -> None:
    import dataclasses

    _threads()
    distributed.init_from_env()  # no-op unless launched by torchrun
    model, task, split, tcfg = build(spec, data_dir=data_dir, seed=seed)
    tcfg = dataclasses.replace(tcfg, checkpoint_every=checkpoint_every, progress=True)
    callbacks = []
    if tele_kw is not None:
        callbacks.append(CALLBACKS.build("teleport", model=model, **tele_kw))
    trainer = Trainer(model, task, split.train, split.val, tcfg, test=split.test, callbacks=callbacks, out_dir=out)
    if resume and not trainer.ckpt_path.exists():
        raise CLIError(f"--resume: no checkpoint at {trainer.ckpt_path}; run once without --resume first")
    try:
        if resume:  # the checkpoint loads (or is refused) before anything in --out is rewritten
            trainer.resume()
        if distributed.is_main():
            write_json(out / "config.json", spec)  # the resolved config: --config OUT/config.json repeats the run
        final = trainer.fit(resume=resume)
    except CheckpointError as e:
        raise CLIError(f"--resume: {e}") from None
    metrics = result_metrics(spec["task"], final)
    if not distributed.is_main():
        return
    write_json(
        out / "results.json",
        {
            "experiment": "train",
            "preset": preset,
            "metrics": metrics,
            "config": {"spec": spec, "train": dataclasses.asdict(tcfg)},
            "history": trainer.state.history,
            "environment": environment(),
        },
    )
    typer.echo(json.dumps(metrics))


@app.command()
def sample(
    out: Path = typer.Option(..., "--out", help="a `symformer train --preset shakespeare-char` folder"),
    prompt: str = typer.Option(..., "--prompt", help="text to continue (characters of the corpus)"),
    tokens: int = typer.Option(200, "--tokens", help="characters to generate"),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="sample among the k likeliest (1: greedy)"),
    seed: int = typer.Option(0, "--seed"),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="the corpus (its vocabulary)"),
):
    """Print PROMPT continued by a trained character LM (OUT/config.json and OUT/checkpoint.pt, loaded safely)."""
    import torch

    _threads()
    model, vocab = _load_char_lm(out, data_dir)
    if not prompt:
        raise CLIError("--prompt: got an empty prompt, expected at least one character to condition on")
    stoi = {c: i for i, c in enumerate(vocab)}
    unknown = sorted({c for c in prompt if c not in stoi})
    if unknown:
        raise CLIError(
            f"--prompt: got characters not in the corpus vocabulary ({''.join(unknown)!r}), expected "
            "characters of the training corpus"
        )
    ids = torch.tensor([[stoi[c] for c in prompt]])
    names = {"max_new_tokens": "--tokens", "temperature": "--temperature", "top_k": "--top-k", "ids": "--prompt"}
    try:
        seq = model.generate(ids, tokens, temperature, top_k, generator=seeded_generator(seed))
    except (ValueError, TypeError) as e:
        name, _, rest = str(e).partition(":")
        raise CLIError(f"{names.get(name, name)}:{rest}") from None
    typer.echo("".join(vocab[i] for i in seq[0].tolist()))


def _load_char_lm(out: Path, data_dir: Optional[Path]):
    """(model, vocabulary) of a character-LM training folder (train.presets.load_trained: config.json rebuilds the
    model, the corpus gives the vocabulary, checkpoint.pt the weights, checked as --resume checks them)."""
    model, split = load_trained(out, data_dir, "--out", task="shakespeare")
    return model, split.meta["vocab"]


@data_app.command("list")
def data_list(data_dir: Optional[Path] = typer.Option(None, "--data-dir")):
    """List data sets, the file each needs and whether it is found."""
    d = resolve_dir(data_dir)
    typer.echo(f"data directory: {d if d else '(none: use --data-dir or ' + ENV_VAR + ')'}")
    for name, (desc, fname) in DATASETS.items():
        found = d and (d / fname).is_file() if fname is not None else False
        where = "built in" if fname is None else (f"{fname}: found" if found else f"{fname}: MISSING")
        typer.echo(f"{name:12s} {where:28s} {desc}")


def _register_plugins() -> None:
    """Sub-command groups that live beside their system (e.g. `symformer facts`)."""
    app.add_typer(facts_app, name="facts")


def main(argv: list[str] | None = None) -> int:
    _register_plugins()
    args = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in args
    args = [a for a in args if a != DEBUG_FLAG]
    set_command(args)
    try:
        app(args=args, standalone_mode=False)
    except (CLIError, MissingDataError, ValueError, TypeError) as e:
        _error(f"error: {e}", e, debug)
        return 2
    except JobError as e:
        if not isinstance(e.__cause__, (MissingDataError, ValueError, TypeError)):
            raise  # a job that crashed on a bug: the traceback is what helps
        _error(f"error: {e}", e, debug)  # a job rejected its input: one line, as anywhere else
        return 2
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except click_exc.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            typer.echo(e.ctx.get_help())
            return 0
        _error(f"error: {e.format_message()} (see --help for what is accepted)", e, debug)
        return 2
    except click_exc.ClickException as e:
        _error(f"error: {e.format_message()} (see --help)", e, debug)
        return 2
    except SystemExit as e:  # typer.Exit inside a command
        return int(e.code or 0)
    return 0


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
