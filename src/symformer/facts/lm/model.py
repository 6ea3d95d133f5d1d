"""The fact-recall transformer of fact-storing-mlps.txt Sec. 5.1 (App. A.2.2) and its LM variant (App. A.3.2).

A 1-layer GPT-style block (RoPE, RMSNorm, single head) whose MLP slot holds a frozen fact-storing MLP
from `symformer.facts`. The paper's four changes are config switches so each can be ablated:
(i) `tied`: transformer and MLP embeddings tied (the read-out is the token embedding table);
(ii) `residual=False`: no residual connections;
(iii) `frozen_norm`: the pre-MLP RMSNorm frozen, i.e. a projection to the unit sphere;
(iv) `identity_vo`: W_V and W_O frozen to the identity.
The LM variant (App. A.3.2) replaces the MLP by a 2-expert MoE (frozen fact expert + trainable low-rank
language expert, MLP router) and parametrises Q and K with MLPs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from symformer._validation import check_int, check_tensor, fail
from symformer.facts.slot import FactSlot
from symformer.models.layers import RMSNorm
from symformer.positional.rope import RoPE


@dataclass(frozen=True)
class FactRecallConfig:
    vocab_size: int
    d_model: int = 128  # App. A.2.3: d = 128
    tied: bool = True  # change (i)
    residual: bool = False  # change (ii): no residual connections
    frozen_norm: bool = True  # change (iii)
    identity_vo: bool = True  # change (iv)
    rope_base: float = 10000.0
    qk_mlp: bool = False  # App. A.3.2: Q, K parametrised with MLPs
    moe: bool = False  # App. A.3.2: 2-expert MoE (fact expert + low-rank language expert)
    lang_rank: int = 32  # rank of the language expert (ours; the paper does not give it)
    router_top1: bool = False  # Switch-style top-1 routing (ours): only the chosen expert runs
    moe_norm: bool = True  # the MoE takes the MLP's place, behind its frozen pre-MLP norm (A.3.2)
    qk_hidden: int = 256  # hidden width of the Q/K MLPs and the router (ours)
    log_scale_init: float = 0.0  # initial log read-out temperature (ours; learnable)

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 2)
        check_int("d_model", self.d_model, 2)
        if self.d_model % 2:
            fail("d_model", self.d_model, "an even width (RoPE rotates pairs)")
        check_int("lang_rank", self.lang_rank, 1)
        check_int("qk_hidden", self.qk_hidden, 1)

    def to_dict(self) -> dict:
        return asdict(self)


def _proj(d: int, hidden: int, mlp: bool) -> nn.Module:
    if not mlp:
        return nn.Linear(d, d)
    return nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))


class SphereNorm(nn.Module):
    """Change (iii): the frozen pre-MLP norm, x -> x / |x| (App. A.2.2 step 3: MLP keys on the unit sphere)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class FactRecallTransformer(nn.Module):
    """tokens (B, N) -> next-token logits (B, N, vocab), or (B, vocab) at the last position."""

    def __init__(self, cfg: FactRecallConfig, embeddings: torch.Tensor, trainable_tokens: torch.Tensor | None = None):
        super().__init__()
        check_tensor("embeddings", embeddings, 2)
        if tuple(embeddings.shape) != (cfg.vocab_size, cfg.d_model):
            fail("embeddings", f"shape {tuple(embeddings.shape)}", f"({cfg.vocab_size}, {cfg.d_model})")
        self.cfg = cfg
        d = cfg.d_model
        # App. A.2.2: key and value embeddings frozen; other rows (template words) may train
        self.register_buffer("emb", embeddings.detach().float().clone())
        rows = torch.zeros(cfg.vocab_size, dtype=torch.bool) if trainable_tokens is None else trainable_tokens.bool()
        self.register_buffer("trainable_rows", rows.clone())
        self.emb_delta = nn.Parameter(torch.zeros(cfg.vocab_size, d))
        self.attn_norm = RMSNorm(d)
        self.q_proj = _proj(d, cfg.qk_hidden, cfg.qk_mlp)
        self.k_proj = _proj(d, cfg.qk_hidden, cfg.qk_mlp)
        self.v_proj = nn.Identity() if cfg.identity_vo else nn.Linear(d, d)
        self.o_proj = nn.Identity() if cfg.identity_vo else nn.Linear(d, d)
        self.rope = RoPE(d, base=cfg.rope_base)
        if cfg.frozen_norm:
            self.mlp_norm: nn.Module = SphereNorm()
        else:  # trainable, started at the sphere projection's scale (|RMSNorm(x)| = sqrt(d) |w|)
            self.mlp_norm = RMSNorm(d)
            with torch.no_grad():
                self.mlp_norm.weight.fill_(d**-0.5)
        self.fact = FactSlot(d)
        if cfg.moe:
            self.router = nn.Sequential(nn.Linear(d, cfg.qk_hidden), nn.GELU(), nn.Linear(cfg.qk_hidden, 2))
            self.lang = nn.Sequential(nn.Linear(d, cfg.lang_rank, bias=False), nn.Linear(cfg.lang_rank, d))
        self.unembed = None if cfg.tied else nn.Linear(d, cfg.vocab_size, bias=False)
        # read-out temperature (ours: the MLP is frozen)
        self.log_scale = nn.Parameter(torch.full((), float(cfg.log_scale_init)))

    def embedding_table(self) -> torch.Tensor:
        return self.emb + self.emb_delta * self.trainable_rows[:, None].to(self.emb_delta.dtype)

    def _check_inputs(self, tokens: torch.Tensor, mask: torch.Tensor | None) -> None:
        """tokens (B, N) long in [0, vocab_size); mask None or a bool tensor of the same shape (True = real). The id
        range is checked on CPU tensors only: on an accelerator it would cost a host sync per forward, and the
        embedding's own device-side check stops an out-of-range id there."""
        if not isinstance(tokens, torch.Tensor):
            fail("tokens", type(tokens).__name__, "a (B, N) LongTensor", TypeError)
        if tokens.ndim != 2 or tokens.dtype != torch.long:
            fail("tokens", f"shape {tuple(tokens.shape)} dtype {tokens.dtype}", "a (B, N) LongTensor")
        if (
            tokens.device.type == "cpu"
            and tokens.numel()
            and (int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.vocab_size)
        ):
            fail(
                "tokens",
                f"ids in [{int(tokens.min())}, {int(tokens.max())}]",
                f"ids in [0, {self.cfg.vocab_size - 1}] (vocab_size {self.cfg.vocab_size})",
            )
        if mask is not None and (
            not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != tokens.shape
        ):
            got = f"shape {tuple(mask.shape)} dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else mask
            fail("mask", got, f"None or a bool tensor of the tokens' shape {tuple(tokens.shape)}")

    def _attention_inputs(self, x: torch.Tensor, mask: torch.Tensor | None, last_only: bool):
        """(q, k, v, allowed) of the single head, RoPE applied; q (B, 1, N or 1, dq); allowed broadcasts to the
        scores: causal, and padded positions (mask False) never attended."""
        N = x.shape[1]
        h = self.attn_norm(x)
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(x if self.cfg.identity_vo else h)
        dev = x.device  # the model's device (RunContext.device): positions and masks are made there
        pos = torch.arange(N, dtype=torch.float32, device=dev).view(N, 1)
        q, k = self.rope(q[:, None], k[:, None], pos)
        allowed = torch.ones(N, N, dtype=torch.bool, device=dev).tril()
        if mask is not None:
            allowed = allowed[None] & mask[:, None, :]
            # pads attend to themselves (no NaN rows)
            allowed = allowed | torch.eye(N, dtype=torch.bool, device=dev)[None]
            allowed = allowed[:, None]
        if last_only:
            q, allowed = q[..., -1:, :], allowed[..., -1:, :]
        return q, k, v[:, None], allowed

    def attend(self, x: torch.Tensor, mask: torch.Tensor | None, last_only: bool) -> torch.Tensor:
        """Single-head causal attention with RoPE; padded positions (mask False) are never attended."""
        q, k, v, allowed = self._attention_inputs(x, mask, last_only)
        return self.o_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)[:, 0])

    def attention_weights(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N) attention weights of the read-out (last) position over the sequence: what `attend` averages
        (softmax of q k^T / sqrt(dq), SDPA's scale, over the allowed positions)."""
        self._check_inputs(tokens, mask)
        q, k, _, allowed = self._attention_inputs(F.embedding(tokens, self.embedding_table()), mask, True)
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)[:, 0, 0]

    def mixer(self, h: torch.Tensor, fact_delta: torch.Tensor | None = None) -> torch.Tensor:
        """The MLP slot (Sec. 5.1) or the 2-expert MoE (App. A.3.2). `fact_delta` (B, d) is added to the
        fact MLP's output at the last position: the residual updates of the editors (App. A.3.4)."""
        fact = self.fact(self.mlp_norm(h))
        if fact_delta is not None:
            fact = torch.cat([fact[:, :-1], fact[:, -1:] + fact_delta[:, None]], 1)
        if not self.cfg.moe:
            return fact
        hn, gate = self.routed(h)  # with moe_norm, router and language expert see what the fact expert sees
        return gate[..., :1] * fact + gate[..., 1:] * self.lang(hn)

    def routed(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MoE's input (the frozen-norm output with `moe_norm`) and its gates (.., 2): fact, language."""
        hn = self.mlp_norm(h) if self.cfg.moe_norm else h
        gate = torch.softmax(self.router(hn), dim=-1)
        if self.cfg.router_top1:
            # Switch Transformer routing: the chosen expert's output scaled by its gate (the router's gradient);
            # the other expert contributes exactly nothing at that position
            gate = gate * F.one_hot(gate.argmax(-1), 2).to(gate.dtype)
        return hn, gate

    @torch.no_grad()
    def fact_gate(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N) weight the router gives the fact expert at each position (MoE models)."""
        if not self.cfg.moe:
            fail("model", "a model without an MoE (moe=False)", "an MoE model (FactRecallConfig(moe=True))")
        self._check_inputs(tokens, mask)
        h = self.attend(F.embedding(tokens, self.embedding_table()), mask, False)
        if self.cfg.residual:
            h = h + F.embedding(tokens, self.embedding_table())
        return self.routed(h)[1][..., 0]

    def features(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        last_only: bool = False,
        mlp_out_delta: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The vector read out at each position (see `mixer` for `mlp_out_delta`)."""
        x = F.embedding(tokens, self.embedding_table())
        h = self.attend(x, mask, last_only)
        if self.cfg.residual:
            h = h + (x[:, -1:] if last_only else x)
        y = self.mixer(h, mlp_out_delta)
        return y + h if self.cfg.residual else y

    def logits(self, y: torch.Tensor) -> torch.Tensor:
        table = self.embedding_table() if self.unembed is None else self.unembed.weight
        return self.log_scale.exp() * (y @ table.T)

    def forward(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        last_only: bool = False,
        mlp_out_delta: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self._check_inputs(tokens, mask)
        out = self.logits(self.features(tokens, mask, last_only, mlp_out_delta))
        return out[:, -1] if last_only else out
