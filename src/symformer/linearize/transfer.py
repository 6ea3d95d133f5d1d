"""Stage 1 of linearizing, attention transfer: each layer's linear attention learns to reproduce the frozen softmax
attention's output on the softmax model's own inputs.

Two losses, summed over the layers:
- "output_mse" (`transfer_loss`): LoLCATs' attention-transfer loss, the mean squared error between the two attention
  outputs (after the output projection). Both cores can use it.
- "attention_ce" (`weights_loss`): Hedgehog's (Zhang et al. 2024, "The Hedgehog & the Porcupine"), the
  cross-entropy of the linear attention's weights against the softmax weights as soft labels, -sum_j a_ij log a^_ij
  averaged over the query rows. It needs the linear attention's weights, which a core forms only where it can
  (favor_learned.attention_weights: O(N^2), at training time); PLASH never forms them, so it takes the output MSE
  only. The teacher's weights are its own: a HF model's eager attention returns them (capture switches it to
  "eager" for the block), a CausalLM's softmax core's are recomputed from the queries and keys it receives.

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

from symformer._validation import fail
from symformer.attention.softmax import naive_weights
from symformer.integrations.hf._common import attention_modules, text_config
from symformer.models import CausalLM
from symformer.models.layers import MultiHeadAttention

__all__ = [
    "LOSSES",
    "attention_layers",
    "attention_parameters",
    "capture",
    "core_parts",
    "transfer_loss",
    "weights_loss",
]

#: stage 1's losses (module docstring)
LOSSES = ("output_mse", "attention_ce")


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of `model` in layer order: a CausalLM's blocks' MultiHeadAttention, else a HF
    model's attention modules.

    Args:
        model: a `models.CausalLM` or a HF causal LM.
    """
    if isinstance(model, CausalLM):
        return [blk.attn for blk in model.encoder.blocks]
    return attention_modules(model)


def _core(attn: nn.Module) -> nn.Module | None:
    """An attention module's symformer core: a MultiHeadAttention's `core`, a HF module's `symformer_core` (None
    before configure)."""
    return attn.core if isinstance(attn, MultiHeadAttention) else getattr(attn, "symformer_core", None)


def core_parts(attn: nn.Module) -> list[nn.Module]:
    """The parts of one attention module that stage 1 trains: its symformer core (a HF module's `symformer_core`, a
    MultiHeadAttention's `core`) and its rotary part, where present.

    Args:
        attn: one of attention_layers()'s modules.
    """
    return [p for p in (_core(attn), getattr(attn, "rotary", None)) if p is not None]


def attention_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters stage 1 trains: every attention layer's symformer core (PLASH's prototypes, psi, mixer and
    readout; favor_learned's q/k maps) and its rotary part where one has parameters (STRING's P).

    Args:
        model: a model configured with `hf.configure` (and patched with `hf.patch_positional`, optionally), or a
            CausalLM with linear cores.
    """
    return [p for attn in attention_layers(model) for part in core_parts(attn) for p in part.parameters()]


@contextmanager
def capture(model: nn.Module, weights: bool = False):
    """Hooks on every attention module of `model` for the block: yields a list that each forward fills with one
    (kwargs, output) pair per layer, in layer order (cleared by the caller between batches); positional arguments
    are kept by their names in the module's forward. weights=True appends each layer's softmax weights (B, H, N, N)
    as a third item: the model runs its eager attention for the block (module docstring).

    Args:
        model: a Llama-family HF model or a CausalLM (the softmax teacher).
        weights: record the attention weights too (for weights_loss).
    """
    records: list[tuple] = []
    handles = []
    for attn in attention_layers(model):
        slot: dict = {}
        names = list(inspect.signature(attn.forward).parameters)

        def pre(module, args, kwargs, slot=slot, names=names):
            kwargs = {**dict(zip(names, args)), **kwargs}  # HF layers pass by keyword, CausalLM's blocks by position
            slot["kwargs"] = {k: v for k, v in kwargs.items() if k not in ("cache", "past_key_values", "use_cache")}

        def post(module, args, kwargs, output, slot=slot):
            out = output[0] if isinstance(output, tuple) else output
            if not weights:
                records.append((slot.pop("kwargs"), out))
                return
            w = slot.pop("weights", None) if isinstance(model, CausalLM) else output[1]
            records.append((slot.pop("kwargs"), out, w))

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(attn.register_forward_hook(post, with_kwargs=True))
        if weights and isinstance(model, CausalLM):
            handles.append(attn.core.register_forward_pre_hook(_softmax_weights_hook(slot), with_kwargs=True))
    impl = None if isinstance(model, CausalLM) or not weights else text_config(model)._attn_implementation
    if impl is not None and impl != "eager":
        model.set_attn_implementation("eager")  # the one implementation that returns its weights
    try:
        yield records
    finally:
        for h in handles:
            h.remove()
        if impl is not None and impl != "eager":
            model.set_attn_implementation(impl)


def _softmax_weights_hook(slot: dict):
    """A pre-hook on a CausalLM's softmax core that puts softmax(scale q k^T) (causal) into slot["weights"]."""

    def hook(module, args, kwargs):
        q, k = args[0], args[1]
        if kwargs.get("attn_mask") is not None or not kwargs.get("is_causal", False):
            fail("teacher", "a forward with a mask or without is_causal", "a plain causal forward (stage 1)")
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped-query keys per query head
        slot["weights"] = naive_weights(q, k, is_causal=True, scale=kwargs.get("scale"))

    return hook


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


def weights_loss(student: nn.Module, records: list[tuple]) -> torch.Tensor:
    """Hedgehog's attention-transfer loss: sum over layers of the mean over query rows of -sum_j a_ij log a^_ij, a
    the teacher's softmax weights on its input x_l, a^ the student core's weights (attention_weights) on the queries
    and keys its layer forms from x_l (module docstring).

    Args:
        student: the model with linear cores that form their weights (favor_learned).
        records: capture(teacher, weights=True)'s (kwargs, output, weights) of one teacher forward.
    """
    layers = attention_layers(student)
    if len(layers) != len(records):
        raise AssertionError(f"{len(records)} captured layers for {len(layers)} student layers")
    if any(len(r) != 3 or r[2] is None for r in records):
        fail(
            "records", "records without attention weights", "capture(teacher, weights=True)'s (kwargs, output, weights)"
        )
    loss = torch.zeros((), dtype=records[0][1].dtype, device=records[0][1].device)
    for attn, (kwargs, _, target) in zip(layers, records, strict=True):
        core = _core(attn)
        if not hasattr(core, "attention_weights"):
            expected = f"'output_mse' for a {type(core).__name__} core (it forms no explicit weights)"
            fail("stage1_loss", "attention_ce", expected)
        seen: dict = {}
        handle = core.register_forward_pre_hook(
            lambda m, a, kw, seen=seen: seen.update(q=a[0], k=a[1], scale=kw.get("scale")), with_kwargs=True
        )
        try:
            attn(**kwargs)
        finally:
            handle.remove()
        a = core.attention_weights(seen["q"], seen["k"], seen["scale"])
        logs = a.clamp_min(torch.finfo(a.dtype).tiny).log()
        loss = loss - (target.to(a.dtype) * logs).sum(-1).mean().to(loss.dtype)
    return loss
