"""ViT-style classifier over patch tokens with C-dimensional positions.

Prefix tokens (`n_prefix`: a class token and register tokens, learned, in front of the patches as in timm's
VisionTransformer) take no position: additive encodings skip them and rotary parts see them at position 0, where
R(0) = I for RoPE, STRING and circulant STRING (rope-vit rotates q[:, :, 1:] only: the same logits); ESPR's R(0)
is its post-rotation P (T3.5), a fixed basis change of the prefix tokens' q / k. Pooling is
the mean over the real patch tokens ("mean", the default with no prefix) or the class token ("cls"). A padded
batch of images of several sizes takes `mask` (B, N) (data.digits.pad_tokens), a key-padding mask in every layer.
A change of image size at inference is a change of `positions`: the new grid's own (positional.grid_positions)
or rescaled to the training range (grid_positions(..., ref_size=train_grid)).
"""

from __future__ import annotations

import torch
from torch import nn

from symformer._validation import check_choice, check_int, check_tensor, fail
from symformer.models.transformer import Encoder, TransformerConfig


class ViTClassifier(nn.Module):
    """Linear patch embedding, optional prefix tokens, an Encoder and a linear head.

    Args:
        cfg (TransformerConfig): the encoder (its coord_dim is the positions' C).
        token_dim (int): D_in of a patch token (C_img p p for data.digits.patchify of (B, C_img, H, W) images).
        n_classes (int): classes of the head.
        n_prefix (int): learned class / register tokens in front of the patches (0: none).
        pool (str | None): "mean" over real patch tokens or "cls" (the first prefix token); None: "cls" when there
            are prefix tokens, else "mean".

    Examples:
        >>> import torch
        >>> from symformer.data.digits import patchify
        >>> from symformer.models import TransformerConfig
        >>> from symformer.models.vit import ViTClassifier
        >>> tokens, pos = patchify(torch.randn(2, 3, 8, 8), 2)  # 3-channel images, 16 patches of 12 values
        >>> cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=1, coord_dim=2, positional="rope",
        ...                         positional_kwargs={"mode": "mixed"})
        >>> ViTClassifier(cfg, token_dim=12, n_classes=10, n_prefix=2)(tokens, pos).shape
        torch.Size([2, 10])
    """

    def __init__(
        self, cfg: TransformerConfig, token_dim: int, n_classes: int, n_prefix: int = 0, pool: str | None = None
    ):
        super().__init__()
        self.cfg = cfg
        self.token_dim = check_int("token_dim", token_dim, 1)
        self.n_prefix = check_int("n_prefix", n_prefix, 0)
        self.pool = check_choice("pool", pool or ("cls" if n_prefix else "mean"), ("mean", "cls"))
        if self.pool == "cls" and not n_prefix:
            fail("pool", pool, "'mean' when n_prefix is 0 (no class token to read)")
        self.embed = nn.Linear(token_dim, cfg.d_model)
        if n_prefix:  # timm's cls_token / reg_token init
            self.prefix = nn.Parameter(torch.nn.init.trunc_normal_(torch.zeros(1, n_prefix, cfg.d_model), std=0.02))
        else:
            self.register_parameter("prefix", None)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, check_int("n_classes", n_classes, 2))

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None) -> None:
        check_tensor("tokens", tokens, 3)
        if tokens.shape[-1] != self.token_dim:
            fail("tokens", f"shape {tuple(tokens.shape)}", f"last dimension {self.token_dim}")
        n = tokens.shape[1]
        if positions.ndim not in (2, 3) or positions.shape[-2] != n:
            fail(
                "positions",
                f"shape {tuple(positions.shape)}",
                f"(N, C) or (B, N, C) with N = {n} patch tokens (the {self.n_prefix} prefix tokens take none)",
            )
        if positions.shape[-1] != self.cfg.coord_dim:
            fail("positions", f"shape {tuple(positions.shape)}", f"coordinate dimension C = {self.cfg.coord_dim}")
        if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != tuple(tokens.shape[:2])):
            fail(
                "mask",
                f"{mask.dtype} mask of shape {tuple(mask.shape)}",
                f"a bool mask of shape {tuple(tokens.shape[:2])}",
            )

    def features(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, d_model) pooled features z that the head reads.

        Args:
            tokens (B, N, token_dim): patch tokens.
            positions (N, C): their positions, or (B, N, C) per sample.
            mask (B, N): bool, True on real tokens of a padded batch (None: all real).

        Returns:
            z (B, d_model): the mean of the real patch tokens' outputs, or the class token's.
        """
        self._check(tokens, positions, mask)
        # a 16-bit model takes float32 inputs as a 16-bit HF model does: cast to its weights' dtype (positions are not)
        x = self.embed(tokens.to(self.embed.weight.dtype))
        b, n_pre = x.shape[0], self.n_prefix
        if n_pre:
            x = torch.cat((self.prefix.expand(b, -1, -1).to(x.dtype), x), dim=1)
        keep = None
        if mask is not None:
            keep = torch.cat((mask.new_ones(b, n_pre), mask), dim=1) if n_pre else mask
        attn_mask = None if keep is None else keep[:, None, None, :]  # (B, N) -> (B, 1, 1, N) key padding
        out = self.encoder(x, positions, attn_mask=attn_mask, n_prefix=n_pre)
        if self.pool == "cls":
            return out[:, 0]
        patches = out[:, n_pre:]
        if mask is None:
            return patches.mean(dim=1)
        w = mask.to(patches.dtype).unsqueeze(-1)
        return (patches * w).sum(dim=1) / w.sum(dim=1).clamp_min(1.0)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, n_classes) of `features(tokens, positions, mask)`."""
        return self.head(self.features(tokens, positions, mask))
