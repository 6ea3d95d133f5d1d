"""Stage 1 of linearizing, attention transfer: each layer's linear attention learns to reproduce the frozen softmax
attention's output on the softmax model's own inputs.

The loss is LoLCATs' attention-transfer loss: the mean squared error between the two attention outputs (after the
output projection), summed over the layers. Hedgehog's loss (a cross-entropy between the attention weights) needs the
linear attention's weights, which FAVOR+ and PLASH never form, so the output MSE is the one both cores can use.

The inputs are captured from the softmax model by hooks on its attention modules (`capture`): each layer's
arguments by name (hidden states after the input norm, the rotary table or positions, the mask) and its output, in
one teacher forward without gradients. The attention modules are a HF model's (integrations.hf) or, for symformer's
own `models.CausalLM`, its blocks' MultiHeadAttention (`attention_layers`). Every student layer then runs on its
teacher's inputs, not on the output of the student layers below it, so the layers are independent and train in
parallel from one batch of captured inputs.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager

import torch
from torch import nn

from symformer.integrations.hf._common import attention_modules
from symformer.models import CausalLM
from symformer.models.layers import MultiHeadAttention

__all__ = ["attention_layers", "attention_parameters", "capture", "core_parts", "transfer_loss"]


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of `model` in layer order: a CausalLM's blocks' MultiHeadAttention, else a HF
    model's attention modules.

    Args:
        model: a `models.CausalLM` or a HF causal LM.
    """
    if isinstance(model, CausalLM):
        return [blk.attn for blk in model.encoder.blocks]
    return attention_modules(model)


def core_parts(attn: nn.Module) -> list[nn.Module]:
    """The parts of one attention module that stage 1 trains: its symformer core (a HF module's `symformer_core`, a
    MultiHeadAttention's `core`) and its rotary part, where present.

    Args:
        attn: one of attention_layers()'s modules.
    """
    core = attn.core if isinstance(attn, MultiHeadAttention) else getattr(attn, "symformer_core", None)
    return [p for p in (core, getattr(attn, "rotary", None)) if p is not None]


def attention_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters stage 1 trains: every attention layer's symformer core (PLASH's prototypes, psi, mixer and
    readout; favor_learned's q/k maps) and its rotary part where one has parameters (STRING's P).

    Args:
        model: a model configured with `hf.configure` (and patched with `hf.patch_positional`, optionally), or a
            CausalLM with linear cores.
    """
    return [p for attn in attention_layers(model) for part in core_parts(attn) for p in part.parameters()]


@contextmanager
def capture(model: nn.Module):
    """Hooks on every attention module of `model` for the block: yields a list that each forward fills with one
    (kwargs, output) pair per layer, in layer order (cleared by the caller between batches); positional arguments
    are kept by their names in the module's forward.

    Args:
        model: a Llama-family HF model or a CausalLM (the softmax teacher).
    """
    records: list[tuple[dict, torch.Tensor]] = []
    handles = []
    for attn in attention_layers(model):
        slot: dict = {}
        names = list(inspect.signature(attn.forward).parameters)

        def pre(module, args, kwargs, slot=slot, names=names):
            kwargs = {**dict(zip(names, args)), **kwargs}  # HF layers pass by keyword, CausalLM's blocks by position
            slot["kwargs"] = {k: v for k, v in kwargs.items() if k not in ("cache", "past_key_values", "use_cache")}

        def post(module, args, kwargs, output, slot=slot):
            records.append((slot.pop("kwargs"), output[0] if isinstance(output, tuple) else output))

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(attn.register_forward_hook(post, with_kwargs=True))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def transfer_loss(student: nn.Module, records: list[tuple[dict, torch.Tensor]]) -> torch.Tensor:
    """LoLCATs' attention-transfer loss: sum over layers of mean((student attention(x_l) - softmax attention(x_l))^2),
    x_l the teacher's input to layer l (module docstring).

    Args:
        student: the model with linear cores (its attention modules in the teacher's order).
        records: capture()'s (kwargs, output) pairs of one teacher forward.
    """
    layers = attention_layers(student)
    if len(layers) != len(records):
        raise AssertionError(f"{len(records)} captured layers for {len(layers)} student layers")
    loss = torch.zeros((), dtype=records[0][1].dtype, device=records[0][1].device)
    for attn, (kwargs, target) in zip(layers, records, strict=True):
        out = attn(**kwargs)
        out = out[0] if isinstance(out, tuple) else out
        loss = loss + torch.nn.functional.mse_loss(out, target)
    return loss
