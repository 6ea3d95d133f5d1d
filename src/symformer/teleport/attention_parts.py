"""The symmetries of one attention layer (paper Sec. 3, G_Att = S_h x (G_QK x GL(d_h))^h), one component each:

  QKFactor        Q rows <- U rows, K rows <- U^{-T} rows per key head, U in the layer's Q/K group (qk_groups;
                  none / additive PE: GL(d_h), eq. (5)-(6); RoPE: H(d_h), eq. (9); STRING, ESPR: ours);
  VOFactor        V rows <- V rows, O columns <- columns V^{-1} (GL(d_h): positions never touch values; diagonal
                  where an output gate multiplies the attention output, qk_groups.DiagonalGroup);
  HeadPermutation the heads permuted (new head i = old head perm[i]) with everything that is per head;
  NormScaling     layers with query/key norms before the rotation (Qwen3 per head, OLMo 2 over all heads), whose
                  W_Q / W_K no U passes through (TrivialGroup): w_q <- d w_q, w_k <- w_k / d for every d > 0 constant
                  on each block of the rotary group's diagonal (qk_groups.diagonal_blocks), since diag(d) commutes with
                  each relative rotation M: (M_i d n_q)^T (M_j n_k / d) = n_q^T M_i^T M_j n_k.
Biases of Q/K/V move like their rows; the output bias is fixed.
"""

from __future__ import annotations

import torch

from symformer._validation import fail
from symformer.teleport.component import (
    AttentionSite,
    Component,
    expand,
    eye_factors,
    gram_rows,
    group_sum,
    inner,
    permute_heads,
    query_perm,
    rows_action,
    vec_sq,
    wide,
)
from symformer.teleport.qk_groups import QKGroup, diagonal_blocks, qk_group_for


def _lins(*lins) -> list[torch.Tensor]:
    return [p for lin in lins if lin is not None for p in (lin.weight, lin.bias) if p is not None]


class QKFactor(Component):
    """U per key head in site.qk: q -> U q (the query heads of key head g share U_g), k -> U^{-T} k. follows_rotary:
    whether site.qk is the rotary part's group, recomputed when learned rotations move (False: a fixed group, e.g.
    the TrivialGroup of a layer whose Q/K symmetry acts on its norm weights).

    Args:
        site (AttentionSite): the layer.
        follows_rotary (bool): recompute site.qk from the rotary part when its parameters move.

    Examples:
        >>> import torch
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite, QKFactor, SymmetryGroup
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2, positional="rope").double()
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))  # H(d_h): RoPE's group
        >>> x, pos = torch.randn(1, 5, 8, dtype=torch.float64), torch.arange(5)
        >>> before, wq = mha(x, pos), mha.q_proj.weight.detach().clone()
        >>> group = SymmetryGroup([QKFactor(site)])
        >>> g = group.random(torch.Generator().manual_seed(0))
        >>> g.qk[0].shape  # one U per key head: (H, Dh, Dh)
        torch.Size([2, 4, 4])
        >>> group.apply(mha, g)  # Q rows <- U rows, K rows <- U^{-T} rows
        >>> torch.allclose(mha(x, pos), before), torch.allclose(mha.q_proj.weight, wq)
        (True, False)
    """

    kind, rank, sum_rank = "qk", 0, 0

    def __init__(self, site: AttentionSite, follows_rotary: bool = True):
        self.site, self.follows_rotary = site, follows_rotary

    def parameters(self):
        return _lins(self.site.module.q_proj, self.site.module.k_proj)

    def dependent_parameters(self):
        rot = self.site.module.rotary
        return [] if rot is None else list(rot.symmetry_parameters())

    def refresh(self, positions):
        rot = self.site.module.rotary
        if self.follows_rotary and rot is not None and rot.symmetry_parameters():
            self.site.qk = qk_group_for(rot, self.site.head_dim, positions)

    def identity(self, shape, dtype):
        return eye_factors(self.site.head_dim, (*shape, self.site.n_heads), dtype)

    def random(self, shape, gen, dtype, scale):
        return self.site.qk.random((*shape, self.site.n_heads), gen, dtype, scale)

    def near_identity(self, shape, alpha, gen, dtype):
        return self.site.qk.near_identity((*shape, self.site.n_heads), alpha, gen, dtype)

    def inverse(self, x):
        return torch.linalg.inv(x)

    def reindex(self, x, perm):
        return x[perm]

    def coefficients(self):
        return torch.zeros(self.site.n_heads, self.site.qk.dimension, dtype=torch.float64)

    def from_coeffs(self, c):
        return self.site.qk.from_coeffs(c)

    def _act(self, u, src, out, grad: bool) -> None:
        s, m = self.site, self.site.module
        u = u.to(wide(m.q_proj.weight).dtype)  # float32 at least; results rounded once to each tensor's dtype
        u_it = torch.linalg.inv(u).transpose(-1, -2)
        a_q, a_k = (u_it, u) if grad else (u, u_it)  # gradients move by the inverse transpose
        out.update(rows_action(m.q_proj, expand(a_q, s.groups), s.query_heads, src))
        out.update(rows_action(m.k_proj, a_k, s.n_heads, src))

    def weights(self, x, src, out):
        if x is not None:
            self._act(x, src, out, grad=False)

    def grads(self, x, src, out):
        if x is not None:
            self._act(x, src, out, grad=True)

    def add_sq_norms(self, total, x, grads):
        """Q: A = U^{-T}, so ||A G||^2 = <(U^T U)^{-1}, G G^T>; K: A = U. GQA: the query heads sharing a factor add
        their Gram matrices first."""
        if x is None:
            return total
        s, m = self.site, self.site.module
        sq = group_sum(gram_rows(m.q_proj, grads, s.query_heads), s.n_heads)
        sk = gram_rows(m.k_proj, grads, s.n_heads)
        u = x.to(torch.float64)
        utu = u.transpose(-1, -2) @ u
        return total + inner(torch.linalg.inv(utu), sq) + inner(utu, sk)


class VOFactor(Component):
    """V per key head in `group` (None: GL(dim)): V rows <- V rows, O columns <- columns V^{-1}. dim: the value heads'
    size (None: head_dim; MLA's value heads are narrower than its query/key nope blocks).

    Args:
        site (AttentionSite): the layer.
        group (QKGroup | None): the group of the factors (None: GL(dim); qk_groups.DiagonalGroup under an output
            gate).
        dim (int | None): the value heads' size (None: head_dim).

    Examples:
        >>> import torch
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite, SymmetryGroup, VOFactor
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2, positional="rope").double()
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))
        >>> x, pos = torch.randn(1, 5, 8, dtype=torch.float64), torch.arange(5)
        >>> before, wo = mha(x, pos), mha.o_proj.weight.detach().clone()
        >>> group = SymmetryGroup([VOFactor(site)])
        >>> group.apply(mha, group.random(torch.Generator().manual_seed(0)))  # positions never touch the values
        >>> torch.allclose(mha(x, pos), before), torch.allclose(mha.o_proj.weight, wo)
        (True, False)
    """

    kind, rank, sum_rank = "vo", 1, 0  # sum_rank 0: summed right after the layer's Q/K share

    def __init__(self, site: AttentionSite, group: QKGroup | None = None, dim: int | None = None):
        self.site = site
        self.dim = site.head_dim if dim is None else int(dim)
        self.group = QKGroup(self.dim) if group is None else group

    def parameters(self):
        m = self.site.module
        return [m.v_proj.weight, m.o_proj.weight] + ([m.v_proj.bias] if m.v_proj.bias is not None else [])

    def identity(self, shape, dtype):
        return eye_factors(self.dim, (*shape, self.site.n_heads), dtype)

    def random(self, shape, gen, dtype, scale):
        return self.group.random((*shape, self.site.n_heads), gen, dtype, scale)

    def near_identity(self, shape, alpha, gen, dtype):
        return self.group.near_identity((*shape, self.site.n_heads), alpha, gen, dtype)

    def inverse(self, x):
        return torch.linalg.inv(x)

    def reindex(self, x, perm):
        return x[perm]

    def coefficients(self):
        return torch.zeros(self.site.n_heads, self.group.dimension, dtype=torch.float64)

    def from_coeffs(self, c):
        return self.group.from_coeffs(c)

    def _act(self, v, src, out, grad: bool) -> None:
        s, m = self.site, self.site.module
        v = v.to(wide(m.v_proj.weight).dtype)
        # weights: V rows <- V rows, O columns <- columns V^{-1}; gradients: V^{-T} on the rows, V^T on the columns
        a_v, a_o = (torch.linalg.inv(v).transpose(-1, -2), v.transpose(-1, -2)) if grad else (v, torch.linalg.inv(v))
        out.update(rows_action(m.v_proj, a_v, s.n_heads, src))
        t = src.get(id(m.o_proj.weight))
        if t is not None:
            wo = wide(t).reshape(t.shape[0], s.query_heads, -1).transpose(0, 1)  # (H, d, Dv)
            wo = wo @ expand(a_o.to(wo.dtype), s.groups)
            out[id(m.o_proj.weight)] = wo.transpose(0, 1).reshape(t.shape)

    def weights(self, x, src, out):
        if x is not None:
            self._act(x, src, out, grad=False)

    def grads(self, x, src, out):
        if x is not None:
            self._act(x, src, out, grad=True)

    def add_sq_norms(self, total, x, grads):
        """V: A = V^{-T}, <(V^T V)^{-1}, G G^T>; O (on the right): <V^T V, G_o^T G_o>."""
        if x is None:
            return total
        s, m = self.site, self.site.module
        sv = gram_rows(m.v_proj, grads, s.n_heads)
        go = grads.get(id(m.o_proj.weight))
        so = 0
        if go is not None:
            c = go.to(torch.float64).reshape(go.shape[0], s.query_heads, -1).transpose(0, 1)
            so = group_sum(c.transpose(-1, -2) @ c, s.n_heads)
        v = x.to(torch.float64)
        vtv = v.transpose(-1, -2) @ v
        return total + inner(torch.linalg.inv(vtv), sv) + inner(vtv, so)


class HeadPermutation(Component):
    """S_h: key heads permuted (their query heads move along), and with them q/k/v rows, o columns, `carried`
    (per-query-head tensors only the permutation moves: GPT-OSS's sinks (H,), an output gate's rows in H head blocks)
    and `query` / `key` (per-head tensors another component scales: per-head q/k-norm weights). Not a near-identity
    move: candidates of Alg. 1 never permute.

    Args:
        site (AttentionSite): the layer.
        carried (tuple): per-query-head tensors only the permutation moves ((H,) or rows in H head blocks).
        query (tuple): per-query-head tensors another component scales.
        key (tuple): per-key-head tensors another component scales.

    Examples:
        >>> import torch
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite, HeadPermutation, SymmetryGroup
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=12, n_heads=3).double()
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))
        >>> x, wq = torch.randn(1, 5, 12, dtype=torch.float64), mha.q_proj.weight.detach().clone()
        >>> before = mha(x)
        >>> group = SymmetryGroup([HeadPermutation(site)])
        >>> g = group.random(torch.Generator().manual_seed(0))
        >>> group.apply(mha, g)
        >>> perm = g.perm[0]  # new head i = old head perm[i]
        >>> torch.equal(mha.q_proj.weight.view(3, 4, 12), wq.view(3, 4, 12)[perm]), torch.allclose(mha(x), before)
        (True, True)
    """

    kind, rank, sum_rank, stage, switch = "perm", 2, 3, 1, "permute"
    permutes_heads = True

    def __init__(self, site: AttentionSite, carried: tuple = (), query: tuple = (), key: tuple = ()):
        self.site, self.carried, self.query, self.key = site, tuple(carried), tuple(query), tuple(key)

    def _moved(self) -> tuple[list, list, list]:
        """(rows in query-head blocks, rows in key-head blocks, columns in query-head blocks)."""
        m = self.site.module
        q = _lins(m.q_proj) + list(self.carried) + list(self.query)
        k = _lins(m.k_proj, m.v_proj) + list(self.key)
        return q, k, [] if m.v_proj is None else [m.o_proj.weight]

    def parameters(self):
        q, k, o = self._moved()
        return q + k + o

    def random(self, shape, gen, dtype, scale):
        if shape:
            fail("shape", shape, "() (one permutation per element: candidates of Alg. 1 never permute)")
        return torch.randperm(self.site.n_heads, generator=gen)

    def inverse(self, x):
        return torch.argsort(x)

    def _act(self, p, src, out) -> None:
        if p is None:
            return
        qp, (q, k, o) = query_perm(p, self.site.groups), self._moved()
        for tensors, perm in ((q, qp), (k, p)):
            for t in tensors:
                v = out.get(id(t), src.get(id(t)))
                if v is not None:
                    out[id(t)] = permute_heads(v, perm)
        for t in o:
            v = out.get(id(t), src.get(id(t)))
            if v is not None:
                out[id(t)] = v.reshape(v.shape[0], self.site.query_heads, -1)[:, qp].reshape(v.shape)

    def weights(self, x, src, out):
        self._act(x, src, out)

    def grads(self, x, src, out):
        self._act(x, src, out)

    def add_sq_norms(self, total, x, grads):
        """A permutation keeps every squared norm; the carried tensors' are the same for every candidate."""
        for par in self.carried:
            if grads.get(id(par)) is not None:
                total = total + vec_sq(grads[id(par)]).sum()
        return total


class NormScaling(Component):
    """w_q <- d w_q, w_k <- w_k / d (module docstring), d > 0 constant on each of `blocks` ((Dh,) block index of each
    coordinate), for norms that multiply by (offset + w) (Gemma's (1 + w): w <- d (1 + w) - 1). per_head: the weights
    are per head (OLMo 2's one norm over all heads, (H Dh,) and (H_kv Dh,); Cohere's (H, Dh)): one d per key head, a
    query head taking its key head's ((d_g n_q)^T M (n_k / d_g)), and the weights follow a head permutation.

    Args:
        site (AttentionSite): the layer.
        q_norm (nn.Parameter): the query norm's weight, (Dh,) shared by the heads, or per head.
        k_norm (nn.Parameter): the key norm's weight, shaped as q_norm for the key heads.
        blocks (Dh,): int64 block index of each coordinate (`diagonal_blocks` of the rotary group).
        offset (float): the norm multiplies by (offset + w) (Gemma: 1).
        per_head (bool): the weights are per head.

    Examples:
        >>> import torch
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite, NormScaling, SymmetryGroup, diagonal_blocks
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2, positional="rope")
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))
        >>> wq, wk = (torch.nn.Parameter(torch.ones(4, dtype=torch.float64)) for _ in range(2))  # (Dh,) norm weights
        >>> norms = NormScaling(site, wq, wk, diagonal_blocks(site.qk))
        >>> norms.blocks.tolist()  # RoPE's pairs (u, u + Dh/2) share one scale
        [0, 1, 0, 1]
        >>> group = SymmetryGroup([norms])
        >>> group.apply(mha, group.random(torch.Generator().manual_seed(0)))  # w_q <- d w_q, w_k <- w_k / d
        >>> torch.allclose(wq * wk, torch.ones(4, dtype=torch.float64)), torch.equal(wq[:2], wq[2:])
        (True, True)
    """

    kind, rank, sum_rank = "norm", 4, 4

    def __init__(self, site: AttentionSite, q_norm, k_norm, blocks: torch.Tensor, offset: float = 0.0, per_head=False):
        self.site, self.q_norm, self.k_norm = site, q_norm, k_norm
        self.blocks, self.offset, self.per_head = blocks, float(offset), bool(per_head)

    @property
    def n_blocks(self) -> int:
        """Scalings per element: one per norm block, per key head where the norm weights are per head."""
        return (int(self.blocks.max()) + 1) * (self.site.n_heads if self.per_head else 1)

    def index(self, key: bool) -> torch.Tensor:
        """The scaling read by each norm weight: `blocks` where the heads share the weights; over the flat weights of
        all heads otherwise."""
        b = self.blocks
        if not self.per_head:
            return b
        s = self.site
        heads = torch.arange(s.n_heads) if key else torch.arange(s.query_heads) // s.groups
        return (heads[:, None] * (int(b.max()) + 1) + b[None, :]).flatten()

    def parameters(self):
        return [self.q_norm, self.k_norm]

    def refresh(self, positions):
        rot = self.site.module.rotary
        if rot is not None and rot.symmetry_parameters():
            self.blocks = diagonal_blocks(qk_group_for(rot, self.site.head_dim, positions))

    def identity(self, shape, dtype):
        return torch.ones(*shape, self.n_blocks, dtype=dtype)

    def random(self, shape, gen, dtype, scale):
        return torch.exp(scale * torch.randn(*shape, self.n_blocks, generator=gen, dtype=dtype))

    def near_identity(self, shape, alpha, gen, dtype):
        # part of the attention group (like H's per-pair scales): sampled whatever the ffn flag
        return 1 + alpha * (2 * torch.rand(*shape, self.n_blocks, generator=gen, dtype=dtype) - 1)

    def inverse(self, x):
        return 1 / x

    def reindex(self, x, perm):
        return permute_heads(x, perm) if self.per_head else x

    def coefficients(self):
        return torch.zeros(self.n_blocks, dtype=torch.float64)

    def from_coeffs(self, c):
        return 1 + c

    def _scalings(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-weight scalings (..., *w_q.shape), (..., *w_k.shape) (Cohere's per-head norms keep (H, Dh))."""
        dq, dk = (s[..., self.index(key).to(s.device)] for key in (False, True))
        return dq.reshape(*s.shape[:-1], *self.q_norm.shape), dk.reshape(*s.shape[:-1], *self.k_norm.shape)

    def weights(self, x, src, out):
        if x is None:
            return
        dq, dk = self._scalings(x)
        wq, wk, c = wide(src[id(self.q_norm)]), wide(src[id(self.k_norm)]), self.offset
        out[id(self.q_norm)] = (wq + c) * dq.to(wq.dtype) - c
        out[id(self.k_norm)] = (wk + c) / dk.to(wk.dtype) - c

    def grads(self, x, src, out):
        if x is None:
            return
        dq, dk = self._scalings(x)
        for par, fac in ((self.q_norm, 1 / dq), (self.k_norm, dk)):  # w_q <- d w_q: its gradient / d
            t = src.get(id(par))
            if t is not None:
                out[id(par)] = wide(t) * fac.to(wide(t).dtype)

    def add_sq_norms(self, total, x, grads):
        if x is None:
            return total
        dq, dk = self._scalings(x)
        for par, fac in ((self.q_norm, 1 / dq.to(torch.float64) ** 2), (self.k_norm, dk.to(torch.float64) ** 2)):
            if grads.get(id(par)) is not None:
                total = total + (vec_sq(grads[id(par)]) * fac).flatten(-par.dim()).sum(-1)
        return total


def attention_parts(
    site: AttentionSite,
    values: VOFactor | None | bool = True,
    norms: NormScaling | None = None,
    carried: tuple = (),
    permutable: bool = True,
) -> list[Component]:
    """The components of one attention layer: its Q/K factor (fixed when `norms` carries the Q/K symmetry), V/O
    (True: GL(head_dim); a VOFactor; None: a site without values), the head permutation (carrying `carried` and
    per-head norm weights; permutable=False: none, MLA's two sites share each head) and the q/k-norm scalings.

    Args:
        site (AttentionSite): the layer.
        values (VOFactor | None | bool): True: a VOFactor on GL(head_dim); a VOFactor as given; None or False: none.
        norms (NormScaling | None): the q/k-norm scalings carrying the Q/K symmetry (the Q/K factor is then fixed).
        carried (tuple): per-query-head tensors the head permutation moves.
        permutable (bool): include the head permutation.

    Returns:
        parts (list[Component]): QKFactor, VOFactor, HeadPermutation, NormScaling, those that apply.

    Examples:
        >>> from symformer.models import MultiHeadAttention
        >>> from symformer.teleport import AttentionSite, attention_parts
        >>> from symformer.teleport.qk_groups import qk_group_for
        >>> mha = MultiHeadAttention(d_model=8, n_heads=2, positional="rope")
        >>> site = AttentionSite("attn", mha, qk_group_for(mha.rotary, mha.head_dim))
        >>> [c.kind for c in attention_parts(site)]
        ['qk', 'vo', 'perm']
        >>> [c.kind for c in attention_parts(site, values=None, permutable=False)]
        ['qk']
    """
    parts: list[Component] = [QKFactor(site, follows_rotary=norms is None)]
    if values is True:
        values = VOFactor(site)
    if values:
        parts.append(values)
    if permutable:
        per_head = norms is not None and norms.per_head
        qn, kn = ((norms.q_norm,), (norms.k_norm,)) if per_head else ((), ())
        parts.append(HeadPermutation(site, carried, qn, kn))
    if norms is not None:
        parts.append(norms)
    return parts


__all__ = ["HeadPermutation", "NormScaling", "QKFactor", "VOFactor", "attention_parts"]
