"""The plan of experiment `linearize`: the softmax Llama trained here from a config, the linearizing budgets and the
cores' sizes (quick or full), typed. The arms are every (attention, positional) pair of ARMS."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from symformer._validation import check_int
from symformer.integrations.hf.lm import TinyLlama

ATTENTIONS = ("favor", "plash")
POSITIONALS = ("rope", "string")
ARMS = tuple((a, p) for a in ATTENTIONS for p in POSITIONALS)


@dataclass(frozen=True)
class LinearizePlan:
    block: int  # characters per training sequence
    max_chars: int | None  # of tiny Shakespeare read (None: all of it)
    spec: TinyLlama  # the softmax Llama
    teacher_steps: int  # its training (AdamW, warm-up then cosine decay to the end)
    batch_size: int
    stage1_steps: int  # attention transfer; budgets in tokens are steps * batch_size * block
    stage2_steps: int  # LoRA on the LM loss; scratch runs get stage1_steps + stage2_steps
    lr1: float
    lr2: float
    lora_rank: int
    favor: dict  # favor_learned's options
    plash: dict  # PLASH's options
    eval_batches: int  # validation batches (of batch_size windows) at every point of every curve
    points: int  # validation points per stage
    context: int  # decoding speed and state memory after a prefill of this many tokens
    decode_tokens: int  # tokens timed after the prefill
    train: dict = field(default_factory=dict)  # attention -> its own lr1 / lr2 / lora_rank where they differ

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block

    def scaled(self, budget: int) -> "LinearizePlan":
        """The plan with budget x its stage-1 and stage-2 steps (the scratch runs get their sum)."""
        b = check_int("budget", budget, 1)
        return dataclasses.replace(self, stage1_steps=b * self.stage1_steps, stage2_steps=b * self.stage2_steps)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LinearizePlan":
        return cls(**{**d, "spec": TinyLlama(**d["spec"])})

    @classmethod
    def for_run(cls, quick: bool) -> "LinearizePlan":
        if quick:  # the plumbing end to end in seconds (CI's quick-mode test), not the numbers
            return cls(
                block=16,
                max_chars=20_000,
                spec=TinyLlama(hidden_size=16, n_layers=1, n_heads=2, n_kv_heads=1, intermediate_size=32, max_len=128),
                teacher_steps=10,
                batch_size=4,
                stage1_steps=2,
                stage2_steps=2,
                lr1=1e-2,
                lr2=1e-3,
                lora_rank=2,
                favor={"n_features": 8},
                plash={"M": 2, "D_k": 8, "causal_block": 4, "mixer_heads": 2},
                eval_batches=1,
                points=1,
                context=32,
                decode_tokens=2,
            )
        return cls(
            block=64,
            max_chars=None,
            spec=TinyLlama(hidden_size=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=192, max_len=8192),
            teacher_steps=1500,
            batch_size=16,
            stage1_steps=200,
            stage2_steps=200,
            lr1=1e-2,
            lr2=1e-3,
            lora_rank=8,
            favor={"n_features": 256, "feature_map": "hedgehog"},
            plash={"M": 8, "D_k": 32, "causal_block": 16, "mixer_heads": 2},
            eval_batches=16,
            points=4,
            context=4096,
            decode_tokens=16,
            # FAVOR+'s settings: the best of results/linearize/sweep at this budget, chosen on validation perplexity
            train={"favor": {"lr1": 3e-2, "lr2": 1e-2, "lora_rank": 16}},
        )
