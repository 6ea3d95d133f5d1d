"""One kind of symmetry of a model's weights (`Component`), the attention layer the attention kinds act on
(`AttentionSite`), and the tensor helpers they share. A model's group (groups.SymmetryGroup) is the product of its
components; the kinds themselves are in attention_parts.py (Q/K, V/O, head permutations, q/k-norm scalings) and
weight_parts.py (MLP and expert rescaling, fused-row blocks).

Layout: paper `x W` with W_i in R^{d x d_h}; here every projection is an nn.Linear (weight out x in, head h owning
output features h*Dh:(h+1)*Dh of q/k/v and the same input features of o).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from symformer.teleport.qk_groups import QKGroup


@dataclass
class AttentionSite:
    """One attention layer: `module` has q_proj, k_proj, v_proj, o_proj, n_heads (query heads), head_dim and rotary
    (v_proj = o_proj = None: a site without values, MLA's rope blocks); `qk` is the Q/K group its rotary part allows
    (qk_groups.qk_group_for). Grouped-query attention: `kv_heads` key/value heads, query head h = g r + j reading key
    head g (r = n_heads / kv_heads, HF's repeat_kv); every per-head factor is then per key head (q_h^T U_g^T M
    U_g^{-T} k_g = q_h^T M k_g needs U_g shared by the r query heads of key head g, and V_g by those reading value
    head g).

    Args:
        name (str): the layer's name in messages (its dotted name in the model).
        module (nn.Module): the layer: q_proj, k_proj, v_proj, o_proj (nn.Linear, heads contiguous in the output
            features), n_heads, head_dim and rotary.
        qk (QKGroup): the Q/K group its rotary part allows.
        kv_heads (int | None): key/value heads under grouped-query attention (None: n_heads).

    Examples:
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2, positional="rope")
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))
        >>> site.qk.kind, site.n_heads, site.head_dim
        ('h', 2, 4)
        >>> gqa = AttentionSite("attn", mha, site.qk, kv_heads=1)  # both query heads read key head 0
        >>> gqa.n_heads, gqa.query_heads, gqa.groups
        (1, 2, 2)
    """

    name: str
    module: nn.Module
    qk: QKGroup
    kv_heads: int | None = None

    @property
    def n_heads(self) -> int:
        """Number of group factors per layer: key heads (= query heads without GQA)."""
        return self.module.n_heads if self.kv_heads is None else self.kv_heads

    @property
    def query_heads(self) -> int:
        return self.module.n_heads

    @property
    def groups(self) -> int:
        """Query heads per key head (1 without GQA)."""
        return self.query_heads // self.n_heads

    @property
    def head_dim(self) -> int:
        return self.module.head_dim


class Component:
    """One kind of symmetry acting on some of a model's tensors. The element of a group holds one factor per
    component (GroupElement.parts[kind]); None is the identity wherever a factor is accepted.

    Orders (kept from the recorded runs, so the same seed draws the same elements and sums round the same way):
    `rank`, the kinds' draw order (random, sample draw kind by kind); `sum_rank`, the order in which the candidates'
    squared norms are added up; `stage`, the order of the actions (factors, then head permutations: an element is
    perm o factors; then fused rows put back together). `switch`: the random()/sample() flag ("ffn", "permute")
    without which the kind is left at the identity. `factor`: whether elements carry a factor for it at all.

    Examples:
        A kind of one's own: y = b(a(x)) with a and b linear, so a <- s a, b <- b / s keeps y for every s != 0.

        >>> import torch
        >>> from symformer.teleport import Component, SymmetryGroup
        >>> class Rescale(Component):
        ...     kind = "rescale"
        ...     def __init__(self, a, b):
        ...         self.a, self.b = a, b
        ...     def parameters(self):
        ...         return [self.a.weight, self.b.weight]
        ...     def identity(self, shape, dtype):
        ...         return torch.ones(shape, dtype=dtype)
        ...     def random(self, shape, gen, dtype, scale):
        ...         return torch.exp(scale * torch.randn(shape, generator=gen, dtype=dtype))
        ...     def weights(self, x, src, out):  # theta <- x theta
        ...         out[id(self.a.weight)] = src[id(self.a.weight)] * x
        ...         out[id(self.b.weight)] = src[id(self.b.weight)] / x
        >>> a, b = torch.nn.Linear(3, 4, bias=False).double(), torch.nn.Linear(4, 2, bias=False).double()
        >>> model, x = torch.nn.Sequential(a, b), torch.randn(5, 3, dtype=torch.float64)
        >>> before, w = model(x), a.weight.detach().clone()
        >>> group = SymmetryGroup([Rescale(a, b)])
        >>> group.apply(model, group.random(torch.Generator().manual_seed(0)))
        >>> torch.allclose(model(x), before), torch.allclose(a.weight, w)  # same function, other weights
        (True, False)
    """

    kind = ""
    rank = 0
    sum_rank = 0
    stage = 0
    switch: str | None = None
    factor = True
    permutes_heads = False
    site: AttentionSite | None = None

    # ---- what it acts on
    def parameters(self) -> list[torch.Tensor]:
        """The tensors it acts on (a row block of a fused parameter stands for its rows: FusedRows)."""
        return []

    def views(self) -> list[torch.Tensor]:
        """Tensors standing in for rows of a parameter (FusedRows.blocks), never parameters of the group."""
        return []

    def dependent_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters the component's group depends on (STRING's P, ESPR's generators)."""
        return []

    def refresh(self, positions: torch.Tensor | None) -> None:
        """Recompute what depends on learned rotations (the group is the stabiliser of their current values)."""

    # ---- elements; shape: leading dims (() for one element, (n,) for n candidates)
    def identity(self, shape: tuple[int, ...], dtype) -> torch.Tensor | None:
        """The identity factor.

        Args:
            shape (tuple[int, ...]): leading dims (() for one element, (n,) for n candidates).
            dtype (torch.dtype): the factor's dtype.

        Returns:
            x (Tensor | None): the factor (*shape, ...), or None where the kind has none.
        """
        return None

    def random(self, shape: tuple[int, ...], gen: torch.Generator, dtype, scale: float) -> torch.Tensor | None:
        """A generic element (invariance checks).

        Args:
            shape (tuple[int, ...]): leading dims.
            gen (torch.Generator): the draw.
            dtype (torch.dtype): the factor's dtype.
            scale (float): spread around the identity.

        Returns:
            x (Tensor | None): the factor (*shape, ...).
        """
        return self.identity(shape, dtype)

    def near_identity(self, shape: tuple[int, ...], alpha: float, gen: torch.Generator, dtype) -> torch.Tensor | None:
        """A candidate of Alg. 1 (Sec. 4, eq. (14)): within radius alpha of the identity.

        Args:
            shape (tuple[int, ...]): leading dims ((n,) for n candidates).
            alpha (float): the radius, in (0, 1).
            gen (torch.Generator): the draw.
            dtype (torch.dtype): the factor's dtype.

        Returns:
            x (Tensor | None): the factors (*shape, ...).
        """
        return self.identity(shape, dtype)

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def reindex(self, x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
        """x re-indexed by its layer's key-head permutation (the inverse of perm o x is x^{-1}[perm] then perm^{-1})."""
        return x

    def coefficients(self) -> torch.Tensor | None:
        """Zero coordinates of the identity in the kind's Lie algebra (Zhao et al.'s ascent), None: not ascended."""
        return None

    def from_coeffs(self, c: torch.Tensor) -> torch.Tensor:
        """The element at coordinates c (differentiable in c)."""
        raise NotImplementedError

    # ---- actions: src maps id(tensor) -> its value (weights) or its gradient-like tensor (gradients, possibly
    # missing); results go to out in float32 at least, rounded once by the group to the dtype of src's entry
    def prepare(self, src: dict[int, torch.Tensor], grad: bool) -> None:
        """Before any action: entries the others read (FusedRows: the row blocks' current values or gradients)."""

    def weights(self, x, src: dict[int, torch.Tensor], out: dict[int, torch.Tensor]) -> None:
        """theta <- x theta on this kind's tensors (differentiable in x).

        Args:
            x (Tensor | None): this component's factor (None: the identity).
            src (dict[int, Tensor]): id(tensor) -> its current value.
            out (dict[int, Tensor]): id(tensor) -> its new value, written here in float32 at least.
        """

    def grads(self, x, src: dict[int, torch.Tensor], out: dict[int, torch.Tensor]) -> None:
        """The gradient at x theta from the gradient at theta (loss invariant, action linear: G -> A^{-T} G).

        Args:
            x (Tensor | None): this component's factor (None: the identity).
            src (dict[int, Tensor]): id(tensor) -> its gradient-like tensor (entries may be missing).
            out (dict[int, Tensor]): id(tensor) -> the tensor at x theta, written here.
        """

    def add_sq_norms(self, total, x, grads: dict[int, torch.Tensor]):
        """total + this kind's share of ||grad at x_i theta||^2 for each candidate i (leading dim of x), in float64.

        Args:
            total (Tensor | float): the sum so far, (M,) or 0.0.
            x (Tensor | None): the candidates' factors, leading dim M.
            grads (dict[int, Tensor]): id(tensor) -> its gradient.

        Returns:
            total (Tensor | float): total plus this kind's share, (M,).
        """
        return total


# ---------------------------------------------------------------- shared tensor helpers
def wide(t: torch.Tensor) -> torch.Tensor:
    """t in float32 at least: a 16-bit model's action is computed in float32 from its weights and rounded back
    once (a product of 16-bit factors would round at every step, and torch.linalg.inv has no 16-bit kernel)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def heads_rows(w: torch.Tensor, h: int) -> torch.Tensor:
    return w.reshape(h, -1, *w.shape[1:])  # (H*Dh, ...) -> (H, Dh, ...)


def expand(a: torch.Tensor, r: int) -> torch.Tensor:
    """Per key head (..., H_kv, D, D) -> per query head (..., H, D, D) (query head g r + j reads key head g)."""
    return a if r == 1 else a.repeat_interleave(r, dim=-3)


def query_perm(p: torch.Tensor | None, r: int) -> torch.Tensor | None:
    """A permutation of key heads as a permutation of query heads (each key head's r query heads move along)."""
    return p if p is None or r == 1 else (p[:, None] * r + torch.arange(r, device=p.device)).flatten()


def permute_heads(t: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    """Per-head weights (H Dh, ...) (or (H,)) with their heads permuted (new head i = old head perm[i])."""
    return t if perm is None else heads_rows(t, perm.shape[0])[perm].reshape(t.shape)


def group_sum(s, hk: int):
    """Per query head (H, D, D) Gram matrices summed over the query heads of each key head -> (H_kv, D, D)."""
    return s if isinstance(s, int) or s.shape[0] == hk else s.reshape(hk, -1, *s.shape[-2:]).sum(1)


def rows_action(lin, a: torch.Tensor, heads: int, src: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Rows of every head of src[lin.weight] / src[lin.bias] multiplied by a (heads, D, D), in float32 at least."""
    out = {}
    for par in (lin.weight, lin.bias):
        t = None if par is None else src.get(id(par))
        if t is None:
            continue
        rows = heads_rows(wide(t), heads)
        a = a.to(rows.dtype)
        r = a @ rows if t.ndim == 2 else (a @ rows[..., None])[..., 0]
        out[id(par)] = r.reshape(t.shape)
    return out


def gram_rows(lin, grads: dict[int, torch.Tensor], h: int):
    """Per head Gram matrix G G^T of the gradient's rows (bias as one more column), float64 (H, Dh, Dh); 0 without."""
    gw = None if lin is None else grads.get(id(lin.weight))
    if gw is None:
        return 0
    rows = heads_rows(gw.to(torch.float64), h)  # (H, Dh, d)
    gb = None if lin.bias is None else grads.get(id(lin.bias))
    if gb is not None:
        rows = torch.cat((rows, heads_rows(gb.to(torch.float64), h)[..., None]), dim=-1)
    return rows @ rows.transpose(-1, -2)


def inner(a: torch.Tensor, s) -> torch.Tensor | float:
    """<a, s> over the last two dims, summed over heads: a (..., H, D, D), s (H, D, D) -> (...)."""
    if isinstance(s, int):
        return 0.0
    return (a * s).sum((-1, -2, -3))


def row_sq(t):
    return 0 if t is None else t.to(torch.float64).pow(2).sum(-1)


def vec_sq(t):
    return 0 if t is None else t.to(torch.float64).pow(2)


def eye_factors(dim: int, shape: tuple[int, ...], dtype) -> torch.Tensor:
    """The identity of a per-head factor: (*shape, heads..., dim, dim) from shape = (..., heads)."""
    return torch.eye(dim, dtype=dtype).expand(*shape, -1, -1).clone()


__all__ = ["AttentionSite", "Component"]
