"""Symmetry teleportation on Llama-family Hugging Face models, grouped-query attention included.

Per layer the group acts per KEY head g (H_kv of them, each read by r = H / H_kv query heads):
  Q rows of every query head of group g <- U_g rows,   K rows of head g <- U_g^{-T} rows,
  V rows of head g <- V_g rows,  O columns of every query head of group g <- cols V_g^{-1}.
Query head h = g r + j reads key head g (HF's repeat_kv is repeat_interleave), so q_h^T U_g^T M U_g^{-T} k_g =
q_h^T M k_g whenever U_g^T commutes with every relative rotation M (paper Sec. 3, eq. (9) for RoPE): U must be
shared by the query heads of one key head, and V by the query heads reading one value head. Head permutations
permute key groups (their query heads move along). The Q/K group comes from the layer's rotary part
(teleport.qk_groups.qk_group_for): the native HF RoPE is RoPE in the "half" pairing (H(d_h) on pairs (u, u+Dh/2)),
patched parts bring their own (STRING: P H P^T; ESPR, circulant STRING: the commutant). With ffn=True the
gated MLP down(act(gate x) * up x) also admits up rows <- s * rows, down columns <- columns / s (s > 0 or any
nonzero s: the product is linear in the up branch), each MoE expert too (teleport.ExpertScaling).
Qwen3 normalises q and k per head (RMSNorm, weights w_q, w_k of shape (Dh,)) between the projections and the
rotation, so no U passes through W_Q / W_K there (an H(d_h) factor changes the logits); its Q/K symmetry is
w_q <- d w_q, w_k <- w_k / d with diag(d) in the rotary's group: d constant on each RoPE pair for the native
rotation (teleport.NormScaling). V/O, head permutations and the MLP rescaling are as above. Gemma 3 has the
same norms with (1 + w) weights: w <- d (1 + w) - 1. OLMo 2 / 3 and OLMoE normalise q and k over all heads at once
(weights (H Dh,) and (H_kv Dh,)): the RMS does not see the weights, so the same scaling applies with one d per key
head (its query heads share it), and the weights follow a head permutation. Cohere's use_qk_norm LayerNorms have
per-head weights (H, Dh) and (H_kv, Dh), centred before the weights multiply: the same scalings, one d per key head,
apply. OLMoE with clip_qkv is refused. GPT-OSS's attention sinks (one logit per query head) are left alone by U and V
and follow a head permutation (teleport.HeadPermutation carries them).
Fused projections (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's head-by-head query_key_value) are acted on through
their row blocks (teleport.FusedRows, ExpertScaling); partial rotary embeddings (Phi-4-mini, GPT-NeoX) give
the rotary's group on the rotated block times GL on the rest (teleport.qk_groups.BlockGroup).
Hunyuan normalises q and k per head AFTER the rotation (query_layernorm, key_layernorm; weights (Dh,) shared by the
heads): the logit is n(R_i q)^T diag(w_q w_k) n(R_j k), so only the product w_q w_k counts and w_q <- d w_q,
w_k <- w_k / d holds for any positive d per coordinate, whatever the rotation; no U passes through the norms
(TrivialGroup on W_Q / W_K, whose scalings the norm's eps breaks); V/O and head permutations as above.
Output gates (Qwen3-Next and Qwen3.5 [q_h; g_h] rows of q_proj, AFMoE's gate_proj) multiply the attention output
elementwise before o_proj: sigmoid(g) * (A V D) = (sigmoid(g) * A V) D for a diagonal D only, so the V/O factor is
diagonal (teleport.qk_groups.DiagonalGroup, any nonzero entries) instead of GL(d_h); the gate rows follow a head
permutation and are otherwise fixed; the q/k norms carry the Q/K scalings as in Qwen3. Their Gated DeltaNet layers
(Qwen3-Next, Qwen3.5) are left alone.
NanoChat's norms after the rotation have no weights: the Q/K factor is trivial (a scaling U changes rms(U q)), V/O
and head permutations as above.
Multi-head latent attention (DeepSeek-V3: [nope; rope] query and key blocks per head, one rotated key block shared by
the heads, keys and values from a normed latent) is two sites per layer on row blocks (`_mla_parts`): GL(nope) per
head on the nope blocks of q_b_proj and kv_b_proj with GL(v) per head on kv_b_proj's value rows and o_proj's columns,
and one element of the rotary's group on the rope blocks, shared by every head because they all read the same key
block (a site with one key head and no values); the latent rows of kv_a_proj_with_mqa are left alone, and no head
permutation (the two sites share each head).

`HFTeleport` is `teleport.PlainLoopTeleport` (teleportation in a plain training loop) with these groups registered.
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import fail
from symformer.integrations.hf._common import (
    applies_rope,
    attention_modules,
    check_layer,
    family_of,
    flat_qk_norm,
    fused_qkv,
    head_dim,
    is_mla,
    n_kv_heads,
    norm_offset,
    out_proj,
    post_qk_norms,
    qk_norms,
    record_for,
    rope_pairing,
    rotary_dim,
    text_config,
)
from symformer.positional import PartialRotary, RoPE
from symformer.teleport import groups as _groups
from symformer.teleport.attention_parts import NormScaling, VOFactor, attention_parts
from symformer.teleport.component import AttentionSite, Component
from symformer.teleport.declare import fused_blocks, head_rows, qkv_rows
from symformer.teleport.groups import SymmetryGroup, register_group_builder
from symformer.teleport.plain_loop import PlainLoopTeleport
from symformer.teleport.qk_groups import DiagonalGroup, TrivialGroup, diagonal_blocks, qk_group_for
from symformer.teleport.weight_parts import ExpertScaling, FusedRows, MLPScaling


class _AttentionView:
    """What the group reads of an HF attention layer (the attribute names of symformer's MultiHeadAttention);
    a fused q/k/v projection (Phi-3's qkv_proj, GPT-NeoX's query_key_value) is handed out as three row blocks
    (`fused`: their FusedRows)."""

    def __init__(self, attn: nn.Module, n_heads: int, kv_heads: int):
        self.attn, self.o_proj, self.rotary_dim = attn, out_proj(attn), rotary_dim(attn)
        self.n_heads, self.head_dim = n_heads, head_dim(attn)
        # record.qk_norm "after": Hunyuan's weighted q/k RMSNorms, NanoChat's parameter-free ones
        self.post_norm = post_qk_norms(attn) is not None
        self.fused: list[FusedRows] = []
        self.gate_rows: tuple = ()  # an output gate's rows, in query-head blocks (they follow a head permutation)
        fused = fused_qkv(attn)
        if record_for(attn).output_gate != "none":
            self._gated(attn, n_heads, kv_heads)
            return
        if fused is None:
            self.q_proj, self.k_proj, self.v_proj = attn.q_proj, attn.k_proj, attn.v_proj
            return
        self.fused, (self.q_proj, self.k_proj, self.v_proj) = fused_blocks(
            fused[0], qkv_rows(fused[1], n_heads, kv_heads, self.head_dim)
        )

    def _gated(self, attn: nn.Module, n_heads: int, kv_heads: int) -> None:
        """AFMoE: a gate_proj of its own; Qwen3-Next, Qwen3.5: q_proj rows [q_h; g_h] head by head, seen as a q block
        and a gate block (FusedRows)."""
        self.k_proj, self.v_proj = attn.k_proj, attn.v_proj
        if hasattr(attn, "gate_proj"):
            self.q_proj = attn.q_proj
            self.gate_rows = tuple(p for p in (attn.gate_proj.weight, attn.gate_proj.bias) if p is not None)
            return
        dh = self.head_dim
        self.fused, (self.q_proj, gate) = fused_blocks(
            attn.q_proj, [head_rows(n_heads, 2 * dh, 0, dh), head_rows(n_heads, 2 * dh, dh, dh)]
        )
        self.gate_rows = tuple(t for t in (gate.weight, gate.bias) if t is not None)

    @property
    def rotary(self):
        if not applies_rope(self.attn) or self.post_norm:  # NoPE layer: no rotation, GL(d_h); Hunyuan: the group
            return None  # acts on the norm weights only and does not depend on the rotation (no refresh)
        return getattr(self.attn, "rotary", None) or _native_rope(
            self.head_dim, self.rotary_dim, rope_pairing(self.attn.config)
        )


def _native_rope(head_dim: int, rotary_dim: int, pairing: str = "half"):
    """HF's own rotary embedding seen as symformer RoPE in its pairing (only its pairs matter here: half, or
    interleaved for the INTERLEAVED families: GLM, Cohere, ERNIE 4.5, Helium), on the first rotary_dim coordinates
    (partial rotary: PartialRotary, GL on the rest)."""
    rope = RoPE(rotary_dim, pairing=pairing)
    return rope if rotary_dim == head_dim else PartialRotary(rope, head_dim)


class _MLAView:
    """One of the two sites of an MLA layer, with the attribute names AttentionSite reads: the nope site (query and key
    nope blocks, values and output; GL on Q/K, since nothing rotates there) or the rope site (the query rope blocks of
    all heads and the one shared rotated key block: a single key head, so the rotary's group element is shared by
    every head, as q_h^T U^T M U^{-T} k = q_h^T M k needs; no values)."""

    def __init__(self, attn, q_proj, k_proj, v_proj, o_proj, head_dim: int, rotary):
        self.attn, self.q_proj, self.k_proj, self.v_proj, self.o_proj = attn, q_proj, k_proj, v_proj, o_proj
        self.n_heads, self.head_dim, self.rotary = int(attn.config.num_attention_heads), head_dim, rotary
        self.fused: list[FusedRows] = []


def _mla_parts(attn: nn.Module, name: str, positions) -> list[Component]:
    """Multi-head latent attention (DeepSeek-V3) as two sites acting on row blocks of q_b_proj (or q_proj), kv_b_proj
    and kv_a_proj_with_mqa (whose latent rows stay as they are): per head GL(nope) on the nope blocks and GL(v) on the
    values; one rotary-group element on the rope blocks, shared by the heads. No head permutations: the two sites
    share each head (a permutation would have to move both at once)."""
    h, nope, rope, dv = attn.config.num_attention_heads, attn.qk_nope_head_dim, attn.qk_rope_head_dim, attn.v_head_dim
    q = attn.q_proj if attn.q_lora_rank is None else attn.q_b_proj
    fq, (q_nope, q_rope) = fused_blocks(q, [head_rows(h, nope + rope, 0, nope), head_rows(h, nope + rope, nope, rope)])
    fkv, (k_nope, v) = fused_blocks(
        attn.kv_b_proj, [head_rows(h, nope + dv, 0, nope), head_rows(h, nope + dv, nope, dv)]
    )
    r = attn.kv_lora_rank  # kv_a_proj_with_mqa rows: [latent (normed, then kv_b_proj); the shared key rope block]
    fa, (_, k_rope) = fused_blocks(attn.kv_a_proj_with_mqa, [torch.arange(r), torch.arange(r, r + rope)], passive=(0,))
    rotary = getattr(attn, "rotary", None) or _native_rope(rope, rope, rope_pairing(attn.config))
    nope_site = AttentionSite(
        name + ".nope", _MLAView(attn, q_nope, k_nope, v, attn.o_proj, nope, None), qk_group_for(None, nope), h
    )
    rope_view = _MLAView(attn, q_rope, k_rope, None, None, rope, rotary)
    rope_site = AttentionSite(name + ".rope", rope_view, qk_group_for(rotary, rope, positions), 1)
    return [
        *attention_parts(nope_site, VOFactor(nope_site, dim=dv), permutable=False),
        *attention_parts(rope_site, None, permutable=False),  # one key head, no values
        *fq,
        *fkv,
        *fa,
    ]


class _GLUView:
    """down(act(gate x) * up x): the up and down projections, named by the family's record.glu_names (LFM2: w1,
    w3, w2)."""

    def __init__(self, mlp: nn.Module, names: tuple[str, str, str]):
        self.up, self.down = getattr(mlp, names[1]), getattr(mlp, names[2])


def _is_glu(m: nn.Module, names: tuple[str, str, str]) -> bool:
    return all(hasattr(m, n) for n in names)


def _fused_experts(model: nn.Module) -> list[ExpertScaling]:
    """The MoE expert blocks stored as gate_up_proj (E, 2 I, d) and down_proj (E, d, I) (transformers 5's Mixtral /
    Qwen3-MoE layout, gate rows first), and gated MLPs with one fused gate_up_proj Linear (Phi-3: rows [gate; up],
    up * act(gate)); another layout is left out rather than guessed."""
    d, out = int(text_config(model).hidden_size), []
    for m in model.modules():
        gu, dn = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
        if isinstance(gu, nn.Linear) and isinstance(dn, nn.Linear):
            if gu.bias is not None:
                fail(
                    "gate_up_proj.bias",
                    "a bias",
                    "none (the MLP rescaling of a fused gate_up_proj with a bias is not implemented)",
                )
            gu, dn = gu.weight, dn.weight
        if isinstance(gu, torch.Tensor) and isinstance(dn, torch.Tensor) and gu.ndim == dn.ndim and gu.ndim in (2, 3):
            i = dn.shape[-1]
            if tuple(gu.shape) == (*dn.shape[:-2], 2 * i, d) and dn.shape[-2] == d:
                out.append(ExpertScaling(gu, dn))
    return out


class GQASymmetryGroup(SymmetryGroup):
    """SymmetryGroup of an HF Llama-family model (module docstring): its sites carry `kv_heads`, so elements
    have one factor per key head; the actions are teleport's grouped-query ones."""


def _parts(attn: nn.Module, name: str, h: int, hk: int, positions) -> list[Component]:
    """The group's components of one attention layer (one site; MLA: two) and the fused rows they act on."""
    check_layer(attn)
    if is_mla(attn):  # a shared rotated key block and latent projections: two sites on row blocks
        return _mla_parts(attn, name, positions)
    if getattr(attn.config, "clip_qkv", None) is not None:  # OLMo's clamp: clamp(U q) != U clamp(q)
        fail(
            "config.clip_qkv",
            attn.config.clip_qkv,
            "None (clamping q, k and v breaks every symmetry of the projections)",
        )
    view = _AttentionView(attn, h, hk)
    sinks = (attn.sinks,) if isinstance(getattr(attn, "sinks", None), nn.Parameter) else ()  # GPT-OSS: per head
    record = record_for(attn)
    if record.output_gate != "none":  # sigmoid(g) * (A V D) = (sigmoid(g) * A V) D for diagonal D only
        return _gated_parts(attn, view, name, hk, positions) + view.fused
    if record.qk_norm == "after" and not record.qk_norm_weighted:  # NanoChat: rms(U q) != rms(q) for a scaling U
        site = AttentionSite(name, view, TrivialGroup(view.head_dim), hk)
        return [*attention_parts(site, carried=sinks), *view.fused]
    if view.post_norm:  # Hunyuan: the logits see only w_q * w_k (module docstring): any positive d per coordinate
        site = AttentionSite(name, view, TrivialGroup(view.head_dim), hk)
        qn, kn = (norm.weight for norm in post_qk_norms(attn))
        norms = NormScaling(site, qn, kn, torch.arange(view.head_dim))
        return [*attention_parts(site, norms=norms, carried=sinks), *view.fused]
    grp, norms = qk_group_for(view.rotary, view.head_dim, positions), qk_norms(attn)
    if norms is None:
        return [*attention_parts(AttentionSite(name, view, grp, hk), carried=sinks), *view.fused]
    # Qwen3, OLMo 2, LFM2: q_norm(U q) != U q_norm(q), so the rotary's group acts on the norm weights (docstring)
    site = AttentionSite(name, view, TrivialGroup(view.head_dim), hk)
    per_head = flat_qk_norm(attn) or norms[0].weight.dim() == 2  # Cohere: (H, Dh)
    scaling = NormScaling(site, norms[0].weight, norms[1].weight, diagonal_blocks(grp), norm_offset(norms[0]), per_head)
    return [*attention_parts(site, norms=scaling, carried=sinks), *view.fused]


def _gated_parts(attn: nn.Module, view: _AttentionView, name: str, hk: int, positions) -> list[Component]:
    """Qwen3-Next, Qwen3.5, AFMoE (module docstring): the q/k norms' scalings, a diagonal V/O factor, and the gate rows
    moving with a head permutation."""
    grp, norms = qk_group_for(view.rotary, view.head_dim, positions), qk_norms(attn)
    if norms is None:  # every gated family normalises q and k per head; another layout is not guessed
        fail("model", f"{attn.config.model_type} without q/k norms", "the q_norm / k_norm layers of its family")
    site = AttentionSite(name, view, TrivialGroup(view.head_dim), hk)
    scaling = NormScaling(site, norms[0].weight, norms[1].weight, diagonal_blocks(grp), norm_offset(norms[0]))
    vo = VOFactor(site, DiagonalGroup(view.head_dim))
    return attention_parts(site, vo, norms=scaling, carried=view.gate_rows)


def symmetry_group(model: nn.Module, positions: torch.Tensor | None = None, ffn: bool = False) -> SymmetryGroup:
    """The symmetry group of a Llama-family model (hf._common.FAMILIES; module docstring; on Qwen3 the Q/K part
    acts on the q/k norm weights; fused MoE experts: teleport.ExpertScaling); any other model goes to
    symformer.teleport.symmetry_group. positions: (N, 1) positions for the ESPR commutant (default: generic
    points). ffn: include the gated MLP's up/down rescaling.
    ValueError for an approximate attention core."""
    if family_of(model) is None:
        return _groups.symmetry_group(model, positions, ffn=ffn)
    tc = text_config(model)  # a vision-language model's language model
    impl = getattr(tc, "_attn_implementation", None) or "eager"
    if str(impl).startswith("symformer_"):
        fail(
            "attn_implementation",
            impl,
            "an exact softmax implementation (eager, sdpa, ...): approximate kernels are not invariant under GL(d_h)",
        )
    h, hk = tc.num_attention_heads, n_kv_heads(tc)
    names = {id(m): n for n, m in model.named_modules()}
    parts = [c for attn in attention_modules(model) for c in _parts(attn, names[id(attn)], h, hk, positions)]
    # gated MLPs only: down(act(gate x) * up x) is linear in up; an ungated down(act(up x)) (Arcee's relu^2, Apertus'
    # xIELU) is not rescaled by up * s, down / s
    if ffn:
        glu = record_for(tc).glu_names
        parts += [MLPScaling(_GLUView(m, glu)) for m in model.modules() if _is_glu(m, glu)] + _fused_experts(model)
    return GQASymmetryGroup(parts, positions)


def _build_for_teleport(model, positions, ffn):
    """The builder registered with teleport (register_hf_groups): None for a model of no supported family."""
    return symmetry_group(model, positions, ffn=ffn) if family_of(model) is not None else None


def register_hf_groups() -> None:
    """Let symformer.teleport.symmetry_group (and so the Teleporter, TeleportCallback(model=hf_model) and
    PlainLoopTeleport) build the groups of the supported Hugging Face families. HFTeleport calls it."""
    register_group_builder("transformers", _build_for_teleport)


class HFTeleport(PlainLoopTeleport):
    """teleport.PlainLoopTeleport (teleportation in a plain training loop) with the Hugging Face families' groups
    registered (register_hf_groups): for HF models, symformer models and declared attention layers alike. Its
    deprecated schedule option `step=S` means start_step=S (the first teleport step, not a period) and warns."""

    def __init__(self, *args, **kwargs):
        register_hf_groups()
        super().__init__(*args, **kwargs)


__all__ = ["GQASymmetryGroup", "HFTeleport", "register_hf_groups", "symmetry_group"]
