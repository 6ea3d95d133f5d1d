"""Attention layers declared by the user: teleporting a model that has neither symformer's MultiHeadAttention nor
the layout of a supported Hugging Face family (a hand-written GPT with a fused qkv projection, say).

An `AttentionLayer` names a layer's projections (nn.Linear modules of the model, or their dotted names in it) and
states what its forward computes, which symformer cannot read from the module:
  * heads are contiguous in the projections' output features (head h owns features h*Dh:(h+1)*Dh of q, of k and
    of v, and the same input features of o), as `.view(B, N, H, Dh)` reads them;
  * a fused qkv's rows are [W_Q; W_K; W_V] ("blocks": `qkv(x).split(...)`, `.view(B, N, 3, H, Dh)`) or
    [q_h; k_h; v_h] head by head ("heads": `.view(B, N, H, 3 * Dh)`, GPT-NeoX; no grouped-query attention);
  * grouped-query attention: query head h reads key/value head h // (n_heads / kv_heads) (repeat_interleave);
  * exact softmax of (R_i q)^T (R_j k) with `rotary` the symformer RotaryPositional applied to q and k (or none),
    nothing else (no q/k norm, clamp or gate) between the projections and the product, and the heads' outputs
    concatenated in head order before o. A layer whose module holds a symformer core that only approximates softmax
    (FAVOR+, PLASH: `AttentionCore.exact_softmax` False) is refused up front with a ValueError naming
    `attention[i]`, as symformer's own layers running them are: their outputs change under the group.
Each declaration becomes the same AttentionSite (on row blocks of a fused projection: FusedRows) that an HF family
with that layout produces (integrations.hf.teleport builds those from the helpers here), so the group, its actions
and the teleporters are the ones every other model uses. A wrong declaration is caught at run time: a teleport that
moves the batch loss is undone, with one warning per teleport step (teleport.teleport_step).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

import torch
from torch import nn

from symformer._validation import check_choice, check_int, fail
from symformer.attention.softmax import AttentionCore
from symformer.positional.base import RotaryPositional
from symformer.teleport.component import AttentionSite
from symformer.teleport.qk_groups import qk_group_for
from symformer.teleport.weight_parts import FusedRows

LAYOUTS = ("blocks", "heads")


# ---------------------------------------------------------------- row blocks of fused projections
class RowBlock:
    """One projection's rows of a fused Linear (FusedRows blocks: stable tensors refreshed from the fused
    parameters before each use), with the attribute names AttentionSite reads of a projection."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight, self.bias = weight, bias


def qkv_rows(layout: str, n_heads: int, kv_heads: int, dh: int) -> list[torch.Tensor]:
    """Row indices of q, k and v in a fused projection: "blocks" [q; k; v] (Phi-3), "heads" [q_h; k_h; v_h] head by
    head (GPT-NeoX, no GQA)."""
    if layout == "heads":
        idx = torch.arange(3 * n_heads * dh).view(n_heads, 3, dh)
        return [idx[:, j].flatten() for j in range(3)]
    nq, nkv = n_heads * dh, kv_heads * dh
    return [torch.arange(nq), torch.arange(nq, nq + nkv), torch.arange(nq + nkv, nq + 2 * nkv)]


def head_rows(n_heads: int, width: int, start: int, size: int) -> torch.Tensor:
    """Row indices [start, start + size) of every head in a projection of n_heads blocks of `width` rows."""
    return (torch.arange(n_heads)[:, None] * width + start + torch.arange(size)).flatten()


def fused_blocks(lin: nn.Linear, rows: list[torch.Tensor], passive: tuple[int, ...] = ()):
    """(FusedRows of the weight and bias, the row blocks as RowBlocks)."""
    fused = [FusedRows(p, rows, passive) for p in (lin.weight, lin.bias) if p is not None]
    biases = fused[1].blocks if lin.bias is not None else [None] * len(rows)
    return fused, [RowBlock(w, b) for w, b in zip(fused[0].blocks, biases, strict=True)]


# ---------------------------------------------------------------- declarations
@dataclass
class AttentionLayer:
    """One attention layer of a user's model (module docstring): `q`, `k`, `v` and `o`, or a fused `qkv` (row
    `layout` "blocks" or "heads") and `o`; each an nn.Linear of the model or its dotted name in it. n_heads: query
    heads; kv_heads: key/value heads under grouped-query attention (None: n_heads); rotary: the symformer
    RotaryPositional the forward applies to q and k (RoPE, STRING, ESPR, ...), or None (no rotation, or additive
    positions outside the layer); name: for messages (default: the projections' common prefix).

    Args:
        n_heads (int): query heads.
        o (nn.Module | str | None): the output projection (an nn.Linear of the model or its dotted name).
        qkv (nn.Module | str | None): a fused q/k/v projection, rows in `layout`.
        q (nn.Module | str | None): the query projection (with k and v, instead of qkv).
        k (nn.Module | str | None): the key projection.
        v (nn.Module | str | None): the value projection.
        layout (str): "blocks" ([W_Q; W_K; W_V]) or "heads" ([q_h; k_h; v_h] head by head).
        kv_heads (int | None): key/value heads under grouped-query attention (None: n_heads).
        rotary (nn.Module | None): the RotaryPositional applied to q and k, or None.
        name (str | None): the layer's name in messages.

    Examples:
        >>> import torch
        >>> import torch.nn.functional as F
        >>> from torch import nn
        >>> from symformer.positional import RoPE
        >>> from symformer.teleport import AttentionLayer, symmetry_group
        >>> class Attention(nn.Module):  # fused qkv, 2 heads of 4, RoPE on q and k
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.qkv, self.o, self.rope = nn.Linear(8, 24), nn.Linear(8, 8), RoPE(4)
        ...     def forward(self, x):
        ...         q, k, v = (t.view(1, -1, 2, 4).transpose(1, 2) for t in self.qkv(x).split(8, dim=-1))
        ...         q, k = self.rope(q, k, torch.arange(x.shape[1]))
        ...         return self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, -1, 8))
        >>> model, x = Attention().double(), torch.randn(1, 5, 8, dtype=torch.float64)
        >>> before = model(x)
        >>> layers = [AttentionLayer(2, qkv=model.qkv, o=model.o, rotary=model.rope)]
        >>> group = symmetry_group(model, attention=layers)
        >>> group.apply(model, group.random(torch.Generator().manual_seed(0)))
        >>> torch.allclose(model(x), before)
        True
    """

    n_heads: int
    _: KW_ONLY
    o: nn.Module | str | None = None
    qkv: nn.Module | str | None = None
    q: nn.Module | str | None = None
    k: nn.Module | str | None = None
    v: nn.Module | str | None = None
    layout: str = "blocks"
    kv_heads: int | None = None
    rotary: nn.Module | None = None
    name: str | None = None


def _resolve(model: nn.Module, modules: dict, names: dict, where: str, lin) -> tuple[nn.Linear, str]:
    """(the Linear, its dotted name in the model); ValueError for a name or module the model does not hold."""
    if isinstance(lin, str):
        if lin not in modules:
            fail(
                where,
                lin,
                f"the dotted name of an nn.Linear of the model ({type(model).__name__} has no such submodule)",
            )
        lin = modules[lin]
    if not isinstance(lin, nn.Linear):
        fail(where, type(lin).__name__, "an nn.Linear of the model (or its dotted name)", TypeError)
    if id(lin) not in names:
        fail(
            where,
            f"Linear({lin.in_features}, {lin.out_features})",
            f"a submodule of the model (this Linear is not in {type(model).__name__})",
        )
    return lin, names[id(lin)]


def _projections(model, decl: AttentionLayer, where: str, modules: dict, names: dict) -> dict[str, tuple]:
    """{"q"/"k"/"v"/"qkv", "o": (Linear, name)} after checking which were given."""
    given = {k: getattr(decl, k) for k in ("qkv", "q", "k", "v", "o") if getattr(decl, k) is not None}
    if decl.o is None:
        fail(f"{where}.o", None, "the output projection (an nn.Linear or its name)")
    if decl.qkv is not None and {"q", "k", "v"} & given.keys():
        fail(where, sorted(given), "either qkv (fused) or q, k and v, not both")
    if decl.qkv is None and not {"q", "k", "v"} <= given.keys():
        fail(where, sorted(given), "q, k, v and o, or qkv and o")
    return {k: _resolve(model, modules, names, f"{where}.{k}", lin) for k, lin in given.items()}


def _common_prefix(proj: dict[str, tuple]) -> str:
    """The dotted name of the module holding all the projections ("" for the model itself)."""
    parts = [n.split(".")[:-1] for _, n in proj.values()]
    common = []
    for seg in zip(*parts):
        if len(set(seg)) > 1:
            break
        common.append(seg[0])
    return ".".join(common)


def _layer_name(decl: AttentionLayer, proj: dict[str, tuple]) -> str:
    if decl.name is not None:
        return str(decl.name)
    return _common_prefix(proj) or proj["o"][1]


def _check_exact_core(modules: dict, proj: dict[str, tuple], where: str) -> None:
    """ValueError naming `where` when the module holding the projections runs a symformer attention core that is not
    an exact softmax (FAVOR+, PLASH): their outputs change under the Q/K group (GL(d_h) or the rotary commutant) and
    PLASH's also under the V/O group, so the loss would move. symformer's own layers are refused the same way
    (groups.symmetry_group)."""
    prefix = _common_prefix(proj)
    for sub, mod in modules[prefix].named_modules(prefix=prefix):
        if isinstance(mod, AttentionCore) and not mod.exact_softmax:
            fail(
                where,
                f"a layer running {type(mod).__name__} ({sub})",
                "a declared layer computing an exact softmax (F.scaled_dot_product_attention, symformer's softmax or "
                "naive cores): approximate kernels (FAVOR+, PLASH) are not invariant under the attention group, so "
                "teleporting them would change the loss",
            )


def _shapes(name: str, decl: AttentionLayer, proj: dict[str, tuple]) -> tuple[int, int, int]:
    """(n_heads, kv_heads, head_dim), ValueError naming the layer and the shapes where they disagree."""
    h = check_int(f"{name}: n_heads", decl.n_heads, 1)
    hk = h if decl.kv_heads is None else check_int(f"{name}: kv_heads", decl.kv_heads, 1)
    if h % hk:
        fail(
            f"{name}: kv_heads", hk, f"a divisor of n_heads={h} (each key head read by n_heads / kv_heads query heads)"
        )
    o = proj["o"][0]
    if o.in_features % h:
        fail(
            f"{name}: o",
            f"in_features {o.in_features}",
            f"a multiple of n_heads={h} (o reads the heads' outputs concatenated)",
        )
    dh = o.in_features // h
    shapes = {k: tuple(lin.weight.shape) for k, (lin, _) in proj.items()}
    if decl.qkv is not None:
        layout = check_choice(f"{name}: layout", decl.layout, LAYOUTS)
        if layout == "heads" and hk != h:
            fail(
                f"{name}: layout",
                layout,
                "'blocks' under grouped-query attention (the 'heads' layout, "
                "[q_h; k_h; v_h] per head, has one key head per query head)",
            )
        want = {"qkv": (h + 2 * hk) * dh}
    else:
        want = {"q": h * dh, "k": hk * dh, "v": hk * dh}
    bad = {k: shapes[k] for k, n in want.items() if shapes[k][0] != n}
    d_in = {lin.in_features for k, (lin, _) in proj.items() if k != "o"} | {o.out_features}
    if bad or len(d_in) > 1:
        fail(
            f"attention layer {name}",
            f"weights {shapes}",
            f"{want} output features for n_heads={h}, "
            f"kv_heads={hk}, head_dim={dh} (head_dim = o.in_features / n_heads) and one model width",
        )
    return h, hk, dh


class DeclaredAttention:
    """What AttentionSite reads of a declared layer (the attribute names of symformer's MultiHeadAttention): the
    projections, or row blocks of the fused qkv (`fused`: their FusedRows)."""

    def __init__(self, decl: AttentionLayer, proj: dict[str, tuple], h: int, hk: int, dh: int):
        self.n_heads, self.head_dim, self.rotary, self.o_proj = h, dh, decl.rotary, proj["o"][0]
        self.fused: list[FusedRows] = []
        if "qkv" in proj:
            self.fused, (self.q_proj, self.k_proj, self.v_proj) = fused_blocks(
                proj["qkv"][0], qkv_rows(decl.layout, h, hk, dh)
            )
        else:
            self.q_proj, self.k_proj, self.v_proj = (proj[k][0] for k in ("q", "k", "v"))


def declared_sites(
    model: nn.Module, layers, positions: torch.Tensor | None = None, taken: dict[int, str] | None = None
) -> tuple[list[AttentionSite], list[FusedRows]]:
    """The sites and fused row blocks of the declared layers (module docstring). taken: id(Linear) -> layer name
    of projections already in the group (symformer's own layers): declaring one of them again is an error."""
    if isinstance(layers, AttentionLayer) or not isinstance(layers, (list, tuple)):
        fail("attention", type(layers).__name__, "a list of AttentionLayer declarations", TypeError)
    modules, seen = dict(model.named_modules()), dict(taken or {})
    names = {id(m): n for n, m in modules.items()}
    sites, fused = [], []
    for i, decl in enumerate(layers):
        if not isinstance(decl, AttentionLayer):
            fail(f"attention[{i}]", type(decl).__name__, "an AttentionLayer declaration", TypeError)
        proj = _projections(model, decl, f"attention[{i}]", modules, names)
        name = _layer_name(decl, proj)
        _check_exact_core(modules, proj, f"attention[{i}]")
        for k, (lin, lname) in proj.items():
            if id(lin) in seen:
                fail(
                    f"attention[{i}].{k}", lname, f"a projection declared once (it is already in layer {seen[id(lin)]})"
                )
            seen[id(lin)] = name
        h, hk, dh = _shapes(name, decl, proj)
        if decl.rotary is not None and not isinstance(decl.rotary, RotaryPositional):
            fail(
                f"{name}: rotary",
                type(decl.rotary).__name__,
                "a symformer RotaryPositional (RoPE, STRING, ESPR, ...) applied to q and k, or None",
                TypeError,
            )
        rot_dim = getattr(decl.rotary, "head_dim", dh)
        if decl.rotary is not None and rot_dim != dh:
            fail(
                f"{name}: rotary",
                f"{type(decl.rotary).__name__}(head_dim={rot_dim})",
                f"a rotary part of head_dim={dh} (o.in_features / n_heads)",
            )
        view = DeclaredAttention(decl, proj, h, hk, dh)
        sites.append(AttentionSite(name, view, qk_group_for(decl.rotary, dh, positions), hk))
        fused += view.fused
    return sites, fused


def symformer_projections(sites: list[AttentionSite]) -> dict[int, str]:
    """id(Linear) -> layer name for the projections of symformer's own layers (declared_sites' `taken`)."""
    return {
        id(lin): s.name for s in sites for lin in (s.module.q_proj, s.module.k_proj, s.module.v_proj, s.module.o_proj)
    }


__all__ = [
    "LAYOUTS",
    "AttentionLayer",
    "DeclaredAttention",
    "RowBlock",
    "declared_sites",
    "fused_blocks",
    "head_rows",
    "qkv_rows",
    "symformer_projections",
]
