"""The symmetry group of a model: the product of its components (component.Component; the kinds in
attention_parts.py and weight_parts.py), its elements, and `symmetry_group`, which finds the components of a
symformer model, of declared attention layers (declare.py), or of another library's model through a registered
builder (`register_group_builder`; symformer.integrations.hf.teleport registers the Hugging Face families).

Per attention layer the group is S_h x (G_QK x GL(d_h))^h (paper Sec. 3): Q rows <- U rows, K rows <- U^{-T} rows,
V rows <- V rows, O columns <- columns V^{-1} per head, then the heads permuted. Which U are allowed depends on the
positional encoding (each rotary part declares it: RotaryPositional.qk_symmetry):
  * none / additive PE: GL(d_h) (eq. (5)-(6));
  * RoPE: H(d_h) of eq. (9), block-diagonal scaled rotations on exactly the pairs the RoPE rotates;
  * STRING (R = P R_rope P^T): P H(d_h) P^T  (not in the paper);
  * ESPR: the commutant of every relative rotation R(r_i)^T R(r_j), computed numerically (not in the
    paper; we prove nothing beyond q^T U^T M U^{-T} k = q^T M k when U^T commutes with M).
ReLU FFN hidden units admit positive rescaling (weight_parts.MLPScaling).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from symformer._validation import check_float, check_int, fail
from symformer.attention.softmax import AttentionCore
from symformer.models import FeedForward, attention_layers
from symformer.positional.rope import RoPE
from symformer.teleport.attention_parts import attention_parts
from symformer.teleport.component import AttentionSite, Component
from symformer.teleport.declare import declared_sites, symformer_projections
from symformer.teleport.qk_groups import qk_group_for
from symformer.teleport.weight_parts import ExpertScaling, FusedRows, MLPScaling


# ---------------------------------------------------------------- elements
def _part(kind: str) -> property:
    def get(self) -> list:
        return self.parts.setdefault(kind, [])

    def put(self, value) -> None:
        self.parts[kind] = list(value)

    return property(get, put, doc=f"The factors of the group's {kind!r} components.")


class GroupElement:
    """One factor per component of a group, by kind: `parts[kind][i]` acts through `group.part(kind)[i]`. A kind the
    element lacks (an empty list) or a None factor is the identity there. Candidates (SymmetryGroup.sample) carry a
    leading sample dimension on every factor. The action is first the per-head factors and scalings, then the head
    permutations (new head i = transformed old head `perm[i]`).

    Args:
        qk (list): Q/K factors, one (H_kv, Dh, Dh) per layer.
        vo (list): V/O factors, one (H_kv, Dv, Dv) per layer.
        perm (list): head permutations, one (H_kv,) int64 per layer.
        ffn (list): MLP scalings, one (d_ff,) per ReLU FFN.
        norm (list): q/k-norm scalings.
        experts (list): expert scalings.
        **parts (list): the factors of other kinds, by kind.

    Examples:
        >>> import torch
        >>> from symformer.models import CausalLM, TransformerConfig
        >>> from symformer.teleport import symmetry_group
        >>> cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=2, positional="rope", mlp="relu")
        >>> group = symmetry_group(CausalLM(cfg, vocab_size=11))
        >>> g = group.random(torch.Generator().manual_seed(0))
        >>> g  # factors per kind
        GroupElement(qk=2, vo=2, perm=2, ffn=2)
        >>> g.qk[0].shape, g.perm[0].shape, g.ffn[0].shape
        (torch.Size([2, 4, 4]), torch.Size([2]), torch.Size([32]))
        >>> cands = group.sample(5, alpha=0.1, gen=torch.Generator().manual_seed(0))  # 5 candidates near I
        >>> cands.qk[0].shape, cands.pick(3).qk[0].shape
        (torch.Size([5, 2, 4, 4]), torch.Size([2, 4, 4]))
    """

    def __init__(self, qk=(), vo=(), perm=(), ffn=(), norm=(), experts=(), **parts):
        self.parts: dict[str, list] = {
            k: list(v)
            for k, v in {
                "qk": qk,
                "vo": vo,
                "perm": perm,
                "ffn": ffn,
                "norm": norm,
                "experts": experts,
                **parts,
            }.items()
        }

    qk, vo, perm, ffn, norm, experts = (_part(k) for k in ("qk", "vo", "perm", "ffn", "norm", "experts"))

    def pick(self, i: int) -> GroupElement:
        """Candidate i of a batch of candidates."""
        return GroupElement(**{k: [None if x is None else x[i] for x in v] for k, v in self.parts.items()})

    def detach(self) -> GroupElement:
        return GroupElement(**{k: [None if x is None else x.detach() for x in v] for k, v in self.parts.items()})

    def __repr__(self) -> str:
        return f"GroupElement({', '.join(f'{k}={len(v)}' for k, v in self.parts.items() if v)})"


def _on(x, device):
    return x.to(device) if torch.is_tensor(x) and device is not None and x.device != device else x


# ---------------------------------------------------------------- the product
class SymmetryGroup:
    """The product of a model's components (kept in the order their candidate norms are summed, Component.sum_rank).
    positions: (N, C) positions for groups computed from relative rotations (ESPR's commutant).

    Args:
        components (list[Component]): the components, one per kind of symmetry and site.
        positions (N, C): the positions `refresh` recomputes learned groups at (None: generic ones).

    Examples:
        >>> import torch
        >>> from symformer.models import CausalLM, TransformerConfig
        >>> from symformer.teleport import symmetry_group
        >>> cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=2, positional="rope", mlp="relu")
        >>> model, ids = CausalLM(cfg, vocab_size=11).double(), torch.randint(0, 11, (2, 6))
        >>> group = symmetry_group(model)
        >>> group
        SymmetryGroup(layers=2, qk_groups=['h'], qk: 2, vo: 2, ffn: 2, perm: 2)
        >>> before, weights = model(ids), [p.detach().clone() for p in group.parameters()]
        >>> g = group.random(torch.Generator().manual_seed(0))
        >>> group.apply(model, g)  # theta <- g theta: the same function
        >>> torch.allclose(model(ids), before)
        True
        >>> group.apply(model, group.inverse(g))  # and back
        >>> all(torch.allclose(p, w) for p, w in zip(group.parameters(), weights))
        True
    """

    def __init__(self, components: list[Component], positions: torch.Tensor | None = None):
        for i, c in enumerate(components):
            if not isinstance(c, Component):
                fail(f"components[{i}]", type(c).__name__, "a teleport Component", TypeError)
        self.components = sorted(components, key=lambda c: c.sum_rank)  # stable: a kind keeps its given order
        self.positions = positions

    def part(self, kind: str) -> list[Component]:
        """The components of one kind, in the order an element's factors of that kind follow."""
        return [c for c in self.components if c.kind == kind]

    def kinds(self) -> list[str]:
        """The kinds elements carry, in draw order."""
        return list(dict.fromkeys(c.kind for c in sorted(self.components, key=lambda c: c.rank) if c.factor))

    @property
    def sites(self) -> list[AttentionSite]:
        """The attention layers, in order (one Q/K factor each)."""
        return [c.site for c in self.part("qk")]

    @property
    def ffns(self) -> list[MLPScaling]:
        return self.part("ffn")

    @property
    def experts(self) -> list[ExpertScaling]:
        return self.part("experts")

    @property
    def fused(self) -> list[FusedRows]:
        return self.part("fused")

    def dependent_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters the group itself depends on (STRING's P, ESPR generators). L(g theta, phi) =
        L(theta, phi) holds only at the current phi, so their gradient is NOT a linear image of the old one:
        the teleport criterion leaves them out and the gradient is recomputed after a teleport."""
        return [p for c in self.components for p in c.dependent_parameters()]

    def refresh(self) -> None:
        """Recompute the parts that depend on learned rotations (STRING's P, ESPR's generators): the group is the
        stabiliser of the *current* positional parameters, which training moves."""
        for c in self.components:
            c.refresh(self.positions)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}: {len(self.part(k))}" for k in dict.fromkeys(c.kind for c in self.components))
        return f"SymmetryGroup(layers={len(self.sites)}, qk_groups={sorted({s.qk.kind for s in self.sites})}, {counts})"

    def qk_dimensions(self) -> list[int]:
        return [s.qk.dimension for s in self.sites]

    def parameters(self) -> list[nn.Parameter]:
        """Every parameter the group acts on, once (a fused parameter, never its row blocks)."""
        views = {id(v) for c in self.components for v in c.views()}
        return list({id(p): p for c in self.components for p in c.parameters() if id(p) not in views}.values())

    # ---- elements
    def _draw(self, make: Callable[[Component], torch.Tensor | None]) -> GroupElement:
        """One factor per component, drawn kind by kind (Component.rank): the recorded draw order."""
        return GroupElement(**{k: [make(c) for c in self.part(k)] for k in self.kinds()})

    def identity(self, dtype=torch.float64) -> GroupElement:
        return self._draw(lambda c: c.identity((), dtype))

    def random(
        self, gen: torch.Generator, dtype=torch.float64, scale: float = 0.5, permute: bool = True, ffn: bool = True
    ) -> GroupElement:
        """A generic element (general GL / H / commutant matrices, random permutations and scalings).

        Args:
            gen (torch.Generator): the draw (elements are drawn on the CPU).
            dtype (torch.dtype): the factors' dtype.
            scale (float): spread of the factors around the identity.
            permute (bool): draw head permutations (else the identity).
            ffn (bool): draw MLP and expert scalings (else the identity).

        Returns:
            g (GroupElement): one factor per component.
        """
        on = {"permute": permute, "ffn": ffn}
        return self._draw(
            lambda c: c.random((), gen, dtype, scale) if on.get(c.switch, True) else c.identity((), dtype)
        )

    def sample(
        self, n: int, alpha: float, gen: torch.Generator, dtype=torch.float64, ffn: bool = False
    ) -> GroupElement:
        """n candidates near the identity (Sec. 4, eq. (14)): every factor gets a leading dim n.

        Args:
            n (int): the number of candidates.
            alpha (float): their radius, in (0, 1).
            gen (torch.Generator): the draw.
            dtype (torch.dtype): the factors' dtype.
            ffn (bool): sample MLP and expert scalings (else the identity).

        Returns:
            candidates (GroupElement): every factor with a leading dim n (`pick(i)` is candidate i).
        """
        check_int("samples", n, 1)
        check_float("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
        on = {"ffn": ffn}
        return self._draw(
            lambda c: c.near_identity((n,), alpha, gen, dtype) if on.get(c.switch, True) else c.identity((n,), dtype)
        )

    @staticmethod
    def pick(cands: GroupElement, i: int) -> GroupElement:
        return cands.pick(i)

    def _factors(self, g: GroupElement) -> list[tuple[Component, object]]:
        """(component, its factor in g) in component order; a kind g lacks is the identity."""
        if not isinstance(g, GroupElement):
            fail("element", type(g).__name__, "a GroupElement", TypeError)
        factor = {}
        for kind in dict.fromkeys(c.kind for c in self.components):
            comps, xs = self.part(kind), g.parts.get(kind) or []
            if xs and len(xs) != len(comps):
                fail(f"element.{kind}", f"{len(xs)} factors", f"{len(comps)} (one per {kind} component), or none")
            factor.update({id(c): x for c, x in zip(comps, xs or [None] * len(comps), strict=True)})
        ps = self.parameters()  # elements are drawn on the CPU (the same draws on every device); act where theta is
        dev = ps[0].device if ps else None
        return [(c, _on(factor[id(c)], dev)) for c in self.components]

    def inverse(self, g: GroupElement) -> GroupElement:
        """g = perm o factors, so g^{-1} = perm^{-1} o (factors^{-1} re-indexed by perm): U'_i = U_{perm[i]}^{-1}.

        Args:
            g (GroupElement): an element of this group.

        Returns:
            g_inv (GroupElement): its inverse, apply(g) then apply(g_inv) is the identity.
        """
        pairs = self._factors(g)
        perms = {id(c.site): x for c, x in pairs if c.permutes_heads and x is not None}
        parts: dict[str, list] = {k: [] for k in self.kinds()}
        for c, x in pairs:
            if not c.factor:
                continue
            inv = None if x is None else c.inverse(x)
            p = None if c.permutes_heads or c.site is None else perms.get(id(c.site))
            parts[c.kind].append(inv if inv is None or p is None else c.reindex(inv, p))
        return GroupElement(**parts)

    # ---- actions
    def _act(self, g: GroupElement, src: dict[int, torch.Tensor], grad: bool) -> dict[int, torch.Tensor]:
        for c in self.components:
            c.prepare(src, grad)
        out: dict[int, torch.Tensor] = {}
        for c, x in sorted(self._factors(g), key=lambda cx: cx[0].stage):
            (c.grads if grad else c.weights)(x, src, out)
        return {k: v.to(src[k].dtype) for k, v in out.items()}  # each result rounded once to its tensor's dtype

    def transformed(self, g: GroupElement) -> dict[int, torch.Tensor]:
        """New values of every acted-on parameter (keyed by id(param)); differentiable in g.

        Args:
            g (GroupElement): an element.

        Returns:
            new (dict[int, Tensor]): id(param) -> g theta for that parameter, in its dtype.
        """
        return self._act(g, {id(p): p for c in self.components for p in c.parameters()}, grad=False)

    @torch.no_grad()
    def apply(self, model: nn.Module, g: GroupElement) -> None:
        """theta <- g theta, in place.

        Args:
            model (nn.Module): the model the group was built for.
            g (GroupElement): the element to apply (a kind it lacks is left alone).
        """
        new = self.transformed(g)
        for p in self.parameters():
            if id(p) in new:  # an element without some part leaves those parameters alone
                p.copy_(new[id(p)])

    def grad_action(self, g: GroupElement, tensors: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Gradient at g theta from the gradient at theta (the loss is invariant and the action linear: G -> A^{-T} G
        for theta -> A theta). `tensors` maps id(param) -> gradient-like tensor (momentum too); missing entries are
        skipped.

        Args:
            g (GroupElement): an element.
            tensors (dict[int, Tensor]): id(param) -> a gradient-like tensor of that parameter's shape.

        Returns:
            moved (dict[int, Tensor]): id(param) -> the tensor at g theta.
        """
        return self._act(g, dict(tensors), grad=True)

    def candidate_sq_norms(self, grads: dict[int, torch.Tensor], cands: GroupElement) -> torch.Tensor:
        """sum over acted-on params of ||grad at g_i theta||^2 for each candidate i (leading dim M).

        ||A G||_F^2 = <A^T A, G G^T>: per head one Gram matrix of the gradient, then O(Dh^3) per
        candidate, independent of d_model and batch size.

        Args:
            grads (dict[int, Tensor]): id(param) -> its gradient.
            cands (GroupElement): candidates from `sample` (leading dim M).

        Returns:
            sq_norms (M,): float64, the squared gradient norm at each candidate.
        """
        src = dict(grads)
        for c in self.components:
            c.prepare(src, grad=True)
        total = 0.0
        for c, x in self._factors(cands):
            total = c.add_sq_norms(total, x, src)
        return total


# ---------------------------------------------------------------- building a model's group
_BUILDERS: dict[str, Callable] = {}


def register_group_builder(name: str, builder: Callable) -> None:
    """Let symmetry_group understand another library's models: builder(model, positions, ffn) -> SymmetryGroup, or
    None for a model it does not know. Called explicitly by the integration's code that needs it
    (symformer.integrations.hf.teleport.register_hf_groups); this layer never imports an integration.

    Args:
        name (str): the builder's name (registering a name again replaces its builder).
        builder (Callable): (model, positions, ffn) -> SymmetryGroup, or None for a model it does not know.

    Examples:
        >>> import torch
        >>> from symformer.models import CausalLM, TransformerConfig
        >>> from symformer.teleport import group_builders, register_group_builder, symmetry_group
        >>> class Wrapped(torch.nn.Module):  # another library's model, holding a symformer model out of sight
        ...     def __init__(self, inner):
        ...         super().__init__()
        ...         object.__setattr__(self, "inner", inner)
        >>> def build(model, positions, ffn):
        ...     return symmetry_group(model.inner, positions, ffn) if isinstance(model, Wrapped) else None
        >>> register_group_builder("wrapped", build)
        >>> cfg = TransformerConfig(d_model=8, n_heads=2, n_layers=2)
        >>> len(symmetry_group(Wrapped(CausalLM(cfg, vocab_size=11))).sites), "wrapped" in group_builders()
        (2, True)
    """
    if not callable(builder):
        fail("builder", type(builder).__name__, "a callable (model, positions, ffn) -> SymmetryGroup | None", TypeError)
    _BUILDERS[str(name)] = builder


def group_builders() -> dict[str, Callable]:
    """The registered builders by name (register_group_builder).

    Returns:
        builders (dict[str, Callable]): a copy, name -> builder.

    Examples:
        >>> from symformer.teleport import group_builders
        >>> all(callable(b) for b in group_builders().values())
        True
    """
    return dict(_BUILDERS)


def symmetry_group(
    model: nn.Module, positions: torch.Tensor | None = None, ffn: bool = True, attention: list | None = None
) -> SymmetryGroup:
    """Inspect a model and return its symmetry group.

    positions: (N, C) positions at which the ESPR commutant is computed (default: random generic points).
    ffn: include positive rescaling of ReLU FeedForward hidden units (GELU/SwiGLU have none).
    attention: declarations of the model's own attention layers (teleport.declare.AttentionLayer); with them the
    registered builders (register_group_builder) are not consulted (symformer's MultiHeadAttention layers are still
    found).

    Args:
        model (nn.Module): a symformer model, a model a registered builder knows, or one with `attention` declared.
        positions (N, C): positions for groups computed from relative rotations (None: generic points).
        ffn (bool): include the ReLU FFN rescalings.
        attention (list[AttentionLayer] | None): the model's own attention layers.

    Returns:
        group (SymmetryGroup): the product of the model's components.

    Raises:
        ValueError: an approximate attention core (FAVOR+, PLASH), or no attention layer found.

    Examples:
        >>> import torch
        >>> from symformer.models import TransformerConfig, ViTClassifier
        >>> from symformer.teleport import symmetry_group
        >>> cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, positional="rope", coord_dim=2, mlp="relu")
        >>> model = ViTClassifier(cfg, token_dim=4, n_classes=10).double()
        >>> x, pos = torch.randn(3, 16, 4, dtype=torch.float64), torch.cartesian_prod(torch.arange(4), torch.arange(4))
        >>> before = model(x, pos)
        >>> group = symmetry_group(model, ffn=True)
        >>> group.apply(model, group.random(torch.Generator().manual_seed(1)))
        >>> torch.allclose(model(x, pos), before, atol=1e-10)  # same function, other weights
        True
    """

    for build in _BUILDERS.values() if attention is None else ():
        group = build(model, positions, ffn)
        if group is not None:
            return group
    if not isinstance(model, nn.Module):
        fail("model", type(model).__name__, "a torch.nn.Module", TypeError)
    names = {id(m): n for n, m in model.named_modules()}
    sites, parts, carried = [], [], {}
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
        carried[sites[-1].name] = per_head_frequencies(m.rotary)
    if attention is not None:
        declared, fused = declared_sites(model, attention, positions, symformer_projections(sites))
        sites, parts = sites + declared, list(fused)
    if not sites:
        fail(
            "model",
            type(model).__name__,
            "a model with MultiHeadAttention layers, or attention=[teleport.AttentionLayer(...)] declaring its own; a "
            "supported HF model: symformer.integrations.hf.symmetry_group (or hf.teleport.register_hf_groups())",
        )
    ffns = [f for f in model.modules() if isinstance(f, FeedForward) and f.activation == "relu"] if ffn else []
    comps = [c for s in sites for c in attention_parts(s, carried=carried.get(s.name, ()))]
    comps += [MLPScaling(f) for f in ffns] + parts
    return SymmetryGroup(comps, positions)


def per_head_frequencies(rotary: nn.Module | None) -> tuple:
    """Per-head rotary frequencies (RoPE-Mixed's beta (H, Dh/2, C), also inside STRING / partial parts): a head
    permutation must carry them with the heads' weights, or it would no longer be a symmetry."""
    if rotary is None:
        return ()
    return tuple(m.beta for m in rotary.modules() if isinstance(m, RoPE) and m.beta.ndim == 3)


__all__ = ["GroupElement", "SymmetryGroup", "group_builders", "register_group_builder", "symmetry_group"]
