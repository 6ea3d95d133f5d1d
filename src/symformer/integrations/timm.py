"""timm-style ViT attention with symformer's parts, and a patch of timm's own attention modules where timm imports.

`RotaryAttention` is the attention module of a timm VisionTransformer (fused `qkv`, `proj`, the same parameter
names and shapes, so a timm `Attention` state dict loads into it) with a registered positional part (RoPE /
RoPE-Mixed, STRING, ESPR, ...) on q and k and a registered attention core (softmax, FAVOR+, PLASH, ...). The first
`num_prefix_tokens` tokens (class / register tokens) take no position: rotary parts see them at position 0, where
R(0) = I (ESPR: its post-rotation), as rope-vit leaves its class token unrotated. Positions are those of the patch
tokens, (N - num_prefix_tokens, C) or per sample (B, N - num_prefix_tokens, C); without them the module uses the
grid it was built for (`grid=(H, W)`, `positional.grid_positions`).

`patch_timm(model, ...)` replaces every timm `Attention` / `EvaAttention` of a timm model by a `RotaryAttention`
with its weights; it needs timm, which this project's CPU environment cannot import (timm imports torchvision,
whose registry wheel does not load with the CPU torch wheel); its tests skip there and say so.
"""

from __future__ import annotations

import torch
from torch import nn

import symformer.attention  # noqa: F401  (registers the cores)
import symformer.positional  # noqa: F401  (registers the parts)
from symformer._validation import check_int, check_tensor, fail
from symformer.positional import grid_positions, with_prefix
from symformer.registry import ATTENTION, POSITIONAL


class RotaryAttention(nn.Module):
    """timm's ViT attention (fused qkv, prefix tokens) with a symformer positional part and attention core.

    Args:
        dim (int): the embedding width C.
        num_heads (int): H (dim / H = Dh).
        qkv_bias (bool): a bias on the fused qkv projection (timm's default False; DeiT / rope-vit True).
        num_prefix_tokens (int): class / register tokens at the front, which take no position.
        positional (str): a registered positional part ("rope", "string", "espr", ...).
        positional_kwargs (dict | None): its options (e.g. {"mode": "mixed"} for RoPE-Mixed).
        attention (str): a registered attention core ("softmax", "favor", "plash", ...).
        attention_kwargs (dict | None): its options.
        coord_dim (int): C of the positions (2 for images).
        grid (tuple[int, int] | None): the patch grid whose integer positions forward uses when given none.

    Examples:
        >>> import torch
        >>> from symformer.integrations.timm import RotaryAttention
        >>> attn = RotaryAttention(64, 4, positional_kwargs={"mode": "mixed"}, grid=(4, 4))
        >>> sorted(k for k in attn.state_dict() if not k.startswith(("rotary", "core")))  # timm's names
        ['proj.bias', 'proj.weight', 'qkv.weight']
        >>> attn(torch.randn(2, 1 + 16, 64)).shape  # a class token and a 4 x 4 grid
        torch.Size([2, 17, 64])
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        num_prefix_tokens: int = 1,
        positional: str = "rope",
        positional_kwargs: dict | None = None,
        attention: str = "softmax",
        attention_kwargs: dict | None = None,
        coord_dim: int = 2,
        grid: tuple[int, int] | None = None,
    ):
        super().__init__()
        check_int("dim", dim, 1)
        check_int("num_heads", num_heads, 1)
        if dim % num_heads:
            fail("num_heads", num_heads, f"a divisor of dim={dim}")
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, 0)
        self.coord_dim = check_int("coord_dim", coord_dim, 1)
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        if getattr(POSITIONAL.get(positional), "kind", None) != "rotary":
            fail("positional", positional, "a registered rotary part (rope, string, espr, ...)")
        ctx = dict(head_dim=self.head_dim, coord_dim=coord_dim, n_heads=num_heads, d_model=dim)
        self.rotary = POSITIONAL.build(positional, **ctx, **(positional_kwargs or {}))
        self.core = ATTENTION.build(
            attention, head_dim=self.head_dim, n_heads=num_heads, d_model=dim, **(attention_kwargs or {})
        )
        pos = None if grid is None else grid_positions(tuple(grid))
        self.register_buffer("grid_positions", pos, persistent=False)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None, **_
    ) -> torch.Tensor:
        """Attention of x (B, N, C) with the patch tokens at `positions` (None: the module's grid).

        Args:
            x (B, N, C): prefix tokens then patch tokens.
            positions (N - P, C): the patches' positions, or (B, N - P, C); None: `grid`'s.
            attn_mask (B, 1, 1, N): a boolean key-padding mask (True = attend), or what the core takes.
            **_: timm's other keywords (EvaAttention's `rope`, `is_causal`), ignored: the part rotates.

        Returns:
            out (B, N, C).
        """
        check_tensor("x", x, 3)
        b, n, c = x.shape
        p = self.num_prefix_tokens
        positions = self.grid_positions if positions is None else positions
        if positions is None:
            fail("positions", None, "the patches' positions, or a module built with grid=(H, W)")
        if positions.shape[-2] != n - p or positions.shape[-1] != self.coord_dim:
            fail(
                "positions",
                f"shape {tuple(positions.shape)}",
                f"(N - num_prefix_tokens, C) = ({n - p}, {self.coord_dim}) for x of shape {tuple(x.shape)}",
            )
        # (B, N, 3C) -> (3, B, H, N, Dh), timm's layout
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.rotary(q, k, with_prefix(positions.to(x.device), p) if p else positions.to(x.device))
        y = self.core(q, k, v, attn_mask=attn_mask, scale=self.rotary.scale)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


def _timm_attention_classes() -> tuple:
    try:
        from timm.models.eva import EvaAttention  # optional dependency
        from timm.models.vision_transformer import Attention
    except Exception as e:  # ImportError, or torchvision's "operator torchvision::nms does not exist"
        fail("timm", f"an import error ({type(e).__name__}: {e})", "an importable timm (pip install timm)", ImportError)
        raise AssertionError from e
    return Attention, EvaAttention


def _copy_timm_weights(ours: RotaryAttention, theirs: nn.Module) -> None:
    """timm Attention: qkv / proj as they are. EvaAttention: a fused qkv (+ q_bias, v_bias) or q/k/v_proj."""
    with torch.no_grad():
        if getattr(theirs, "qkv", None) is not None:
            ours.qkv.weight.copy_(theirs.qkv.weight)
            bias = theirs.qkv.bias
            if bias is None and getattr(theirs, "q_bias", None) is not None:
                bias = torch.cat((theirs.q_bias, theirs.k_bias, theirs.v_bias))
        else:
            ws = [getattr(theirs, f"{n}_proj") for n in "qkv"]
            ours.qkv.weight.copy_(torch.cat([w.weight for w in ws]))
            bias = None if ws[0].bias is None else torch.cat([w.bias for w in ws])
        if bias is not None:
            ours.qkv.bias = nn.Parameter(bias.detach().clone())
        ours.proj.load_state_dict(theirs.proj.state_dict())


def patch_timm(model: nn.Module, grid: tuple[int, int], positional: str = "rope", **options) -> int:
    """Replace every timm `Attention` / `EvaAttention` of `model` by a `RotaryAttention` with its weights.

    Args:
        model (nn.Module): a timm model (VisionTransformer, Eva).
        grid (tuple[int, int]): its patch grid (model.patch_embed.grid_size).
        positional (str): the registered rotary part.
        **options: RotaryAttention's other options (positional_kwargs, attention, attention_kwargs, ...).

    Returns:
        n (int): attention modules replaced.

    Raises:
        ImportError: timm does not import here (the message says why).
    """
    classes = _timm_attention_classes()
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, classes):
                continue
            dim = child.proj.in_features
            ours = RotaryAttention(
                dim,
                child.num_heads,
                num_prefix_tokens=getattr(child, "num_prefix_tokens", getattr(model, "num_prefix_tokens", 1)),
                positional=positional,
                grid=grid,
                **options,
            )
            _copy_timm_weights(ours, child)
            setattr(parent, name, ours.to(child.proj.weight.device))
            n += 1
    return n
