"""The symmetries outside attention, one component each: positive rescaling of an MLP's hidden units
(`MLPScaling`: ReLU FFNs, and gated MLPs down(act(gate x) * up x), linear in the up branch), per-expert rescaling of
fused mixture-of-experts weights (`ExpertScaling`), and `FusedRows`, a parameter whose rows hold several
projections: the other components act on its row blocks and it puts them back together.
"""

from __future__ import annotations

import torch
from torch import nn

from symformer.teleport.component import Component, row_sq, vec_sq, wide


class MLPScaling(Component):
    """up rows <- s rows (and bias), down columns <- columns / s for s > 0 per hidden unit: relu(s z) = s relu(z),
    and a gated MLP's product is linear in its up branch. `mlp` has `up` and `down` nn.Linear layers.

    Args:
        mlp (nn.Module): a ReLU FFN down(relu(up x)) or a gated MLP down(act(gate x) * up x), with `up` (h, d) and
            `down` (d, h) nn.Linear layers.

    Examples:
        >>> import torch
        >>> from symformer.models import FeedForward
        >>> from symformer.teleport import MLPScaling, SymmetryGroup
        >>> ffn = FeedForward(d_model=4, d_ff=16, activation="relu").double()
        >>> x = torch.randn(3, 4, dtype=torch.float64)
        >>> before = ffn(x)
        >>> group = SymmetryGroup([MLPScaling(ffn)])
        >>> g = group.random(torch.Generator().manual_seed(0))
        >>> g.ffn[0].shape, bool((g.ffn[0] > 0).all())  # one positive scale per hidden unit
        (torch.Size([16]), True)
        >>> group.apply(ffn, g)
        >>> torch.allclose(ffn(x), before)
        True
    """

    kind, rank, sum_rank, switch = "ffn", 3, 1, "ffn"

    def __init__(self, mlp):
        self.mlp, self.up, self.down = mlp, mlp.up, mlp.down

    @property
    def width(self) -> int:
        return self.up.out_features

    def parameters(self):
        return [self.up.weight, self.down.weight] + ([self.up.bias] if self.up.bias is not None else [])

    def identity(self, shape, dtype):
        return torch.ones(*shape, self.width, dtype=dtype)

    def random(self, shape, gen, dtype, scale):
        return torch.exp(scale * torch.randn(*shape, self.width, generator=gen, dtype=dtype))

    def near_identity(self, shape, alpha, gen, dtype):
        return 1 + alpha * (2 * torch.rand(*shape, self.width, generator=gen, dtype=dtype) - 1)

    def inverse(self, x):
        return 1 / x

    def weights(self, x, src, out):
        if x is None:
            return
        s = x.to(wide(self.up.weight).dtype)
        out[id(self.up.weight)] = wide(src[id(self.up.weight)]) * s[:, None]
        if self.up.bias is not None:
            out[id(self.up.bias)] = wide(src[id(self.up.bias)]) * s
        out[id(self.down.weight)] = wide(src[id(self.down.weight)]) / s[None, :]

    def grads(self, x, src, out):
        if x is None:
            return
        s = x.to(wide(self.up.weight).dtype)
        for par, fac in ((self.up.weight, 1 / s[:, None]), (self.up.bias, 1 / s), (self.down.weight, s[None, :])):
            t = None if par is None else src.get(id(par))
            if t is not None:
                out[id(par)] = wide(t) * fac.to(wide(t).dtype)

    def add_sq_norms(self, total, x, grads):
        if x is None:
            return total
        s = x.to(torch.float64)
        ru = row_sq(grads.get(id(self.up.weight))) + vec_sq(grads.get(id(self.up.bias)))
        gd = grads.get(id(self.down.weight))
        rd = 0 if gd is None else gd.to(torch.float64).pow(2).sum(0)
        return total + (ru / s**2).sum(-1) + (rd * s**2).sum(-1)


class ExpertScaling(Component):
    """Mixture-of-experts MLPs stored as two 3-D weights (HF Mixtral, Qwen3-MoE): expert e computes
    down[e] (act(x gate[e]^T) * (x up[e]^T)) with gate_up[e] = cat(gate[e], up[e]) of shape (2 I, d) and down[e] of
    shape (d, I). The product is linear in the up branch, so up rows <- s rows, down columns <- columns / s
    (any s != 0 per expert and hidden unit; the router never sees these weights) keeps every output. 2-D weights
    (2 I, d) and (d, I) are one such MLP (Phi-3's fused gate_up_proj Linear).

    Args:
        gate_up (E, 2 I, d): the experts' [gate; up] rows (or (2 I, d) for one MLP).
        down (E, d, I): the experts' down projections (or (d, I)).

    Examples:
        >>> import torch
        >>> import torch.nn.functional as F
        >>> from symformer.teleport import ExpertScaling, SymmetryGroup
        >>> E, I, d = 2, 3, 4
        >>> gate_up = torch.nn.Parameter(torch.randn(E, 2 * I, d, dtype=torch.float64))
        >>> down = torch.nn.Parameter(torch.randn(E, d, I, dtype=torch.float64))
        >>> def experts(x):  # every expert on x (n, d): down[e] (silu(x gate[e]^T) * (x up[e]^T)), (E, n, d)
        ...     g, u = (x @ gate_up.transpose(-1, -2)).split(I, dim=-1)
        ...     return (F.silu(g) * u) @ down.transpose(-1, -2)
        >>> x = torch.randn(5, d, dtype=torch.float64)
        >>> before = experts(x)
        >>> group = SymmetryGroup([ExpertScaling(gate_up, down)])
        >>> group.apply(torch.nn.ParameterList([gate_up, down]), group.random(torch.Generator().manual_seed(0)))
        >>> torch.allclose(experts(x), before)
        True
    """

    kind, rank, sum_rank, switch = "experts", 5, 5, "ffn"

    def __init__(self, gate_up: nn.Parameter, down: nn.Parameter):
        self.gate_up, self.down = gate_up, down

    @property
    def shape(self) -> tuple[int, ...]:
        """(n_experts, I), or (I,) for 2-D weights: the shape of a scaling."""
        return (*self.down.shape[:-2], int(self.down.shape[-1]))

    def parameters(self):
        return [self.gate_up, self.down]

    def identity(self, shape, dtype):
        return torch.ones(*shape, *self.shape, dtype=dtype)

    def random(self, shape, gen, dtype, scale):
        return torch.exp(scale * torch.randn(*shape, *self.shape, generator=gen, dtype=dtype))

    def near_identity(self, shape, alpha, gen, dtype):
        return 1 + alpha * (2 * torch.rand(*shape, *self.shape, generator=gen, dtype=dtype) - 1)

    def inverse(self, x):
        return 1 / x

    def weights(self, x, src, out):
        if x is None:
            return
        gu, dn, i = wide(src[id(self.gate_up)]), wide(src[id(self.down)]), self.shape[-1]
        s = x.to(gu.dtype)
        out[id(self.gate_up)] = torch.cat((gu[..., :i, :], gu[..., i:, :] * s[..., None]), -2)
        out[id(self.down)] = dn / s[..., None, :]

    def grads(self, x, src, out):
        if x is None:
            return
        s, i = x.to(wide(self.gate_up).dtype), self.shape[-1]
        if src.get(id(self.gate_up)) is not None:  # up-row gradients / s, down-column gradients * s
            t = wide(src[id(self.gate_up)])
            out[id(self.gate_up)] = torch.cat((t[..., :i, :], t[..., i:, :] / s[..., None].to(t.dtype)), -2)
        if src.get(id(self.down)) is not None:
            t = src[id(self.down)]
            out[id(self.down)] = wide(t) * s[..., None, :].to(wide(t).dtype)

    def add_sq_norms(self, total, x, grads):
        if x is None:
            return total
        s2, i, dims = x.to(torch.float64) ** 2, self.shape[-1], tuple(range(-len(self.shape), 0))
        gu, gd = grads.get(id(self.gate_up)), grads.get(id(self.down))
        if gu is not None:  # squared norms of the up rows (n_experts, d_expert); the gate rows do not move
            total = total + (row_sq(gu[..., i:, :]) / s2).sum(dims) + row_sq(gu[..., :i, :]).sum()
        if gd is not None:  # of the down columns
            total = total + (gd.to(torch.float64).pow(2).sum(-2) * s2).sum(dims)
        return total


class FusedRows(Component):
    """A parameter whose rows hold the weights of several projections (Phi-3's qkv_proj: blocks [W_Q; W_K; W_V];
    GPT-NeoX's query_key_value: [q_h; k_h; v_h] head by head). `rows[j]` indexes projection j's rows in `param`;
    `blocks[j]` is what the other components read as that projection's weight (a tensor whose id is a stable key,
    refreshed from `param` before each action, so training between teleports is seen). A block of consecutive rows
    (Phi-3) is a view of `param`, so the blocks cost no memory; head-interleaved rows (NeoX) cannot be one 2-D view
    and are copied. The group's parameters(), gradient dicts and transformed() hold `param`: gradients are split into
    blocks before the actions and the blocks' results merged after (the last stage). `passive`: blocks no component
    acts on (MLA's latent rows of kv_a_proj_with_mqa), merged back as they are.

    Args:
        param (nn.Parameter): the fused parameter, (R, ...) with R rows.
        rows (list[Tensor]): int64 row indices of each projection; together a partition of the R rows.
        passive (tuple[int, ...]): the blocks no component acts on.

    Examples:
        >>> import torch
        >>> from symformer.teleport import FusedRows
        >>> w = torch.nn.Parameter(torch.randn(6, 4))
        >>> fused = FusedRows(w, [torch.arange(0, 2), torch.arange(2, 6)])  # [W_a; W_b]
        >>> [tuple(b.shape) for b in fused.blocks], fused.blocks[0].data_ptr() == w.data_ptr()  # views of w
        ([(2, 4), (4, 4)], True)
        >>> torch.equal(fused.merge(fused.split(w.detach())), w.detach())
        True
    """

    kind, rank, sum_rank, stage = "fused", 6, 2, 2
    factor = False

    def __init__(self, param: nn.Parameter, rows: list[torch.Tensor], passive: tuple[int, ...] = ()):
        self.param, self.rows, self.passive = param, rows, tuple(passive)
        self._index = [_as_slice(r) for r in rows]
        self.blocks = [param.detach()[i] for i in self._index]
        self._order = torch.argsort(torch.cat(rows))  # the rows partition param's: cat(blocks)[order] = param

    def parameters(self):
        return [self.param]

    def views(self):
        return list(self.blocks)

    def sync(self) -> None:
        for b, i in zip(self.blocks, self._index, strict=True):
            b.data = self.param.detach()[i]  # same tensor object (its id keys the group's dicts), current values

    def split(self, t: torch.Tensor) -> list[torch.Tensor]:
        return [t[r.to(t.device)] for r in self.rows]

    def merge(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The inverse of split (differentiable: Zhao's ascent goes through it)."""
        return torch.cat(parts)[self._order.to(parts[0].device)]

    def prepare(self, src, grad):
        if not grad:
            self.sync()
            src.update({id(b): b for b in self.blocks})
        elif src.get(id(self.param)) is not None:
            src.update({id(b): t for b, t in zip(self.blocks, self.split(src[id(self.param)]), strict=True)})

    def _collect(self, src, out) -> None:
        """The blocks' results (each rounded to its dtype) and the unmoved blocks as they are, under `param`."""
        keys = [id(b) for b in self.blocks]
        if any(k in out for k in keys):
            out[id(self.param)] = self.merge([out.pop(k).to(src[k].dtype) if k in out else src[k] for k in keys])

    def weights(self, x, src, out):
        self._collect(src, out)

    def grads(self, x, src, out):
        self._collect(src, out)

    def add_sq_norms(self, total, x, grads):
        """The rows no component acts on: the same for every candidate."""
        for t in (grads.get(id(self.blocks[j])) for j in self.passive):
            total = total + (0 if t is None else t.to(torch.float64).pow(2).sum())
        return total


def _as_slice(rows: torch.Tensor) -> slice | torch.Tensor:
    """Consecutive row indices as a slice (indexing then gives a view), any others as they are (a copy)."""
    start = int(rows[0]) if rows.numel() else 0
    return slice(start, start + rows.numel()) if torch.equal(rows, torch.arange(start, start + rows.numel())) else rows


__all__ = ["ExpertScaling", "FusedRows", "MLPScaling"]
