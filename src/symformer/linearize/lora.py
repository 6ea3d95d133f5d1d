"""Stage 2 of linearizing: low-rank adapters (LoRA) on the attention projections, trained on the language-model loss,
through `peft` (the `hf` extra), which reaches a HF model's projections and symformer's own CausalLM's alike (its
MultiHeadAttention's q_proj/k_proj/v_proj/o_proj are nn.Linear); merged into the weights before the model is saved,
so the saved model reloads without peft."""

from __future__ import annotations

from torch import nn

from symformer._validation import check_int, fail
from symformer.linearize.transfer import attention_layers, core_parts

__all__ = ["PROJECTIONS", "add_lora", "merge_lora", "require_peft"]

#: the attention projections of the Llama family that get adapters
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def require_peft():
    """The peft module, or an ImportError naming the extra."""
    try:
        import peft  # optional dependency: imported on use
    except ImportError as e:  # pragma: no cover - peft is in the hf extra
        raise ImportError("linearize stage 2 needs peft: pip install 'symformer[hf]'") from e
    return peft


def add_lora(model: nn.Module, rank: int = 8, alpha: float = 16.0, train_cores: bool = True) -> nn.Module:
    """`model` wrapped by peft with LoRA adapters of `rank` on q/k/v/o of every attention layer; the adapters train,
    and so do the symformer cores and rotary parts where `train_cores` (stage 1's parameters); the rest is frozen.

    Args:
        model: a configured HF model (hf.configure) or a CausalLM with linear cores.
        rank (int): the adapters' rank r.
        alpha (float): LoRA's scaling numerator (the update is alpha / r * B A).
        train_cores (bool): keep training the cores' and rotary parts' parameters beside the adapters.
    """
    peft = require_peft()
    check_int("rank", rank, 1)
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    if not set(PROJECTIONS) <= names:
        fail("model", f"attention projections {sorted(names & set(PROJECTIONS))}", f"all of {PROJECTIONS}")
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(PROJECTIONS), bias="none")
    wrapped = peft.get_peft_model(model, cfg)
    if train_cores:
        for attn in attention_layers(model):
            for part in core_parts(attn):
                part.requires_grad_(True)
    return wrapped


def merge_lora(wrapped: nn.Module) -> nn.Module:
    """The base model with the adapters folded into q/k/v/o (W + alpha / r * B A) and the peft wrappers removed.

    Args:
        wrapped: what add_lora returned.
    """
    return wrapped.merge_and_unload()
