"""Causal character/token language model with 1-D positions."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from symformer._validation import check_int, check_tensor, fail
from symformer.models.transformer import Encoder, TransformerConfig


class CausalLM(nn.Module):
    def __init__(self, cfg: TransformerConfig, vocab_size: int):
        super().__init__()
        if cfg.coord_dim != 1:
            fail("coord_dim", cfg.coord_dim, "1 for a causal LM (token index positions)")
        self.cfg = cfg
        self.vocab_size = check_int("vocab_size", vocab_size, 2)
        self.tok = nn.Embedding(vocab_size, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        check_tensor("idx", idx, 2, floating=False)
        n = idx.shape[1]
        if positions is None:
            positions = torch.arange(n, device=idx.device, dtype=torch.get_default_dtype())[:, None]
        return self.head(self.encoder(self.tok(idx), positions, is_causal=True))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
