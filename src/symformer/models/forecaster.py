"""Encoder-decoder forecaster in the style of Informer (Zhou et al., 2021) for ETT.

Encoder over the `seq_len` input window; decoder over `label_len` known steps followed by
`pred_len` zero placeholders, with self-attention and cross-attention to the encoder; a linear
head reads the last `pred_len` decoder outputs. The decoder's self-attention is not masked: the
placeholders carry no future values, so nothing leaks, and non-causal attention variants
(PLASH) plug in unchanged. Only the attention part changes between methods."""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_int, check_tensor, fail
from symformer.models.transformer import Encoder, TransformerConfig


class Forecaster(nn.Module):
    def __init__(
        self,
        cfg: TransformerConfig,
        n_vars: int,
        seq_len: int = 96,
        label_len: int = 48,
        pred_len: int = 24,
        time_features: int = 4,
        dec_layers: int = 1,
    ):
        super().__init__()
        self.cfg = cfg
        self.n_vars = check_int("n_vars", n_vars, 1)
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, check_int("pred_len", pred_len, 1)
        self.time_features = time_features
        self.enc_embed = nn.Linear(n_vars, cfg.d_model)
        self.dec_embed = nn.Linear(n_vars, cfg.d_model)
        self.enc_time = nn.Linear(time_features, cfg.d_model)
        self.dec_time = nn.Linear(time_features, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.decoder = Encoder(cfg, cross=True, n_layers=dec_layers, name="decoder")
        self.head = nn.Linear(cfg.d_model, n_vars)

    def forward(
        self, x: torch.Tensor, x_time: torch.Tensor | None = None, y_time: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x (B, seq_len, n_vars) -> forecast (B, pred_len, n_vars)."""
        check_tensor("x", x, 3)
        if x.shape[1:] != (self.seq_len, self.n_vars):
            fail("x", f"shape {tuple(x.shape)}", f"(B, {self.seq_len}, {self.n_vars})")
        b = x.shape[0]
        x = x.to(self.enc_embed.weight.dtype)  # a 16-bit model takes float32 inputs (cast once here)
        x_time, y_time = (None if t is None else t.to(x.dtype) for t in (x_time, y_time))
        dec_in = torch.cat([x[:, -self.label_len :], x.new_zeros(b, self.pred_len, self.n_vars)], dim=1)
        e, d = self.enc_embed(x), self.dec_embed(dec_in)
        if x_time is not None and y_time is not None:
            e, d = e + self.enc_time(x_time), d + self.dec_time(y_time)
        # positions in float32 whatever the model's dtype: bfloat16 rounds integers above 256
        pe = torch.arange(self.seq_len, device=x.device, dtype=torch.float32)[:, None]
        pd_ = torch.arange(
            self.seq_len - self.label_len, self.seq_len + self.pred_len, device=x.device, dtype=torch.float32
        )[:, None]
        mem = self.encoder(e, pe)
        out = self.decoder(d, pd_, context=mem, context_positions=pe)
        return self.head(out[:, -self.pred_len :])
