"""Stage 1 of linearizing, attention transfer: each layer's linear attention learns to reproduce the frozen softmax
attention's output on the softmax model's own inputs.

The loss is LoLCATs' attention-transfer loss: the mean squared error between the two attention outputs (after the
output projection), summed over the layers. Hedgehog's loss (a cross-entropy between the attention weights) needs the
linear attention's weights, which FAVOR+ and PLASH never form, so the output MSE is the one both cores can use.

The inputs are captured from the softmax model by hooks on its attention modules (`capture`): each layer's keyword
arguments (hidden states after the input norm, the rotary table, the mask, the positions) and its output, in one
teacher forward without gradients. Every student layer then runs on its teacher's inputs, not on the output of the
student layers below it, so the layers are independent and train in parallel from one batch of captured inputs.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from symformer.integrations.hf._common import attention_modules

__all__ = ["attention_parameters", "capture", "transfer_loss"]


def attention_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters stage 1 trains: every attention layer's symformer core (PLASH's prototypes, psi, mixer and
    readout; favor_learned's q/k maps) and its rotary part where one was patched in (STRING's P).

    Args:
        model: a model configured with `hf.configure` (and patched with `hf.patch_positional`, optionally).
    """
    out: list[nn.Parameter] = []
    for attn in attention_modules(model):
        for part in (getattr(attn, "symformer_core", None), getattr(attn, "rotary", None)):
            if part is not None:
                out += list(part.parameters())
    return out


@contextmanager
def capture(model: nn.Module):
    """Hooks on every attention module of `model` for the block: yields a list that each forward fills with one
    (kwargs, output) pair per layer, in layer order (cleared by the caller between batches).

    Args:
        model: a Llama-family HF model (the softmax teacher).
    """
    records: list[tuple[dict, torch.Tensor]] = []
    handles = []
    for attn in attention_modules(model):
        slot: dict = {}

        def pre(module, args, kwargs, slot=slot):
            if args:  # the decoder layers pass everything by keyword; positional hidden states are kept too
                kwargs = {"hidden_states": args[0], **kwargs}
            slot["kwargs"] = {k: v for k, v in kwargs.items() if k not in ("cache", "past_key_values", "use_cache")}

        def post(module, args, kwargs, output, slot=slot):
            records.append((slot.pop("kwargs"), output[0]))

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
    layers = attention_modules(student)
    if len(layers) != len(records):
        raise AssertionError(f"{len(records)} captured layers for {len(layers)} student layers")
    loss = torch.zeros((), dtype=records[0][1].dtype, device=records[0][1].device)
    for attn, (kwargs, target) in zip(layers, records, strict=True):
        out = attn(**kwargs)[0]
        loss = loss + torch.nn.functional.mse_loss(out, target)
    return loss
