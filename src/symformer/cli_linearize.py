"""`symformer linearize MODEL --data-dir D --attention favor|plash --positional rope|string --out OUT`: a trained
softmax model linearized with symformer.linearize on a character corpus in the model's vocabulary. MODEL is a Hugging
Face causal-LM folder (config.json and its weights, read locally), a CausalLM file that linearize.save_lm wrote (or a
folder holding one), or a `symformer train` folder of a character LM. Writes OUT/model (hf.from_pretrained reloads
it; a CausalLM: OUT/model/causal_lm.pt, which linearize.load_lm reloads), OUT/checkpoint.pt (`--resume` continues a
killed run) and OUT/results.json (the validation curve)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer

from symformer._io import output_dir
from symformer._validation import fail
from symformer.data import load_char_text
from symformer.integrations.hf import require_transformers
from symformer.linearize import LinearizeConfig, linearize, load_lm, save
from symformer.linearize.causal import LM_FILE
from symformer.models import CausalLM
from symformer.results import environment, write_json
from symformer.train.presets import load_trained

#: names in the library's messages -> the options a user typed
FLAGS = {
    "attention": "--attention",
    "positional": "--positional",
    "stage1_tokens": "--stage1-tokens",
    "stage2_tokens": "--stage2-tokens",
    "batch_size": "--batch-size",
    "stage1_loss": "--stage1-loss",
    "resume": "--resume",
    "data": "--data-dir",
    "model": "MODEL",
}


def _options(text: str) -> dict:
    """'n_features=64,seed=1' -> {'n_features': 64, 'seed': 1} (JSON values, else strings)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            fail("--core-options", part, "key=value pairs separated by commas")
        k, v = (s.strip() for s in part.split("=", 1))
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _load_model(path: Path, data_dir: Optional[Path]):
    """The softmax model of a local HF folder (never downloaded), a CausalLM file (linearize.save_lm's) or a
    `symformer train` folder of a character LM (config.json and checkpoint.pt: train.presets.load_trained)."""
    if path.is_file() or (path / LM_FILE).is_file():
        return load_lm(path, "MODEL")
    if (path / "checkpoint.pt").is_file() and (path / "config.json").is_file():
        return load_trained(path, data_dir, "MODEL", task="shakespeare")[0]
    if not path.is_dir() or not (path / "config.json").is_file():
        expected = "a Hugging Face model folder (config.json and weights, as save_pretrained writes)"
        fail("MODEL", str(path), f"{expected}, a CausalLM file (linearize.save_lm) or a `symformer train` folder")
    tf = require_transformers()
    tf.utils.logging.disable_progress_bar()  # stderr carries one line per error, nothing else
    return tf.AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()


def linearize_command(
    model: Path = typer.Argument(
        ..., help="a softmax model: a HF folder, a CausalLM file (linearize.save_lm) or a `symformer train` folder"
    ),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="holds tinyshakespeare.txt (its characters)"),
    attention: str = typer.Option("favor", "--attention", help="favor | plash"),
    positional: str = typer.Option("rope", "--positional", help="rope | string (STRING started at P = I)"),
    stage1_tokens: int = typer.Option(200_000, "--stage1-tokens", help="tokens of attention transfer"),
    stage2_tokens: int = typer.Option(200_000, "--stage2-tokens", help="tokens of LoRA fine-tuning"),
    block: int = typer.Option(128, "--block", help="tokens per training sequence"),
    batch_size: int = typer.Option(16, "--batch-size"),
    stage1_loss: str = typer.Option(
        "output_mse", "--stage1-loss", help="output_mse (LoLCATs') | attention_ce (Hedgehog's; favor only)"
    ),
    core_options: str = typer.Option("", "--core-options", help="e.g. n_features=64 or M=16,causal_block=32"),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(Path("out/linearize"), "--out"),
    resume: bool = typer.Option(False, "--resume", help="continue from OUT/checkpoint.pt (this run's)"),
):
    """Linearize a trained softmax model: attention transfer to FAVOR+ or PLASH, then LoRA on the LM loss."""
    opts = _options(core_options)
    try:
        cfg = LinearizeConfig(
            attention,
            positional,
            stage1_tokens,
            stage2_tokens,
            batch_size,
            stage1_loss=stage1_loss,
            core_options=opts,
            seed=seed,
        )
    except (ValueError, TypeError) as e:
        name, _, rest = str(e).partition(":")
        raise type(e)(f"{FLAGS.get(name, name)}:{rest}") from None
    softmax = _load_model(model, data_dir)
    split = load_char_text(block=block, data_dir=data_dir)
    own = isinstance(softmax, CausalLM)  # symformer's own model, else a HF one
    vocab = int(softmax.vocab_size if own else softmax.config.get_text_config().vocab_size)
    if split.meta["vocab_size"] != vocab:
        fail("--data-dir", f"a corpus of {split.meta['vocab_size']} characters", f"the model's {vocab} tokens")
    with output_dir(out, "--out"):
        try:
            result = linearize(softmax, split, cfg, out=out, resume=resume)
        except (ValueError, TypeError) as e:
            name, _, rest = str(e).partition(":")
            raise type(e)(f"{FLAGS.get(name, name)}:{rest}") from None
        save(result.model, out / "model")
        final = {f"stage{s}_val_loss": result.val_loss(s) for s in (0, 1, 2)}
        write_json(
            out / "results.json",
            {
                "experiment": "linearize",
                "metrics": final,
                "config": dataclasses.asdict(cfg),
                "history": result.history,
                "environment": environment(),
            },
        )
    typer.echo(json.dumps(final))
