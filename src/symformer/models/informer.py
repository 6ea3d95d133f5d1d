"""Informer (Zhou et al., AAAI 2021) as its reference implementation (zhouhaoyi/Informer2020) builds it,
with the attention core pluggable: PLASH's forecasting protocol swaps only the attention inside Informer
(plash-attention.txt, Sec. 4, "Task and benchmark protocol" and "Backbone and replacement rule").

What is kept from the reference (models/model.py, encoder.py, decoder.py, embed.py, attn.py):
- DataEmbedding: circular Conv1d token embedding (kernel 3, Kaiming-normal init), sinusoidal positions, a
  linear embedding of the timeF calendar features, dropout;
- post-LN encoder layers, with a distilling ConvLayer (Conv1d k=3 circular, BatchNorm, ELU, MaxPool k=3 s=2)
  between consecutive encoder layers (`distil`, on by default), and a final LayerNorm;
- post-LN decoder layers: masked (causal) self-attention whose output heads are "mixed" (Informer's
  `mix=True`: the (B, H, L, D) output read as (B, L, H*D)), cross-attention to the encoder, then the
  position-wise feed-forward (Conv1d k=1 == Linear), a final LayerNorm and a linear projection;
- attention dropout = dropout (Informer's FullAttention(attention_dropout=dropout)), scale 1/sqrt(Dh).
What differs: the attention core is any registered one ("full" = Informer's vanilla FullAttention = exact
softmax); ProbSparse is not implemented (the PLASH paper replaces it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from symformer._rng import layer_kwargs
from symformer._validation import check_choice, check_float, check_int, check_tensor, fail
from symformer.registry import ATTENTION

#: Informer's paper size (main_informer.py defaults): the `--full` setting of the plash experiment
PAPER_SIZE = {"d_model": 512, "n_heads": 8, "e_layers": 2, "d_layers": 1, "d_ff": 2048}
#: the default size of the plash experiment and of the etth1-informer preset: 8x narrower than PAPER_SIZE, same
#: depth and layout, so that a recorded run fits a CPU
SMALL_SIZE = {"d_model": 64, "n_heads": 4, "e_layers": 2, "d_layers": 1, "d_ff": 256}


@dataclass(frozen=True)
class InformerConfig:
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    d_layers: int = 1
    d_ff: int = 2048
    dropout: float = 0.05  # main_informer.py --dropout 0.05 (also the attention dropout)
    attention: str = "full"  # full | softmax | favor | plash | ...
    attention_kwargs: dict[str, Any] = field(default_factory=dict)
    distil: bool = True  # --distil on by default
    mix: bool = True  # --mix on by default (decoder self-attention)
    activation: str = "gelu"  # --activation gelu
    time_features: int = 4  # timeF with freq 'h': hour, weekday, day of month, day of year

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "e_layers", "d_layers", "d_ff", "time_features"):
            check_int(name, getattr(self, name), 1)
        if self.d_model % self.n_heads:
            fail("n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
        check_float("dropout", self.dropout, 0.0, 1.0, high_open=True)
        check_choice("attention", self.attention, ATTENTION.names())
        check_choice("activation", self.activation, ("gelu", "relu"))
        if not isinstance(self.attention_kwargs, dict):
            fail("attention_kwargs", type(self.attention_kwargs).__name__, "a dict", TypeError)


def sinusoid_table(n: int, d: int) -> torch.Tensor:
    """Informer's PositionalEmbedding: sin on even, cos on odd features."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return pe


class DataEmbedding(nn.Module):
    """value (circular Conv1d, k=3) + position (sinusoid) + time (Linear on timeF), then dropout."""

    def __init__(self, c_in: int, d_model: int, time_features: int, dropout: float, max_len: int = 5000):
        super().__init__()
        self.token = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        nn.init.kaiming_normal_(self.token.weight, mode="fan_in", nonlinearity="leaky_relu")
        self.register_buffer("pe", sinusoid_table(max_len, d_model), persistent=False)
        self.time = nn.Linear(time_features, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor) -> torch.Tensor:
        v = self.token(x.transpose(1, 2)).transpose(1, 2)
        return self.drop(v + self.pe[: x.shape[1]].to(x.dtype) + self.time(x_mark))


class AttentionLayer(nn.Module):
    """Informer's AttentionLayer: q/k/v/o projections around a registered attention core."""

    def __init__(self, cfg: InformerConfig, mix: bool = False, layer: str | None = None):
        super().__init__()
        d, h = cfg.d_model, cfg.n_heads
        self.n_heads, self.head_dim, self.mix = h, d // h, mix
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))
        # attention dropout = cfg.dropout unless the caller set it; a core without dropout rejects it loudly;
        # a given seed is made the layer's own (_rng.layer_kwargs), None lets the core draw from the global generator
        kw = layer_kwargs({"dropout": cfg.dropout, **cfg.attention_kwargs}, layer)
        self.core = ATTENTION.build(cfg.attention, head_dim=self.head_dim, n_heads=h, d_model=d, **kw)

    def forward(self, x: torch.Tensor, src: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.n_heads, -1).transpose(1, 2)
        k = self.k_proj(src).view(b, src.shape[1], self.n_heads, -1).transpose(1, 2)
        v = self.v_proj(src).view(b, src.shape[1], self.n_heads, -1).transpose(1, 2)
        y = self.core(q, k, v, is_causal=is_causal)  # (B, H, N, Dh)
        # mix: Informer's blhd output transposed to bhld and then viewed as (B, L, H*D)
        y = y.reshape(b, n, -1) if self.mix else y.transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(y)


class FeedForward(nn.Module):
    """conv1 (k=1) -> activation -> dropout -> conv2 (k=1) -> dropout, written with Linear (same map)."""

    def __init__(self, cfg: InformerConfig):
        super().__init__()
        self.up, self.down = nn.Linear(cfg.d_model, cfg.d_ff), nn.Linear(cfg.d_ff, cfg.d_model)
        self.drop, self.act = nn.Dropout(cfg.dropout), (F.gelu if cfg.activation == "gelu" else F.relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(self.drop(self.act(self.up(x)))))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: InformerConfig, layer: str | None = None):
        super().__init__()
        self.attn, self.ff = AttentionLayer(cfg, layer=layer), FeedForward(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop(self.attn(x, x)))  # post-LN
        return self.norm2(x + self.ff(x))


class DistilLayer(nn.Module):
    """Informer's ConvLayer ("self-attention distilling"): halves the sequence length."""

    def __init__(self, d_model: int):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(d_model)
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(F.elu(self.norm(self.conv(x.transpose(1, 2))))).transpose(1, 2)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: InformerConfig, layer: str | None = None):
        super().__init__()
        cross = None if layer is None else f"{layer}.cross"
        self.self_attn = AttentionLayer(cfg, mix=cfg.mix, layer=layer)
        self.cross_attn = AttentionLayer(cfg, layer=cross)
        self.ff = FeedForward(cfg)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop(self.self_attn(x, x, is_causal=True)))  # TriangularCausalMask
        x = self.norm2(x + self.drop(self.cross_attn(x, mem)))
        return self.norm3(x + self.ff(x))


class Informer(nn.Module):
    """x (B, seq_len, n_vars), x_time (B, seq_len, F), y_time (B, label_len + pred_len, F) -> (B, pred_len, n_vars).
    The decoder input is the last label_len input steps followed by pred_len zeros (Informer's padding 0)."""

    def __init__(self, cfg: InformerConfig, n_vars: int, seq_len: int, label_len: int, pred_len: int):
        super().__init__()
        self.cfg, self.n_vars = cfg, check_int("n_vars", n_vars, 1)
        self.seq_len = check_int("seq_len", seq_len, 1)
        self.label_len = check_int("label_len", label_len, 0, seq_len)
        self.pred_len = check_int("pred_len", pred_len, 1)
        self.enc_embed = DataEmbedding(n_vars, cfg.d_model, cfg.time_features, cfg.dropout)
        self.dec_embed = DataEmbedding(n_vars, cfg.d_model, cfg.time_features, cfg.dropout)
        # the per-layer seeds are derived here, once (_rng.layer_kwargs): "encoder.<i>", "decoder.<i>[.cross]"
        self.encoder = nn.ModuleList(EncoderLayer(cfg, f"encoder.{i}") for i in range(cfg.e_layers))
        self.distil = nn.ModuleList(DistilLayer(cfg.d_model) for _ in range(cfg.e_layers - 1)) if cfg.distil else None
        self.enc_norm = nn.LayerNorm(cfg.d_model)
        self.decoder = nn.ModuleList(DecoderLayer(cfg, f"decoder.{i}") for i in range(cfg.d_layers))
        self.dec_norm = nn.LayerNorm(cfg.d_model)
        self.projection = nn.Linear(cfg.d_model, n_vars)

    def _check(self, x: torch.Tensor, x_time, y_time) -> None:
        check_tensor("x", x, 3)
        if x.shape[1:] != (self.seq_len, self.n_vars):
            fail("x", f"shape {tuple(x.shape)}", f"(B, {self.seq_len}, {self.n_vars})")
        f = self.cfg.time_features
        for name, t, n in (("x_time", x_time, self.seq_len), ("y_time", y_time, self.label_len + self.pred_len)):
            if t is None:
                fail(name, "None", f"timeF features of shape (B, {n}, {f}) (Informer embeds calendar time)")
            check_tensor(name, t, 3)
            if t.shape != (x.shape[0], n, f):
                fail(name, f"shape {tuple(t.shape)}", f"({x.shape[0]}, {n}, {f})")

    def encode(self, x: torch.Tensor, x_time: torch.Tensor) -> torch.Tensor:
        h = self.enc_embed(x, x_time)
        for i, layer in enumerate(self.encoder):
            h = layer(h)
            if self.distil is not None and i < len(self.distil):
                h = self.distil[i](h)
        return self.enc_norm(h)

    def forward(
        self, x: torch.Tensor, x_time: torch.Tensor | None = None, y_time: torch.Tensor | None = None
    ) -> torch.Tensor:
        self._check(x, x_time, y_time)
        dt = self.projection.weight.dtype  # a 16-bit model takes float32 inputs (cast once here)
        x, x_time, y_time = (None if t is None else t.to(dt) for t in (x, x_time, y_time))
        mem = self.encode(x, x_time)
        dec_in = torch.cat(
            [x[:, x.shape[1] - self.label_len :], x.new_zeros(x.shape[0], self.pred_len, self.n_vars)], 1
        )
        h = self.dec_embed(dec_in, y_time)
        for layer in self.decoder:
            h = layer(h, mem)
        return self.projection(self.dec_norm(h))[:, -self.pred_len :]
