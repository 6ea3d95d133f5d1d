"""Symmetry groups of multi-head attention (and ReLU FFNs) acting on symformer models: the whole-model group here,
the per-layer Q/K groups in qk_groups.py.

Paper layout is `x W` with W_i in R^{d x d_h}; here every projection is an nn.Linear (weight out x in,
head h owns output features h*Dh:(h+1)*Dh of q/k/v and the same input features of o). Per head:
  Q rows <- U @ rows,  K rows <- U^{-T} @ rows,  V rows <- V @ rows,  O columns <- cols @ V^{-1},
biases of Q/K/V like their rows, output bias unchanged (paper Sec. 3, G_Att = S_h x (GL x GL)^h).
Which U are allowed depends on the positional encoding (each rotary part declares it: RotaryPositional.qk_symmetry):
  * none / additive PE: GL(d_h) (eq. (5)-(6));
  * RoPE: H(d_h) of eq. (9), block-diagonal scaled rotations on exactly the pairs the RoPE rotates;
  * STRING (R = P R_rope P^T): P H(d_h) P^T  (not in the paper);
  * ESPR: the commutant of every relative rotation R(r_i)^T R(r_j), computed numerically (not in the
    paper; we prove nothing beyond q^T U^T M U^{-T} k = q^T M k when U^T commutes with M).
V/O always get GL(d_h): positions never touch values. ReLU FFN hidden units admit positive rescaling.
Layers with query/key norms before the rotation (Qwen3 per head, OLMo 2 over all heads) keep W_Q / W_K fixed
(TrivialGroup); their Q/K symmetry is d w_q, w_k / d on the norm weights with diag(d) in the rotary's group
(AttentionSite).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from symformer._validation import check_float, check_int, fail
from symformer.attention.softmax import AttentionCore
from symformer.teleport.qk_groups import QKGroup, diagonal_blocks, qk_group_for

#: builders (model, positions, ffn) -> SymmetryGroup | None for models of other libraries, tried first by
#: symmetry_group; symformer.integrations registers here (this layer never imports it)
EXTERNAL_BUILDERS: list = []


# ---------------------------------------------------------------- the whole-model group
@dataclass
class AttentionSite:
    """One attention layer. `module` has q_proj, k_proj, v_proj, o_proj, n_heads (query heads), head_dim and
    rotary. Grouped-query attention: `kv_heads` key/value heads, query head h = g r + j reading key head g
    (r = n_heads / kv_heads, HF's repeat_kv); then U_g is shared by the r query heads of key head g (so
    q_h^T U_g^T M U_g^{-T} k_g = q_h^T M k_g) and V_g by those reading value head g.
    Query/key norms (Qwen3: RMSNorm weights w_q, w_k of shape (Dh,), shared by the heads, between the
    projections and the rotation): qk is TrivialGroup, and w_q <- d w_q, w_k <- w_k / d for every d > 0 constant
    on each of `norm_blocks` (diagonal_blocks of the rotary's group) keeps every logit, since diag(d) then
    commutes with each relative rotation M: (M_i d n_q)^T (M_j n_k / d) = n_q^T M_i^T M_j n_k."""

    name: str
    module: nn.Module
    qk: QKGroup
    kv_heads: int | None = None
    q_norm: nn.Parameter | None = None
    k_norm: nn.Parameter | None = None
    norm_blocks: torch.Tensor | None = None
    norm_offset: float = 0.0  # the norms multiply by (offset + w): Gemma's (1 + w), so w <- d (1 + w) - 1
    # weights per head: OLMo 2's one norm over all heads, (H Dh,) and (H_kv Dh,); Cohere's per-head (H, Dh)
    norm_per_head: bool = False
    # per-query-head parameters that follow a head permutation and are otherwise fixed: (H,) (GPT-OSS's sinks) or rows
    # in H head blocks (an output gate's projection, AFMoE's gate_proj)
    head_params: tuple = ()
    # the V/O factor's size (None: head_dim; 0: a site without values, whose module has v_proj = o_proj = None:
    # MLA's rope blocks, integrations.hf_teleport); MLA's value heads are narrower than its nope blocks
    vo_dim: int | None = None
    # whether the heads may be permuted (MLA's two sites share each head, so a permutation of one alone breaks it)
    permutable: bool = True
    # the V/O factor's group (None: GL(value_dim); an output gate: qk_groups.DiagonalGroup)
    vo_group: QKGroup | None = None

    @property
    def n_blocks(self) -> int:
        """Scalings per element: one per norm block, per key head where the norm weights are per head."""
        if self.norm_blocks is None:
            return 0
        return (int(self.norm_blocks.max()) + 1) * (self.n_heads if self.norm_per_head else 1)

    def norm_index(self, key: bool) -> torch.Tensor:
        """The scaling read by each norm weight: (Dh,) norm_blocks where the heads share the weights; over the flat
        weights of all heads otherwise (OLMo 2: RMS over all heads, so any per-head d in the rotary's diagonal
        keeps the logits, a query head taking its key head's d: (d_g n_q)^T M (n_k / d_g))."""
        b = self.norm_blocks
        if not self.norm_per_head:
            return b
        heads = torch.arange(self.n_heads) if key else torch.arange(self.query_heads) // self.groups
        return (heads[:, None] * (int(b.max()) + 1) + b[None, :]).flatten()

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

    @property
    def value_dim(self) -> int:
        return self.head_dim if self.vo_dim is None else self.vo_dim

    @property
    def value_group(self) -> QKGroup:
        return QKGroup(self.value_dim) if self.vo_group is None else self.vo_group


def _vo_factors(site: AttentionSite, shape: tuple[int, ...], dtype, make) -> torch.Tensor:
    """V/O factors make(value_group, shape), or empty (*shape, 0, 0) ones for a site without values."""
    return make(site.value_group, shape) if site.value_dim else torch.zeros(*shape, 0, 0, dtype=dtype)


@dataclass
class FusedExperts:
    """Mixture-of-experts MLPs stored as two 3-D weights (HF Mixtral, Qwen3-MoE): expert e computes
    down[e] (act(x gate[e]^T) * (x up[e]^T)) with gate_up[e] = cat(gate[e], up[e]) of shape (2 I, d) and down[e] of
    shape (d, I). The product is linear in the up branch, so up rows <- s rows, down columns <- columns / s
    (any s != 0 per expert and hidden unit; the router never sees these weights) keeps every output. 2-D weights
    (2 I, d) and (d, I) are one such MLP (Phi-3's fused gate_up_proj Linear)."""

    gate_up: nn.Parameter
    down: nn.Parameter

    @property
    def shape(self) -> tuple[int, ...]:
        """(n_experts, I), or (I,) for 2-D weights: the shape of a scaling."""
        return (*self.down.shape[:-2], int(self.down.shape[-1]))


@dataclass
class FusedRows:
    """A parameter whose rows hold the weights of several projections (Phi-3's qkv_proj: blocks [W_Q; W_K; W_V];
    GPT-NeoX's query_key_value: [q_h; k_h; v_h] head by head). `rows[j]` indexes projection j's rows in `param`;
    `blocks[j]` is what the sites read as that projection's weight (a tensor whose id is a stable key, refreshed
    from `param` by `sync`, so training between teleports is seen). A block of consecutive rows (Phi-3) is a view
    of `param`, so the blocks cost no memory; head-interleaved rows (NeoX) cannot be one 2-D view and are copied.
    parameters(), gradient dicts and transformed() hold `param` (SymmetryGroup._split / _merge)."""

    param: nn.Parameter
    rows: list[torch.Tensor]
    # blocks no site acts on (MLA's latent rows of kv_a_proj_with_mqa): merged back as they are
    passive: tuple[int, ...] = ()
    blocks: list[torch.Tensor] = field(init=False)

    def __post_init__(self):
        self._index = [_as_slice(r) for r in self.rows]
        self.blocks = [self.param.detach()[i] for i in self._index]
        self._order = torch.argsort(torch.cat(self.rows))  # the rows partition param's: cat(blocks)[order] = param

    def sync(self) -> None:
        for b, i in zip(self.blocks, self._index, strict=True):
            b.data = self.param.detach()[i]  # same tensor object (its id keys the group's dicts), current values

    def split(self, t: torch.Tensor) -> list[torch.Tensor]:
        return [t[r.to(t.device)] for r in self.rows]

    def merge(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The inverse of split (differentiable: Zhao's ascent goes through it)."""
        return torch.cat(parts)[self._order.to(parts[0].device)]


def _as_slice(rows: torch.Tensor) -> slice | torch.Tensor:
    """Consecutive row indices as a slice (indexing then gives a view), any others as they are (a copy)."""
    start = int(rows[0]) if rows.numel() else 0
    return slice(start, start + rows.numel()) if torch.equal(rows, torch.arange(start, start + rows.numel())) else rows


@dataclass
class GroupElement:
    """One element per attention layer: qk (H, Dh, Dh), vo (H, Dh, Dh), optional head permutation (H,);
    per ReLU FFN an optional positive scaling (d_ff,); per layer with query/key norms an optional positive
    scaling per norm block (n_blocks,) (AttentionSite; None or an empty list: the identity); per block of fused
    MoE experts an optional scaling (n_experts, d_expert) (FusedExperts). Action: first the
    per-head matrices, then the permutation (new head i = transformed old head perm[i])."""

    qk: list[torch.Tensor]
    vo: list[torch.Tensor]
    perm: list[torch.Tensor | None] = field(default_factory=list)
    ffn: list[torch.Tensor] = field(default_factory=list)
    norm: list[torch.Tensor | None] = field(default_factory=list)
    experts: list[torch.Tensor] = field(default_factory=list)


def _heads_rows(w: torch.Tensor, h: int) -> torch.Tensor:
    return w.reshape(h, -1, *w.shape[1:])  # (H*Dh, ...) -> (H, Dh, ...)


def _expand(a: torch.Tensor, r: int) -> torch.Tensor:
    """Per key head (..., H_kv, D, D) -> per query head (..., H, D, D) (query head g r + j reads key head g)."""
    return a if r == 1 else a.repeat_interleave(r, dim=-3)


def _query_perm(p: torch.Tensor | None, r: int) -> torch.Tensor | None:
    """A permutation of key heads as a permutation of query heads (each key head's r query heads move along)."""
    return p if p is None or r == 1 else (p[:, None] * r + torch.arange(r)).flatten()


def _group_sum(s, hk: int):
    """Per query head (H, D, D) Gram matrices summed over the query heads of each key head -> (H_kv, D, D)."""
    return s if isinstance(s, int) or s.shape[0] == hk else s.reshape(hk, -1, *s.shape[-2:]).sum(1)


def _permute_heads(t: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    """Per-head weights (H Dh, ...) (or (H,)) with their heads permuted (new head i = old head perm[i])."""
    return t if perm is None else _heads_rows(t, perm.shape[0])[perm].reshape(t.shape)


def _norm_coeffs_permuted(site: AttentionSite, s: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    """Per-head norm scalings (H_kv nb,) re-indexed by the key-head permutation, for the inverse (w' = (d w)[perm]
    is undone by scalings 1 / d[perm] followed by argsort(perm)); shared scalings are left as they are."""
    return _permute_heads(s, perm) if site.norm_per_head else s


def _rows_action(lin: nn.Linear, a: torch.Tensor, heads: int, perm, tensors=None) -> dict[int, torch.Tensor]:
    """Rows of every head of lin.weight / lin.bias (or of the gradient-like `tensors` keyed by their id)
    multiplied by a (heads, D, D), then heads permuted."""
    out = {}
    for par in (lin.weight, lin.bias):
        if par is None or (tensors is not None and id(par) not in tensors):
            continue
        t = par if tensors is None else tensors[id(par)]
        rows = _heads_rows(_wide(t), heads)
        a = a.to(rows.dtype)
        r = a @ rows if t.ndim == 2 else (a @ rows[..., None])[..., 0]
        out[id(par)] = (r if perm is None else r[perm]).reshape(t.shape).to(t.dtype)
    return out


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in float32 at least: a 16-bit model's action is computed in float32 from its weights and rounded back
    once (a product of 16-bit factors would round at every step, and torch.linalg.inv has no 16-bit kernel)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


class SymmetryGroup:
    """The symmetry group of a model: per attention layer S_h x (G_QK x GL(d_h))^h, plus positive
    diagonal rescaling of ReLU FFN hidden units."""

    def __init__(
        self,
        sites: list[AttentionSite],
        ffns: list[nn.Module],
        positions: torch.Tensor | None = None,
        experts: list[FusedExperts] | None = None,
        fused: list[FusedRows] | None = None,
    ):
        self.sites, self.ffns, self.positions = sites, ffns, positions
        self.experts = list(experts or [])
        self.fused = list(fused or [])

    def _split(self, tensors: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Tensors keyed by a fused parameter also keyed by its row blocks (FusedRows)."""
        out = dict(tensors)
        for f in self.fused:
            if id(f.param) in tensors:
                out.update({id(b): t for b, t in zip(f.blocks, f.split(tensors[id(f.param)]), strict=True)})
        return out

    def _merge(
        self, out: dict[int, torch.Tensor], source: dict[int, torch.Tensor] | None = None
    ) -> dict[int, torch.Tensor]:
        """Row-block results put back together under the fused parameter (FusedRows); a passive block comes from
        `source` (the split gradients) or, without one, is the block's current value."""
        for f in self.fused:
            acted = [b for j, b in enumerate(f.blocks) if j not in f.passive]
            if acted and all(id(b) in out for b in acted):
                parts = [
                    (b if source is None else source[id(b)]) if j in f.passive else out.pop(id(b))
                    for j, b in enumerate(f.blocks)
                ]
                out[id(f.param)] = f.merge(parts)
        return out

    def dependent_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters the group itself depends on (STRING's P, ESPR generators). L(g theta, phi) =
        L(theta, phi) holds only at the current phi, so their gradient is NOT a linear image of the old one:
        the teleport criterion leaves them out and the gradient is recomputed after a teleport."""
        out = []
        for s in self.sites:
            rot = s.module.rotary
            if rot is not None:
                out += rot.symmetry_parameters()
        return out

    def refresh(self) -> None:
        """Recompute the Q/K groups that depend on learned rotations (STRING's P, ESPR's generators):
        the group is the stabiliser of the *current* positional parameters, which training moves."""
        for s in self.sites:
            rot = s.module.rotary
            if rot is not None and rot.symmetry_parameters():
                grp = qk_group_for(rot, s.head_dim, self.positions)
                if s.norm_blocks is None:
                    s.qk = grp
                else:  # the rotary's group acts on the norm weights (AttentionSite)
                    s.norm_blocks = diagonal_blocks(grp)

    def __repr__(self) -> str:
        kinds = sorted({s.qk.kind for s in self.sites})
        norms = sum(s.norm_blocks is not None for s in self.sites)
        return (
            f"SymmetryGroup(layers={len(self.sites)}, qk={kinds}, relu_ffns={len(self.ffns)}, qk_norms={norms}, "
            f"moe_experts={len(self.experts)})"
        )

    def qk_dimensions(self) -> list[int]:
        return [s.qk.dimension for s in self.sites]

    # ---- elements
    def identity(self, dtype=torch.float64) -> GroupElement:
        def eye(s, dim):
            return torch.eye(dim, dtype=dtype).expand(s.n_heads, -1, -1).clone()

        return GroupElement(
            [eye(s, s.head_dim) for s in self.sites],
            [eye(s, s.value_dim) for s in self.sites],
            [None] * len(self.sites),
            [torch.ones(f.up.out_features, dtype=dtype) for f in self.ffns],
            self._norms(lambda s: torch.ones(s.n_blocks, dtype=dtype)),
            [torch.ones(x.shape, dtype=dtype) for x in self.experts],
        )

    def _norms(self, make) -> list[torch.Tensor | None]:
        """Per site: make(site) where the site has query/key norms, else None."""
        return [None if s.norm_blocks is None else make(s) for s in self.sites]

    def random(
        self, gen: torch.Generator, dtype=torch.float64, scale: float = 0.5, permute: bool = True, ffn: bool = True
    ) -> GroupElement:
        """A generic element (general GL / H / commutant matrices, random permutations and scalings)."""
        qk = [s.qk.random((s.n_heads,), gen, dtype, scale) for s in self.sites]
        vo = [
            _vo_factors(s, (s.n_heads,), dtype, lambda grp, shape: grp.random(shape, gen, dtype, scale))
            for s in self.sites
        ]
        perm = [torch.randperm(s.n_heads, generator=gen) if permute and s.permutable else None for s in self.sites]
        sc = [
            torch.exp(scale * torch.randn(f.up.out_features, generator=gen, dtype=dtype))
            if ffn
            else torch.ones(f.up.out_features, dtype=dtype)
            for f in self.ffns
        ]
        nm = self._norms(lambda s: torch.exp(scale * torch.randn(s.n_blocks, generator=gen, dtype=dtype)))
        ex = [
            torch.exp(scale * torch.randn(x.shape, generator=gen, dtype=dtype))
            if ffn
            else torch.ones(x.shape, dtype=dtype)
            for x in self.experts
        ]
        return GroupElement(qk, vo, perm, sc, nm, ex)

    def sample(
        self, n: int, alpha: float, gen: torch.Generator, dtype=torch.float64, ffn: bool = False
    ) -> GroupElement:
        """n candidates near the identity (Sec. 4, eq. (14)): every tensor gets a leading dim n."""
        check_int("samples", n, 1)
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        qk = [s.qk.near_identity((n, s.n_heads), alpha, gen, dtype) for s in self.sites]
        vo = [
            _vo_factors(s, (n, s.n_heads), dtype, lambda grp, shape: grp.near_identity(shape, alpha, gen, dtype))
            for s in self.sites
        ]
        sc = [
            1 + alpha * (2 * torch.rand(n, f.up.out_features, generator=gen, dtype=dtype) - 1)
            if ffn
            else torch.ones(n, f.up.out_features, dtype=dtype)
            for f in self.ffns
        ]
        # the norm scalings belong to the attention group (like H's per-pair scales): always sampled
        nm = self._norms(lambda s: 1 + alpha * (2 * torch.rand(n, s.n_blocks, generator=gen, dtype=dtype) - 1))
        ex = [
            1 + alpha * (2 * torch.rand(n, *x.shape, generator=gen, dtype=dtype) - 1)
            if ffn
            else torch.ones(n, *x.shape, dtype=dtype)
            for x in self.experts
        ]
        return GroupElement(qk, vo, [None] * len(self.sites), sc, nm, ex)

    @staticmethod
    def pick(cands: GroupElement, i: int) -> GroupElement:
        return GroupElement(
            [u[i] for u in cands.qk],
            [v[i] for v in cands.vo],
            [None] * len(cands.qk),
            [s[i] for s in cands.ffn],
            [None if s is None else s[i] for s in cands.norm],
            [s[i] for s in cands.experts],
        )

    def inverse(self, g: GroupElement) -> GroupElement:
        qk, vo, perm = [], [], []
        for u, v, p in zip(g.qk, g.vo, g.perm or [None] * len(g.qk), strict=True):
            ui, vi = torch.linalg.inv(u), torch.linalg.inv(v)
            if p is not None:  # derivation in the class docstring: U'_i = U_{perm[i]}^{-1}, perm' = perm^{-1}
                ui, vi, p = ui[p], vi[p], torch.argsort(p)
            qk.append(ui)
            vo.append(vi)
            perm.append(p)
        norm = [
            None if s is None else 1 / _norm_coeffs_permuted(site, s, p)
            for site, s, p in zip(
                self.sites, g.norm or [None] * len(self.sites), g.perm or [None] * len(g.qk), strict=True
            )
        ]
        return GroupElement(qk, vo, perm, [1 / s for s in g.ffn], norm, [1 / s for s in g.experts])

    def _norm_parts(self, g: GroupElement):
        """(site, dq, dk, perm) for each site with query/key norms that g moves: dq, dk (..., numel of w_q, w_k) the
        per-weight scalings; perm (query, key) the head permutations the weights follow where they are per head."""
        perms = g.perm or [None] * len(self.sites)
        for site, s, p in zip(self.sites, g.norm or [None] * len(self.sites), perms, strict=True):
            if s is not None and site.norm_blocks is not None:
                p = (_query_perm(p, site.groups), p) if site.norm_per_head and p is not None else (None, None)
                dq, dk = (s[..., site.norm_index(key).to(s.device)] for key in (False, True))
                # shaped as the weights: Cohere's per-head norms keep theirs as (H, Dh), the others are flat
                yield (
                    site,
                    dq.reshape(*s.shape[:-1], *site.q_norm.shape),
                    dk.reshape(*s.shape[:-1], *site.k_norm.shape),
                    p,
                )

    # ---- action on parameters
    def transformed(self, g: GroupElement) -> dict[int, torch.Tensor]:
        """New values of every acted-on parameter (keyed by id(param)); differentiable in g."""
        for f in self.fused:  # the blocks the sites read must hold the fused parameters' current values
            f.sync()
        out: dict[int, torch.Tensor] = {}
        for site, u, v, p in zip(self.sites, g.qk, g.vo, g.perm or [None] * len(g.qk), strict=True):
            m, r, h, hk = site.module, site.groups, site.query_heads, site.n_heads
            wt = _wide(m.q_proj.weight).dtype  # float32 at least; each result rounded once to its parameter's dtype
            u, v = u.to(wt), v.to(wt)
            u_it, v_inv = torch.linalg.inv(u).transpose(-1, -2), torch.linalg.inv(v)
            qp = _query_perm(p, r)
            out.update(_rows_action(m.q_proj, _expand(u, r), h, qp))
            out.update(_rows_action(m.k_proj, u_it, hk, p))
            # always present (a gate block of a fused q_proj must be merged back even when no head moves)
            out.update({id(par): _permute_heads(par, qp) for par in site.head_params})
            if m.v_proj is None:  # a site without values (AttentionSite.vo_dim = 0)
                continue
            out.update(_rows_action(m.v_proj, v, hk, p))
            w = m.o_proj.weight
            wo = _wide(w).reshape(w.shape[0], h, -1).transpose(0, 1)  # (H, d, Dh)
            wo = wo @ _expand(v_inv.to(wo.dtype), r)
            if qp is not None:
                wo = wo[qp]
            out[id(w)] = wo.transpose(0, 1).reshape(w.shape).to(w.dtype)
        for f, s in zip(self.ffns, g.ffn or [None] * len(self.ffns), strict=True):
            if s is None:  # element without FFN part: identity there
                continue
            s = s.to(_wide(f.up.weight).dtype)
            out[id(f.up.weight)] = (_wide(f.up.weight) * s[:, None]).to(f.up.weight.dtype)
            if f.up.bias is not None:
                out[id(f.up.bias)] = (_wide(f.up.bias) * s).to(f.up.bias.dtype)
            out[id(f.down.weight)] = (_wide(f.down.weight) / s[None, :]).to(f.down.weight.dtype)
        for site, dq, dk, (pq, pk) in self._norm_parts(g):  # scaled, then permuted with the heads (per-head weights)
            wq, wk, c = _wide(site.q_norm), _wide(site.k_norm), site.norm_offset
            out[id(site.q_norm)] = _permute_heads(((wq + c) * dq.to(wq.dtype) - c).to(site.q_norm.dtype), pq)
            out[id(site.k_norm)] = _permute_heads(((wk + c) / dk.to(wk.dtype) - c).to(site.k_norm.dtype), pk)
        for x, s in zip(self.experts, g.experts, strict=False):  # up rows * s, down columns / s (FusedExperts)
            gu, dn, i = _wide(x.gate_up), _wide(x.down), x.shape[-1]
            s = s.to(gu.dtype)
            out[id(x.gate_up)] = torch.cat((gu[..., :i, :], gu[..., i:, :] * s[..., None]), -2).to(x.gate_up.dtype)
            out[id(x.down)] = (dn / s[..., None, :]).to(x.down.dtype)
        return self._merge(out)

    def parameters(self) -> list[nn.Parameter]:
        """Every parameter the group acts on (o_proj biases and FFN down biases are fixed by it)."""
        ps = []
        for s in self.sites:
            m = s.module
            lins = [lin for lin in (m.q_proj, m.k_proj, m.v_proj) if lin is not None]
            ps += [lin.weight for lin in lins] + ([m.o_proj.weight] if m.v_proj is not None else [])
            ps += [lin.bias for lin in lins if lin.bias is not None]
        for f in self.ffns:
            ps += [f.up.weight, f.down.weight] + ([f.up.bias] if f.up.bias is not None else [])
        ps += [p for x in self.experts for p in (x.gate_up, x.down)]
        ps += [p for s in self.sites if s.norm_blocks is not None for p in (s.q_norm, s.k_norm)]
        ps += [p for s in self.sites for p in s.head_params]
        blocks = {id(b) for f in self.fused for b in f.blocks}
        return [p for p in ps if id(p) not in blocks] + [f.param for f in self.fused]

    @torch.no_grad()
    def apply(self, model: nn.Module, g: GroupElement) -> None:
        """theta <- g theta, in place."""
        new = self.transformed(g)
        for p in self.parameters():
            if id(p) in new:  # an element without a norm or FFN part leaves those parameters alone
                p.copy_(new[id(p)])

    # ---- action on gradients (and anything living in gradient space, e.g. momentum)
    def grad_action(self, g: GroupElement, tensors: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Gradient at g theta from the gradient at theta (the loss is invariant and the action linear):
        Q rows U^{-T} G, K rows U G, V rows V^{-T} G, O columns G V^T; FFN up rows G / s, down cols G s.
        `tensors` maps id(param) -> gradient-like tensor; missing entries are skipped."""
        out: dict[int, torch.Tensor] = {}
        tensors = self._split(tensors)
        for site, u, v, p in zip(self.sites, g.qk, g.vo, g.perm or [None] * len(g.qk), strict=True):
            m, r, h, hk = site.module, site.groups, site.query_heads, site.n_heads
            wt = _wide(m.q_proj.weight).dtype
            u, v = u.to(wt), v.to(wt)
            u_it, v_it = torch.linalg.inv(u).transpose(-1, -2), torch.linalg.inv(v).transpose(-1, -2)
            qp = _query_perm(p, r)
            out.update(_rows_action(m.q_proj, _expand(u_it, r), h, qp, tensors))
            out.update(_rows_action(m.k_proj, u, hk, p, tensors))
            # per-head parameters (rows in head blocks): permuted only
            out.update(
                {id(par): _permute_heads(tensors[id(par)], qp) for par in site.head_params if id(par) in tensors}
            )
            if m.v_proj is None:  # a site without values
                continue
            out.update(_rows_action(m.v_proj, v_it, hk, p, tensors))
            t = tensors.get(id(m.o_proj.weight))
            if t is not None:
                go = _wide(t).reshape(t.shape[0], h, -1).transpose(0, 1)
                go = go @ _expand(v.transpose(-1, -2).to(go.dtype), r)
                out[id(m.o_proj.weight)] = (go if qp is None else go[qp]).transpose(0, 1).reshape(t.shape).to(t.dtype)
        for f, s in zip(self.ffns, g.ffn or [None] * len(self.ffns), strict=True):
            if s is None:  # element without FFN part: identity there
                continue
            s = s.to(_wide(f.up.weight).dtype)
            for par, fac in ((f.up.weight, 1 / s[:, None]), (f.up.bias, 1 / s), (f.down.weight, s[None, :])):
                if par is not None and id(par) in tensors:
                    t = tensors[id(par)]
                    out[id(par)] = (_wide(t) * fac.to(_wide(t).dtype)).to(t.dtype)
        for site, dq, dk, (pq, pk) in self._norm_parts(g):  # w_q <- d w_q: its gradient / d; w_k <- w_k / d: * d
            for par, fac, p in ((site.q_norm, 1 / dq, pq), (site.k_norm, dk, pk)):
                if id(par) in tensors:
                    t = tensors[id(par)]
                    out[id(par)] = _permute_heads((_wide(t) * fac.to(_wide(t).dtype)).to(t.dtype), p)
        for x, s in zip(self.experts, g.experts, strict=False):  # up-row gradients / s, down-column gradients * s
            s, i = s.to(_wide(x.gate_up).dtype), x.shape[-1]
            if id(x.gate_up) in tensors:
                t = _wide(tensors[id(x.gate_up)])
                out[id(x.gate_up)] = torch.cat((t[..., :i, :], t[..., i:, :] / s[..., None].to(t.dtype)), -2).to(
                    tensors[id(x.gate_up)].dtype
                )
            if id(x.down) in tensors:
                t = tensors[id(x.down)]
                out[id(x.down)] = (_wide(t) * s[..., None, :].to(_wide(t).dtype)).to(t.dtype)
        return self._merge(out, tensors)

    # ---- closed-form norms of the transformed gradient for many candidates (one backward pass)
    def candidate_sq_norms(self, grads: dict[int, torch.Tensor], cands: GroupElement) -> torch.Tensor:
        """sum over acted-on params of ||grad at g_i theta||^2 for each candidate i (leading dim M).

        ||A G||_F^2 = <A^T A, G G^T>: per head one Gram matrix of the gradient, then O(Dh^3) per
        candidate, independent of d_model and batch size."""
        total, grads = 0.0, self._split(grads)
        for site, u, v in zip(self.sites, cands.qk, cands.vo, strict=True):
            m, h, hk = site.module, site.query_heads, site.n_heads
            # GQA: query heads (and O column blocks) sharing a factor add their Gram matrices first
            sq = _group_sum(self._gram_rows(m.q_proj, grads, h), hk)
            sk, sv = (self._gram_rows(lin, grads, hk) for lin in (m.k_proj, m.v_proj))
            go = None if m.o_proj is None else grads.get(id(m.o_proj.weight))
            so = (
                0
                if go is None
                else _group_sum(
                    (lambda c: c.transpose(-1, -2) @ c)(
                        go.to(torch.float64).reshape(go.shape[0], h, -1).transpose(0, 1)
                    ),
                    hk,
                )
            )
            u, v = u.to(torch.float64), v.to(torch.float64)
            utu, vtv = u.transpose(-1, -2) @ u, v.transpose(-1, -2) @ v
            # Q: A = U^{-T}, A^T A = (U^T U)^{-1};  K: A = U;  V: A = V^{-T};  O (right): <V^T V, G_o^T G_o>
            total = (
                total
                + _inner(torch.linalg.inv(utu), sq)
                + _inner(utu, sk)
                + _inner(torch.linalg.inv(vtv), sv)
                + _inner(vtv, so)
            )
        for f, s in zip(self.ffns, cands.ffn or [None] * len(self.ffns), strict=True):
            if s is None:  # element without FFN part: identity there
                continue
            s = s.to(torch.float64)
            ru = _row_sq(grads.get(id(f.up.weight))) + _vec_sq(grads.get(id(f.up.bias)))
            rd = 0 if grads.get(id(f.down.weight)) is None else grads[id(f.down.weight)].to(torch.float64).pow(2).sum(0)
            total = total + (ru / s**2).sum(-1) + (rd * s**2).sum(-1)
        for t in (grads.get(id(f.blocks[j])) for f in self.fused for j in f.passive):  # rows no site acts on
            total = total + (0 if t is None else t.to(torch.float64).pow(2).sum())  # the same for every candidate
        for par in (p for site in self.sites for p in site.head_params):  # only permuted: the same for every candidate
            if grads.get(id(par)) is not None:
                total = total + _vec_sq(grads[id(par)]).sum()
        for site, dq, dk, _ in self._norm_parts(cands):  # a head permutation keeps the squared norms
            for par, fac in ((site.q_norm, 1 / dq.to(torch.float64) ** 2), (site.k_norm, dk.to(torch.float64) ** 2)):
                if grads.get(id(par)) is not None:
                    total = total + (_vec_sq(grads[id(par)]) * fac).flatten(-par.dim()).sum(-1)
        for x, s in zip(self.experts, cands.experts, strict=False):
            s2, i, dims = s.to(torch.float64) ** 2, x.shape[-1], tuple(range(-len(x.shape), 0))
            gu, gd = grads.get(id(x.gate_up)), grads.get(id(x.down))
            if gu is not None:  # squared norms of the up rows (n_experts, d_expert); the gate rows do not move
                total = total + (_row_sq(gu[..., i:, :]) / s2).sum(dims) + _row_sq(gu[..., :i, :]).sum()
            if gd is not None:  # of the down columns
                total = total + (gd.to(torch.float64).pow(2).sum(-2) * s2).sum(dims)
        return total

    @staticmethod
    def _gram_rows(lin: nn.Linear, grads: dict[int, torch.Tensor], h: int):
        gw = None if lin is None else grads.get(id(lin.weight))
        if gw is None:
            return 0
        rows = _heads_rows(gw.to(torch.float64), h)  # (H, Dh, d)
        gb = None if lin.bias is None else grads.get(id(lin.bias))
        if gb is not None:
            rows = torch.cat((rows, _heads_rows(gb.to(torch.float64), h)[..., None]), dim=-1)
        return rows @ rows.transpose(-1, -2)


def _inner(a: torch.Tensor, s) -> torch.Tensor | float:
    """<a, s> over the last two dims, summed over heads: a (..., H, D, D), s (H, D, D) -> (...)."""
    if isinstance(s, int):
        return 0.0
    return (a * s).sum((-1, -2, -3))


def _row_sq(t):
    return 0 if t is None else t.to(torch.float64).pow(2).sum(-1)


def _vec_sq(t):
    return 0 if t is None else t.to(torch.float64).pow(2)


def symmetry_group(
    model: nn.Module, positions: torch.Tensor | None = None, ffn: bool = True, attention: list | None = None
) -> SymmetryGroup:
    """Inspect a model and return its symmetry group.

    positions: (N, C) positions used to compute the ESPR commutant (default: random generic points).
    ffn: include positive rescaling of ReLU FeedForward hidden units (GELU/SwiGLU have none).
    attention: declarations of the model's own attention layers (teleport.declare.AttentionLayer); with them the HF
    families' builders are not consulted (symformer's MultiHeadAttention layers are still found)."""
    from symformer.models import FeedForward, attention_layers

    for build in EXTERNAL_BUILDERS if attention is None else ():
        group = build(model, positions, ffn)
        if group is not None:
            return group
    if not isinstance(model, nn.Module):
        fail("model", type(model).__name__, "a torch.nn.Module", TypeError)
    names = {id(m): n for n, m in model.named_modules()}
    sites, fused = [], []
    for m in attention_layers(model):
        if not (isinstance(m.core, AttentionCore) and m.core.exact_softmax):
            fail(
                "attention",
                type(m.core).__name__,
                "an exact softmax core (AttentionCore.exact_softmax: softmax, "
                "naive): approximate kernels are not invariant under GL(d_h)",
            )
        if m.v_proj.out_features != m.n_heads * m.head_dim:
            fail("model", "value dim != n_heads * head_dim", "square per-head value blocks")
        sites.append(AttentionSite(names[id(m)], m, qk_group_for(m.rotary, m.head_dim, positions)))
    if attention is not None:
        from symformer.teleport.declare import declared_sites, symformer_projections

        declared, fused = declared_sites(model, attention, positions, symformer_projections(sites))
        sites += declared
    if not sites:
        fail(
            "model",
            type(model).__name__,
            "a model with MultiHeadAttention layers, or attention=[teleport."
            "AttentionLayer(...)] declaring its own; a supported HF model: import symformer.integrations.hf",
        )
    ffns = [f for f in model.modules() if isinstance(f, FeedForward) and f.activation == "relu"] if ffn else []
    return SymmetryGroup(sites, ffns, positions, fused=fused)
