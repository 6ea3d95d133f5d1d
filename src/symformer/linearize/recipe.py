"""Linearize a trained softmax Hugging Face model (or symformer's own models.CausalLM: linearize.causal): swap its
attention for FAVOR+ or PLASH (optionally STRING in place of RoPE), train the new attention to match the old one
(stage 1, linearize.transfer), then fine-tune low-rank adapters on the language-model loss (stage 2, linearize.lora),
and save a model that `hf.from_pretrained` (a CausalLM: causal.load_lm) reloads and whose `generate()` decodes with
constant-size states.

    from symformer import linearize
    result = linearize.linearize(model, split, linearize.LinearizeConfig(attention="plash", positional="string"),
                                 out="runs/lin")      # checkpoints there; resume=True continues a killed run
    linearize.save(result.model, "runs/lin/model")   # save_pretrained; hf.from_pretrained reloads it
                                                     # (a CausalLM: causal.save_lm; causal.load_lm reloads it)

A checkpoint (out/checkpoint.pt, written atomically every `checkpoint_every` steps and at each stage's end) holds
the student's weights, the optimizer, the batch generator and the curve, with the run's fingerprint (the config, the
model's shape, the data's size); a resume from a folder of another run is a ValueError naming `resume`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from symformer._io import save_atomic
from symformer._rng import seed_torch, seeded_generator
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.integrations.hf._common import attention_modules, family_of, text_config
from symformer.integrations.hf.attention import configure
from symformer.integrations.hf.lm import evaluate, lm_loss
from symformer.integrations.hf.positional import patch_positional
from symformer.linearize.causal import causal_loss, causal_student, check_causal_lm, save_lm
from symformer.linearize.learned_favor import LearnedFavorAttention
from symformer.linearize.lora import add_lora, merge_lora
from symformer.linearize.transfer import LOSSES, attention_parameters, capture, transfer_loss, weights_loss
from symformer.models import CausalLM
from symformer.train.checkpoint import CheckpointError, load

__all__ = ["CORES", "LinearizeConfig", "LinearizeResult", "check_model", "linearize", "save", "student_of"]

#: --attention -> the registered decoding core that stage 1 trains ("favor": FAVOR+ behind a learned per-head map,
#: linearize.learned_favor, since plain FAVOR+ has nothing to train)
CORES = {"favor": "favor_learned", "plash": "plash"}
POSITIONALS = ("rope", "string")
FORMAT = "symformer-linearize"


@dataclass(frozen=True)
class LinearizeConfig:
    """What to swap in and how long to train it.

    Args:
        attention (str): "favor" (FAVOR+ with a learned map) or "plash".
        positional (str): "rope" (the model's own) or "string" (STRING started at P = I, i.e. as that RoPE).
        stage1_tokens (int): tokens of attention transfer (steps = tokens // (batch_size * block)).
        stage2_tokens (int): tokens of LoRA fine-tuning.
        batch_size (int): sequences per step.
        lr1 (float): stage 1's AdamW learning rate.
        lr2 (float): stage 2's.
        lora_rank (int): the adapters' rank.
        stage1_loss (str): "output_mse" (LoLCATs') or "attention_ce" (Hedgehog's, for "favor" only):
            linearize.transfer's docstring.
        core_options (dict): options of the core (n_features, M, causal_block, ...); a seed is added.
        seed (int): the cores' draws, the adapters' init and the batches.
        eval_every (int): steps between validation points of the curve.
        eval_batches (int): validation batches per point.
        checkpoint_every (int): steps between checkpoints.
    """

    attention: str = "favor"
    positional: str = "rope"
    stage1_tokens: int = 100_000
    stage2_tokens: int = 100_000
    batch_size: int = 16
    lr1: float = 3e-3
    lr2: float = 1e-3
    lora_rank: int = 8
    stage1_loss: str = "output_mse"
    core_options: dict = field(default_factory=dict)
    seed: int = 0
    eval_every: int = 50
    eval_batches: int = 8
    checkpoint_every: int = 50

    def __post_init__(self):
        check_choice("attention", self.attention, tuple(CORES))
        check_choice("positional", self.positional, POSITIONALS)
        check_choice("stage1_loss", self.stage1_loss, LOSSES)
        if self.stage1_loss == "attention_ce" and self.attention != "favor":
            expected = f"'output_mse' for attention={self.attention!r} (its core forms no explicit weights)"
            fail("stage1_loss", "attention_ce", expected)
        for name in ("stage1_tokens", "stage2_tokens"):
            check_int(name, getattr(self, name), 1)
        for name in ("batch_size", "lora_rank", "eval_every", "eval_batches", "checkpoint_every"):
            check_int(name, getattr(self, name), 1)
        for name in ("lr1", "lr2"):
            check_float(name, getattr(self, name), 0.0, low_open=True)


@dataclass
class LinearizeResult:
    """The linearized model (adapters merged) and its validation curve: dicts of stage (0: the untrained swap, 1, 2),
    tokens seen in stages 1 + 2, and val_loss (nats per token)."""

    model: nn.Module
    history: list[dict] = field(default_factory=list)

    def val_loss(self, stage: int) -> float:
        """The last validation loss recorded in `stage`."""
        return [h["val_loss"] for h in self.history if h["stage"] == stage][-1]


def check_model(model: nn.Module) -> None:
    """ValueError naming what a linear core cannot take: a model outside the supported families, one configured
    already, or attention the cores cannot represent (a sliding window, a logit soft-cap, attention sinks), named
    as `hf.configure`'s attention refuses them at the forward.

    Args:
        model: a Hugging Face causal LM, or a CausalLM (linearize.causal.check_causal_lm).
    """
    if isinstance(model, CausalLM):
        check_causal_lm(model)
        return
    if family_of(model) is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        expected = "a model of a supported Llama family or a CausalLM"
        fail("model", f"{type(model).__name__} (model_type={model_type!r})", expected)
    tc = text_config(model)
    if getattr(model.config, "symformer_attention", None):
        kind = model.config.symformer_attention.get("attention")
        fail("model", f"a model with symformer attention {kind}", "a softmax model (linearize swaps its attention)")
    window = getattr(tc, "sliding_window", None)
    if window is not None and getattr(tc, "use_sliding_window", True):
        fail("sliding_window", window, "None: symformer cores attend to all earlier keys")
    if getattr(tc, "attn_logit_softcapping", None) is not None:
        fail("attn_logit_softcapping", tc.attn_logit_softcapping, "None: the cores approximate an uncapped softmax")
    if any(getattr(m, "sinks", None) is not None for m in attention_modules(model)):
        fail("s_aux", "attention sinks", "a model without sinks: the cores have no sink term in their denominator")


def _check_data(data, block_of: str = "data") -> int:
    """The sequence length of a data split (train and val TensorData of (n, block) tokens); ValueError else."""
    for part in ("train", "val"):
        d = getattr(data, part, None)
        if d is None or not hasattr(d, "x"):
            fail(block_of, type(data).__name__, "a split with train and val token windows (symformer.data)")
        if len(d) == 0:
            fail(block_of, f"an empty {part} set", "at least one window of tokens")
    return int(data.train.x.shape[-1])


def student_of(model: nn.Module, config: LinearizeConfig) -> nn.Module:
    """A copy of `model` with the linear core (and STRING, where asked) in every attention layer: the untrained swap.

    Args:
        model: the softmax model (left untouched): a HF model, or a CausalLM (rebuilt with the new cores).
        config: attention, positional, core_options and seed.
    """
    options = {"seed": config.seed, **config.core_options}
    if isinstance(model, CausalLM):
        return causal_student(model, CORES[config.attention], config.positional, options)
    student = copy.deepcopy(model)
    if config.positional == "string":
        patch_positional(student, "string", init_scale=0.0)  # P = I: exactly the model's RoPE (T2.7, T3.1)
    return configure(student, attention=CORES[config.attention], **options)


def _fingerprint(model: nn.Module, config: LinearizeConfig, data) -> dict:
    if isinstance(model, CausalLM):
        shape = {"model_type": "symformer.CausalLM", "vocab_size": model.vocab_size, **model.cfg.to_dict()}
    else:
        tc = text_config(model)
        shape = {k: getattr(tc, k, None) for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers")}
    return {"config": dataclasses.asdict(config), "model": shape, "data": [len(data.train), len(data.val)]}


def _load_checkpoint(path: Path, fingerprint: dict) -> dict | None:
    if not path.is_file():
        return None
    try:
        ck = load(path, "a linearize checkpoint")
    except CheckpointError as e:
        fail("resume", str(path), f"a linearize checkpoint ({e})")
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        fail("resume", str(path), "a checkpoint written by symformer.linearize")
    if ck.get("fingerprint") != fingerprint:
        mine, theirs = fingerprint, ck.get("fingerprint") or {}
        diff = next((k for k in mine if mine.get(k) != theirs.get(k)), "?")
        fail("resume", f"{path}, a checkpoint of another run ({diff} differs)", "the folder of this run")
    return ck


class _Run:
    """One linearize run's loop state: the curve, the checkpoint file and the batches."""

    def __init__(self, config, data, out, fingerprint, ck, own: bool):
        self.config, self.data, self.fingerprint = config, data, fingerprint
        self.lm_loss = causal_loss if own else lm_loss  # own: a CausalLM
        self.path = None if out is None else Path(out) / "checkpoint.pt"
        self.ck = ck
        self.history: list[dict] = list(ck["history"]) if ck else []
        self.block = int(data.train.x.shape[-1])

    def steps(self, tokens: int, name: str) -> int:
        per = self.config.batch_size * self.block
        if tokens < per:
            fail(name, tokens, f">= {per} tokens (one batch of {self.config.batch_size} x {self.block})")
        return tokens // per

    def point(self, model, stage: int, tokens: int) -> None:
        cfg = self.config
        val = evaluate(model, self.data.val, cfg.batch_size, max_batches=cfg.eval_batches, loss_fn=self.lm_loss)
        self.history.append({"stage": stage, "tokens": tokens, "val_loss": val})

    def save(self, model, opt, gen, stage: int, step: int) -> None:
        if self.path is None:
            return
        state = {k: v for k, v in model.state_dict().items()}
        save_atomic(
            {
                "format": FORMAT,
                "fingerprint": self.fingerprint,
                "stage": stage,
                "step": step,
                "model": state,
                "opt": None if opt is None else opt.state_dict(),
                "generator": gen.get_state(),
                "history": self.history,
            },
            self.path,
        )

    def resumed(self, stage: int, model, opt, gen) -> int:
        """The step to start `stage` at, the checkpoint's state loaded where it was written in this stage."""
        if not self.ck or self.ck["stage"] != stage:
            return 0
        model.load_state_dict(self.ck["model"])
        opt.load_state_dict(self.ck["opt"])
        gen.set_state(self.ck["generator"])
        return int(self.ck["step"])


def _stage(run: _Run, stage: int, model, params, loss_fn, steps: int, lr: float, offset: int, gen) -> None:
    """AdamW over `params` for `steps` steps (linear warm-up over 10%, cosine decay), a validation point every
    eval_every steps and at the end, a checkpoint every checkpoint_every steps and at the end."""
    cfg = run.config
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = max(1, steps // 10)

    def rate(s):
        return min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))

    start = run.resumed(stage, model, opt, gen)
    per = cfg.batch_size * run.block
    model.train()
    for step in range(start, steps):
        idx = torch.randint(0, len(run.data.train), (cfg.batch_size,), generator=gen)
        for group in opt.param_groups:  # the schedule is a function of the step: a resumed run needs no state for it
            group["lr"] = lr * rate(step)
        loss = loss_fn(run.data.train.x[idx], run.data.train.y[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if done % cfg.eval_every == 0 or done == steps:
            run.point(model, stage, offset + done * per)
        if done % cfg.checkpoint_every == 0 or done == steps:
            run.save(model, opt, gen, stage, done)


def _frozen_but(model: nn.Module, params: list[nn.Parameter]) -> None:
    model.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)


def _stage1(run: _Run, teacher: nn.Module, student: nn.Module, gen) -> None:
    params = attention_parameters(student)
    _frozen_but(student, params)
    teacher.eval()

    ce = run.config.stage1_loss == "attention_ce"

    def loss_fn(x, y):
        with torch.no_grad(), capture(teacher, weights=ce) as records:
            teacher(x) if isinstance(teacher, CausalLM) else teacher(input_ids=x, use_cache=False)
        return weights_loss(student, records) if ce else transfer_loss(student, records)

    steps = run.steps(run.config.stage1_tokens, "stage1_tokens")
    _stage(run, 1, student, params, loss_fn, steps, run.config.lr1, 0, gen)


def _stage2(run: _Run, student: nn.Module, gen) -> nn.Module:
    wrapped = add_lora(student, rank=run.config.lora_rank)
    params = [p for p in wrapped.parameters() if p.requires_grad]
    steps = run.steps(run.config.stage2_tokens, "stage2_tokens")
    offset = run.steps(run.config.stage1_tokens, "stage1_tokens") * run.config.batch_size * run.block
    _stage(run, 2, wrapped, params, lambda x, y: run.lm_loss(wrapped, x, y), steps, run.config.lr2, offset, gen)
    return merge_lora(wrapped)


def linearize(
    model: nn.Module, data, config: LinearizeConfig | None = None, out=None, resume: bool = False
) -> LinearizeResult:
    """Linearize a softmax causal LM (module docstring): returns the student with its adapters merged and the curve.

    Args:
        model: the trained softmax model (a Llama-family HF model, or a models.CausalLM; left untouched).
        data: a symformer.data Split of token windows (train for both stages, val for the curve), in the model's
            vocabulary.
        config: what to swap in and the stages' budgets (LinearizeConfig()).
        out: a folder for the checkpoint (None: no checkpoints).
        resume: continue from out/checkpoint.pt (which must be this run's); False starts afresh.
    """
    config = LinearizeConfig() if config is None else config
    if not isinstance(config, LinearizeConfig):
        fail("config", type(config).__name__, "a LinearizeConfig", TypeError)
    check_model(model)
    _check_data(data)
    if out is not None:
        os.makedirs(out, exist_ok=True)
    elif resume:
        fail("resume", True, "False without an out folder to resume from")
    fingerprint = _fingerprint(model, config, data)
    ck = _load_checkpoint(Path(out) / "checkpoint.pt", fingerprint) if resume else None
    seed_torch(config.seed)
    student = student_of(model, config)
    run = _Run(config, data, out, fingerprint, ck, isinstance(model, CausalLM))
    run.steps(config.stage1_tokens, "stage1_tokens")
    run.steps(config.stage2_tokens, "stage2_tokens")
    gen = seeded_generator(config.seed)
    if ck and ck["stage"] == 3:  # finished: the merged student
        student.load_state_dict(ck["model"])
        return LinearizeResult(student.eval(), run.history)
    if not run.history:
        run.point(student, 0, 0)
    if not ck or ck["stage"] == 1:
        _stage1(run, model, student, gen)
    else:
        student.requires_grad_(False)
    student = _stage2(run, student, gen)
    run.save(student, None, gen, 3, 0)
    return LinearizeResult(student.eval(), run.history)


def save(model: nn.Module, folder) -> Path:
    """save_pretrained(folder) (safetensors): `hf.from_pretrained(cls, folder)` rebuilds the cores and rotary parts
    (in a process that imported symformer.linearize, for the "favor_learned" cores) and loads their weights. A
    CausalLM is written in its own format instead (causal.save_lm: folder/causal_lm.pt; causal.load_lm reloads it).

    Args:
        model: a linearized model (LinearizeResult.model).
        folder: where to write config.json and model.safetensors (a CausalLM: causal_lm.pt).
    """
    folder = Path(folder)
    if isinstance(model, CausalLM):
        return save_lm(model, folder)  # the file written
    model.save_pretrained(folder, safe_serialization=True)
    return folder


_ = LearnedFavorAttention  # imported for its registration ("favor_learned"), which student_of needs
