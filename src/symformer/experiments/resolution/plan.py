"""The plan of experiment `resolution`: methods, seeds, grids, model and budget (a typed, validated config)."""

from __future__ import annotations

from dataclasses import dataclass

from symformer._validation import check_float, check_int, fail
from symformer.models import TransformerConfig

#: the position encodings compared, each as rope-vit / the papers define it (method_config)
METHODS = ("rope_axial", "rope_mixed", "string", "espr", "learned")
#: rope-vit's README (DeiT-III, 400 epochs, ImageNet-1k top-1, trained at 224 px = 14 x 14 patches of 16)
PAPER = {
    "setting": "rope-vit (Heo et al. 2024), README table: DeiT-III ViT-S/16, 400 epochs on ImageNet-1k at 224 px "
    "(14 x 14 patches), top-1 at 224 and 384 px (24 x 24 patches) with the new grid's own positions",
    "top1": {"ape": (80.4, 79.4), "rope_axial": (80.9, 80.0), "rope_mixed": (80.9, 81.8)},
}


@dataclass(frozen=True)
class ResolutionConfig:
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    image_size: int = 16  # sklearn digits (8 x 8) upsampled to this side for training
    patch: int = 4  # a 4 x 4 training grid
    eval_sizes: tuple[int, ...] = (8, 12, 16, 20, 24)  # test image sides: grids 2, 3, 4, 5, 6
    steps: int = 1000
    batch: int = 64
    lr: float = 2e-3
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    n_prefix: int = 1  # a class token, as rope-vit's DeiT

    def __post_init__(self) -> None:
        for name in ("methods", "seeds", "eval_sizes"):
            if not isinstance(getattr(self, name), tuple) or not getattr(self, name):
                fail(name, getattr(self, name), "a non-empty tuple")
        for m in self.methods:
            if m not in METHODS:
                fail("methods", m, f"methods among {', '.join(METHODS)}")
        for s in self.seeds:
            check_int("seeds", s, 0)
        check_int("patch", self.patch, 1)
        check_int("image_size", self.image_size, self.patch)
        for s in self.eval_sizes:
            check_int("eval_sizes", s, self.patch)
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_int("n_prefix", self.n_prefix, 0)

    @property
    def train_grid(self) -> int:
        return self.image_size // self.patch

    def grid(self, size: int) -> int:
        return size // self.patch

    def run_key(self, method: str, seed: int) -> str:
        """The record name of one (method, seed) run: runs/vit_<method>_s<seed>_t<steps>.json."""
        return f"vit_{method}_s{seed}_t{self.steps}"

    @classmethod
    def from_dict(cls, d: dict) -> "ResolutionConfig":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def method_config(method: str, cfg: ResolutionConfig) -> TransformerConfig:
    """The encoder of one method. rope_axial: rope-vit's RoPE-Axial (theta 100, the first Dh/4 pairs on x, the
    rest on y, interleaved pairs); rope_mixed: RoPE-Mixed (rope-vit's init, temperature 10, learned per head);
    string / espr: their defaults for 2-D positions, which start from RoPE-Mixed (STRING with P = I, ESPR at its
    commuting init); learned: an axial learned table per axis, as long as the largest test grid."""
    base = dict(d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers, d_ff=2 * cfg.d_model, coord_dim=2)
    if method == "learned":
        return TransformerConfig(positional="learned", max_len=max(cfg.grid(s) for s in cfg.eval_sizes), **base)
    kw = {
        "rope_axial": (
            "rope",
            {"mode": "axial", "base": 100.0, "axis_layout": "blocks", "pairing": "interleaved", "axis_order": (1, 0)},
        ),
        "rope_mixed": ("rope", {"mode": "mixed", "pairing": "interleaved"}),
        "string": ("string", {}),
        "espr": ("espr", {}),
    }
    if method not in kw:
        fail("method", method, f"one of {', '.join(METHODS)}")
    name, pk = kw[method]
    return TransformerConfig(positional=name, positional_kwargs=pk, **base)


def config_for(quick: bool, seed: int = 0) -> ResolutionConfig:
    """Quick (a smoke run): rope_mixed and learned, 1 seed, 60 steps, grids 3 and 5 around the training 4.
    Full: every method, 3 seeds. The seeds start at `seed` (the run's --seed)."""
    check_int("seed", seed, 0)
    if quick:
        return ResolutionConfig(methods=("rope_mixed", "learned"), seeds=(seed,), steps=60, eval_sizes=(12, 16, 20))
    return ResolutionConfig(seeds=tuple(seed + s for s in ResolutionConfig.seeds))
