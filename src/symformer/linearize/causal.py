"""Linearizing symformer's own `models.CausalLM` (recipe.linearize takes one as it takes a HF model): the student is
the same CausalLM rebuilt from its TransformerConfig with the attention cores swapped ("favor_learned" or "plash",
its positional part kept, or STRING at P = I in place of its RoPE) and the teacher's weights copied; stage 1 captures
the teacher's MultiHeadAttention inputs (linearize.transfer), stage 2 puts peft's LoRA on q_proj/k_proj/v_proj/o_proj
(linearize.lora).

A CausalLM is saved as one file (`save_lm`, LM_FILE in a folder): its TransformerConfig as a dict, its vocabulary
size, its dtype and its state dict, written atomically and read back with torch.load(weights_only=True) by `load_lm`,
which rebuilds the model (the cores from the config: "favor_learned" is registered by importing symformer.linearize)
and loads the weights strictly; its `generate` then decodes with the cores' constant-size states.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from symformer._io import save_atomic
from symformer._validation import fail
from symformer.models import CausalLM, TransformerConfig
from symformer.train.checkpoint import CheckpointError, load

__all__ = ["FORMAT", "LM_FILE", "causal_loss", "causal_student", "check_causal_lm", "load_lm", "save_lm"]

FORMAT = "symformer-causal-lm"
VERSION = 1
#: the file save_lm writes in a folder, and load_lm looks for in one
LM_FILE = "causal_lm.pt"
#: a RoPE's options that STRING takes too (STRING(init_scale=0) is that RoPE, T2.7)
_STRING_TAKES = ("base", "pairing", "mode", "learnable", "seed", "kernel")


def check_causal_lm(model: CausalLM) -> None:
    """ValueError naming `model` unless every layer's core is an exact softmax ("softmax" or "naive"): a model with
    linear cores has nothing to transfer from.

    Args:
        model: the CausalLM to linearize.
    """
    cores = [blk.attn.core for blk in model.encoder.blocks]
    if not all(getattr(core, "exact_softmax", False) for core in cores):
        fail("model", f"a CausalLM with attention {model.cfg.attention!r}", "a softmax CausalLM (softmax or naive)")


def _positional(cfg: TransformerConfig, positional: str) -> dict:
    """TransformerConfig fields of the student's positional part: the model's own, or STRING at P = I for "string"."""
    if positional != "string":
        return {}
    if cfg.positional != "rope":
        fail("positional", "string", f"'rope' for a CausalLM with positional {cfg.positional!r} (STRING replaces RoPE)")
    extra = sorted(set(cfg.positional_kwargs) - set(_STRING_TAKES))
    if extra:
        fail("positional", f"string for a RoPE with options {extra}", f"a RoPE with options among {_STRING_TAKES}")
    return {"positional": "string", "positional_kwargs": {**cfg.positional_kwargs, "init_scale": 0.0}}


def causal_student(model: CausalLM, attention: str, positional: str, options: dict) -> CausalLM:
    """A new CausalLM with core `attention` (and STRING at P = I for positional "string") holding `model`'s weights.

    Args:
        model: the softmax CausalLM (left untouched).
        attention (str): the registered core ("favor_learned" or "plash").
        positional (str): "rope" (the model's own positional part, whichever it is) or "string".
        options (dict): the core's options (attention_kwargs).
    """
    cfg = dataclasses.replace(model.cfg, attention=attention, attention_kwargs=dict(options))
    cfg = dataclasses.replace(cfg, **_positional(model.cfg, positional))
    ref = next(model.parameters())
    student = CausalLM(cfg, model.vocab_size).to(device=ref.device, dtype=ref.dtype)
    got = student.load_state_dict(model.state_dict(), strict=False)
    for key in (*got.missing_keys, *got.unexpected_keys):  # only the swapped parts differ
        if ".attn.core." not in key and ".attn.rotary." not in key:
            raise AssertionError(f"student and teacher differ outside attention: {key}")
    if positional == "string":  # STRING's RoPE part takes the teacher's RoPE state (its learned beta, if any)
        for mine, theirs in zip(student.encoder.blocks, model.encoder.blocks, strict=True):
            mine.attn.rotary.rope.load_state_dict(theirs.attn.rotary.state_dict())
    return student


def causal_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of a CausalLM (or of peft's wrapper around one, whose adapters sit in its layers)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.loss(x, y)


def save_lm(model: CausalLM, path) -> Path:
    """Write `model` to `path` (a file; a folder gets LM_FILE in it) atomically, loadable without unpickling.

    Args:
        model: a CausalLM (a linearized one included).
        path: the file, or a folder.
    """
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path.mkdir(parents=True, exist_ok=True)
        path = path / LM_FILE
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    record = {"format": FORMAT, "version": VERSION, "config": model.cfg.to_dict(), "vocab_size": model.vocab_size}
    save_atomic({**record, "dtype": dtype, "model": model.state_dict()}, path)
    return path


def load_lm(path, name: str = "path") -> CausalLM:
    """The CausalLM that save_lm wrote (torch.load(weights_only=True), format marker checked, weights loaded strictly);
    ValueError naming `name` for anything else.

    Args:
        path: the file, or a folder holding LM_FILE.
        name (str): the argument to name in errors.

    Example:
        >>> import tempfile, torch
        >>> from symformer.models import CausalLM, TransformerConfig
        >>> lm = CausalLM(TransformerConfig(d_model=16, n_heads=2, n_layers=1), vocab_size=11).double()
        >>> with tempfile.TemporaryDirectory() as d:
        ...     again = load_lm(save_lm(lm, d))
        >>> ids = torch.randint(0, 11, (1, 5))
        >>> bool((again(ids) - lm(ids)).abs().max() == 0)
        True
    """
    path = Path(path)
    if path.is_dir():
        path = path / LM_FILE
    try:
        ck = load(path, "a CausalLM file")
    except CheckpointError as e:
        fail(name, str(path), f"a CausalLM file written by symformer.linearize.save_lm ({e})")
    if not isinstance(ck, dict) or ck.get("format") != FORMAT or ck.get("version") != VERSION:
        fail(name, str(path), f"a {FORMAT} file of version {VERSION} (symformer.linearize.save_lm)")
    dtype = getattr(torch, str(ck.get("dtype")), None)  # a name of the file's, looked up among torch's dtypes only
    if not isinstance(dtype, torch.dtype):
        fail(name, str(path), f"a {FORMAT} file with a torch dtype (it names {ck.get('dtype')!r})")
    try:
        model = CausalLM(TransformerConfig(**ck["config"]), ck["vocab_size"]).to(dtype)
        model.load_state_dict(ck["model"])
    except (KeyError, TypeError, RuntimeError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        fail(name, str(path), f"a complete {FORMAT} file ({first})")
    return model.eval()
