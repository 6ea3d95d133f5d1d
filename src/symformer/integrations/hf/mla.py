"""symformer rotary parts in multi-head latent attention (MLA: DeepSeek-V2 / V3 / V3.2, Kimi K2, GLM-4.7-Flash, GLM-5,
LongCat-Flash).

MLA splits each head's query and key into a "nope" block (qk_nope_head_dim coordinates, no position) and a "rope"
block (qk_rope_head_dim coordinates). The rope block of the keys comes from the last rows of kv_a_proj_with_mqa,
one block shared by every head; the nope blocks of the keys and the values are expanded from a normed latent
(kv_b_proj). Only the rope blocks rotate, so the patched part acts on those qk_rope_head_dim coordinates: the
shared key block is a single key head read by all H query heads (grouped-query attention with H_kv = 1, which
every part supports). YaRN's magnitude m on HF's cos and sin scales the rope blocks only, not the whole logit, so
it is applied to the rotated blocks here (q_rot m, k_rot m), exactly as HF's table does, and the logit scale is
HF's (its 1 / sqrt(qk_head_dim) times mscale^2 where the config asks for it).

DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5) adds an indexer that picks each query's top-k keys from its
own small projections, with its own RoPE on them; the attention then reads only those keys. The indexer keeps the
model's native table (the `position_embeddings` the decoder passes down): it selects under no_grad and the source
models train it apart from the language-modelling loss, so a learnable part there would never train. The patched
part rotates the attention's rope blocks only; with positional="rope" the selection and the logits are HF's.
GLM-5's "shared" layers reuse the previous full layer's selection, as HF's forward does.
"""

from __future__ import annotations

import torch

from symformer._validation import fail
from symformer.integrations.hf._common import cache_kwargs, call_attention, llama4_query_scale, token_positions


def _mla_project(self, hidden_states: torch.Tensor):
    """(q_pass, q_rot) of shape (B, H, N, nope) and (B, H, N, rope), the normed latent (B, 1, N, kv_lora_rank), the
    unrotated shared key block (B, 1, N, rope) and the normed query latent (None without q_lora_rank; DSA's indexer
    reads it), as HF's MLA forward computes them."""
    b, n = hidden_states.shape[:-1]
    q_resid = None
    if self.q_lora_rank is None:
        q = self.q_proj(hidden_states)
    else:
        q_resid = self.q_a_layernorm(self.q_a_proj(hidden_states))
        q = self.q_b_proj(q_resid)
    q = q.view(b, n, -1, self.qk_head_dim).transpose(1, 2)
    q_pass, q_rot = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
    latent, k_rot = torch.split(
        self.kv_a_proj_with_mqa(hidden_states), [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1
    )
    latent = self.kv_a_layernorm(latent).view(b, 1, n, self.kv_lora_rank)
    if hasattr(self, "mla_scale_q_lora"):  # LongCat-Flash: constant LoRA scalings of the queries and the latent
        q_pass, q_rot, latent = (
            q_pass * self.mla_scale_q_lora,
            q_rot * self.mla_scale_q_lora,
            latent * self.mla_scale_kv_lora,
        )
    return q_pass, q_rot, latent, k_rot.view(b, 1, n, self.qk_rope_head_dim), q_resid


def _dsa_selection(
    self,
    hidden_states,
    q_resid,
    position_embeddings,
    attention_mask,
    position_ids,
    cache,
    prev_topk,
    n_keys: int,
    kwargs: dict,
):
    """DSA (DeepSeek-V3.2, GLM-5), as HF's forward: the indexer's top-k key indices per query (B, N, topk), from the
    native table, or GLM-5's previous full layer's on a "shared" layer; folded into the mask for eager and sdpa,
    passed on as `indices` to other implementations (symformer's cores fold them too: hf.attention). Returns the
    mask and the indices."""
    if self.indexer is not None:
        topk = self.indexer(
            hidden_states,
            q_resid,
            position_embeddings,
            attention_mask[:, 0],
            position_ids,
            **cache_kwargs(self.indexer, cache),
        )
    elif prev_topk is None:
        fail("prev_topk_indices", None, "the top-k indices of a previous full indexer layer (a GLM-5 'shared' layer)")
    else:
        topk = prev_topk
    if self.config._attn_implementation in ("eager", "sdpa"):
        b, n = hidden_states.shape[:-1]
        dropped = topk.new_ones((b, n, n_keys), dtype=torch.bool).scatter(-1, topk.long(), False).unsqueeze(1)
        if attention_mask.dtype == torch.bool:
            attention_mask = attention_mask & ~dropped
        else:
            attention_mask = attention_mask.masked_fill(dropped, torch.finfo(hidden_states.dtype).min)
    else:
        kwargs["indices"] = topk
    return attention_mask, topk


def mla_attention_forward(
    self,
    hidden_states,
    position_embeddings=None,
    attention_mask=None,
    cache=None,
    position_ids=None,
    cache_position=None,
    past_key_values=None,
    prev_topk_indices=None,
    **kwargs,
):
    """HF's MLA forward (transformers 5.x: the compressed latent and the rotated key block are cached) with
    `self.rotary` on the rope blocks in place of HF's cos/sin table; DSA layers (an `indexer` attribute) select
    their keys as HF's do, and GLM-5's return their selection third."""
    b, n = hidden_states.shape[:-1]
    q_pass, q_rot, latent, k_rot, q_resid = _mla_project(self, hidden_states)
    cache = cache if cache is not None else kwargs.pop("past_key_value", past_key_values)
    positions = token_positions(position_ids, cache_position, cache, q_rot)
    q_rot, k_rot = self.rotary(q_rot, k_rot, positions)  # (B, H, N, rope) and the shared (B, 1, N, rope)
    magnitude = getattr(self, "rotary_magnitude", 1.0)
    if magnitude != 1.0:  # YaRN's attention_scaling on cos and sin: the rope blocks only
        q_rot, k_rot = q_rot * magnitude, k_rot * magnitude
    if cache is not None:
        latent, k_rot = cache.update(latent, k_rot, self.layer_idx, kwargs={"cache_position": cache_position})
    # Mistral 4: as Ministral 3, 1 + beta log(1 + floor(position / original_max)) on the whole query after the rotation
    query = torch.cat((q_pass, q_rot), dim=-1) * llama4_query_scale(self.config, positions, q_rot.dtype)
    key, value = self.expand_kv(latent, k_rot)
    topk = None
    if hasattr(self, "indexer"):
        attention_mask, topk = _dsa_selection(
            self,
            hidden_states,
            q_resid,
            position_embeddings,
            attention_mask,
            position_ids,
            cache,
            prev_topk_indices,
            key.shape[2],
            kwargs,
        )
    out, weights = call_attention(self, query, key, value, attention_mask, self.scaling, position_ids, kwargs)
    out = self.o_proj(out.reshape(b, n, -1).contiguous())
    return (out, weights, topk) if hasattr(self, "skip_topk") else (out, weights)  # GLM-5 hands its selection on


__all__ = ["mla_attention_forward"]
