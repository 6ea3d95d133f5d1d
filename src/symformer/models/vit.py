"""ViT-style classifier over patch tokens with C-dimensional positions (mean pooling, no CLS token,
so every token has a real position)."""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_int, check_tensor, fail
from symformer.models.transformer import Encoder, TransformerConfig


class ViTClassifier(nn.Module):
    def __init__(self, cfg: TransformerConfig, token_dim: int, n_classes: int):
        super().__init__()
        self.cfg = cfg
        self.token_dim = check_int("token_dim", token_dim, 1)
        self.embed = nn.Linear(token_dim, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, check_int("n_classes", n_classes, 2))

    def features(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, d_model) pooled features z that the head reads (mean over tokens)."""
        check_tensor("tokens", tokens, 3)
        if tokens.shape[-1] != self.token_dim:
            fail("tokens", f"shape {tuple(tokens.shape)}", f"last dimension {self.token_dim}")
        # a 16-bit model takes float32 inputs as a 16-bit HF model does: cast to its weights' dtype (positions are not)
        return self.encoder(self.embed(tokens.to(self.embed.weight.dtype)), positions).mean(dim=1)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(tokens, positions))
