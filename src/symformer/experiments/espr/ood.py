"""The OOD translation study of the `espr` experiment (T8'.12, T8'.16/T8'.21, T8'.22): a ViT with learned PE,
RoPE, STRING or ESPR is trained on digits at the top-left of a larger canvas and tested at every offset.

Every (arm, learning rate, seed) is one `Job` trained by `train.Trainer` and recorded by `run_jobs` (so the
study gets `--resume` and `--jobs`). Learning rates are selected per arm on the validation split at the
training offset (never on the test offsets): the grid is run with the first seed, the best learning rate by
validation loss is then run with the other seeds (the first seed's run is reused)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields

import torch

from symformer._rng import seed_torch
from symformer._validation import check_float, check_int, fail
from symformer.data.base import TensorData
from symformer.data.digits import load_digits_images, patchify
from symformer.experiments.espr.arms import ARMS, Arm
from symformer.models import TransformerConfig, ViTClassifier, attention_layers
from symformer.positional import diagnostics as dg
from symformer.runner.devices import tensor_data_on
from symformer.runner.jobs import Job, JobFunction, run_jobs
from symformer.train import TrainConfig, Trainer
from symformer.train.tasks import Classification

CANVAS, DIGIT, PATCH = 16, 8, 4
# IR_spec below this is rounding: RoPE/STRING are exactly relative (T8'.23), but their float32 parameters give
# IR_spec ~1e-7 (STRING's learned orthogonal factor is orthogonal to float32 precision); ranked as 0
IR_ZERO = 1e-5


@dataclass(frozen=True)
class OODConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    steps: int = 600
    batch: int = 64
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)  # validation-selected per arm
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    d_act: int = 12  # ESPR active dimension (head_dim 16): 4 null coordinates for eta_mix
    offset_stride: int = 1  # test offsets (dy, dx) in 0..CANVAS-DIGIT with this stride (pixels)
    arms: tuple[Arm, ...] = ARMS
    ir_n_r: int = 64
    ir_ascent: int = 10

    def __post_init__(self) -> None:
        for name in ("seeds", "lrs", "arms"):
            val = getattr(self, name)
            if not isinstance(val, tuple):
                fail(name, val, "a non-empty tuple", TypeError)
            if not val:
                fail(name, val, "a non-empty tuple")
        for s in self.seeds:
            check_int("seeds", s, 0)
        for lr in self.lrs:
            check_float("lrs", lr, 0.0, low_open=True)
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        check_int("offset_stride", self.offset_stride, 1, CANVAS - DIGIT)
        check_int("d_act", self.d_act, 2, self.d_model // self.n_heads)
        check_int("ir_n_r", self.ir_n_r, 1)
        check_int("ir_ascent", self.ir_ascent, 0)
        for arm in self.arms:
            if not isinstance(arm, Arm):
                fail("arms", arm, "Arm values (espr.arms.Arm)", TypeError)
        names = [a.name for a in self.arms]
        if len(set(names)) < len(names):
            fail("arms", names, "arms of distinct names (each names its records)")

    @classmethod
    def from_dict(cls, d: dict, arms: tuple[Arm, ...]) -> "OODConfig":
        """The config a job's JSON arguments carry (json_config), with `arms`, the typed arms the job came with, in
        place of the arm names recorded there."""
        if [a.name for a in arms if a.name not in d["arms"]]:
            fail("arms", [a.name for a in arms], f"arms among the recorded {d['arms']}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "arms"}, arms=arms)


def arm_config(arm: Arm, cfg: OODConfig, seed: int = 0):
    """TransformerConfig of one arm; ESPR levels differ in penalty weights on eps_comm / eta_mix (T6'.0). `seed`:
    the training seed, which also seeds free ESPR's random non-commuting init (with the parts' default seed 0 every
    training seed would start from the same generators, and the standard error over seeds would leave that
    variation out)."""
    base = dict(d_model=cfg.d_model, n_heads=cfg.n_heads, n_layers=cfg.n_layers, d_ff=2 * cfg.d_model, coord_dim=2)
    if arm.positional == "learned":
        return TransformerConfig(positional="learned", max_len=CANVAS // PATCH, **base)
    if arm.positional == "rope":
        return TransformerConfig(positional="rope", **base)
    # the recorded runs' pairing (the parts default to "half") and random-direction init of the 2-D frequencies
    # ("mixed", the parts' default for C > 1, is rope-vit's RoPE-Mixed since issue 62)
    old = {"pairing": "interleaved", "mode": "mixed_random"}
    if arm.positional == "string":
        return TransformerConfig(positional="string", positional_kwargs=old, **base)
    if arm.penalty is None:  # non-commuting from the start, no pull back to STRING
        kw = dict(commuting_init=False, eps_comm_penalty=0.0, eta_mix_penalty=0.0, seed=seed)
    else:
        kw = dict(commuting_init=True, eps_comm_penalty=arm.penalty, eta_mix_penalty=arm.penalty)
    return TransformerConfig(positional="espr", positional_kwargs=dict(d_act=cfg.d_act, **old, **kw), **base)


def place(images: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """Digits (B, 8, 8) at offset (dy, dx) of an empty CANVAS x CANVAS image."""
    out = images.new_zeros(images.shape[0], CANVAS, CANVAS)
    out[:, dy : dy + DIGIT, dx : dx + DIGIT] = images
    return out


def offsets(stride: int) -> list[tuple[int, int]]:
    span = range(0, CANVAS - DIGIT + 1, stride)
    return [(dy, dx) for dy in span for dx in span]


def is_aligned(off: tuple[int, int]) -> bool:
    """A patch-aligned offset moves whole patches: a pure token shift, where relative logits can help."""
    return off[0] % PATCH == 0 and off[1] % PATCH == 0


def ir_radius() -> tuple[float, int]:
    """(R, grid side): R = max ||r||_1 of a patch position on the canvas's patch grid (T8'.7's sup range)."""
    side = CANVAS // PATCH
    return 2.0 * (side - 1), side


@functools.lru_cache(maxsize=1)
def _digits():
    return load_digits_images(0)


def _split(part: str, dy: int = 0, dx: int = 0):
    x, y, idx = _digits()
    tok, pos = patchify(place(x[idx[part]], dy, dx), PATCH)
    return TensorData(tok, y[idx[part]], pos)


def train_model(arm: Arm, seed: int, lr: float, cfg: OODConfig, device: str = "cpu"):
    """(model, {val_loss, val_accuracy}) after training at offset (0, 0) through train.Trainer on `device`: AdamW,
    10% linear warmup then cosine, no weight decay, no clipping, `steps` steps of batch `batch`."""
    train, val = tensor_data_on(_split("train"), device), tensor_data_on(_split("val"), device)
    spe = len(train) // cfg.batch
    tc = TrainConfig(
        epochs=-(-cfg.steps // spe),
        batch_size=cfg.batch,
        optimizer="adamw",
        lr=lr,
        weight_decay=0.0,
        schedule="cosine",
        warmup_steps=max(1, cfg.steps // 10),
        grad_clip=None,
        seed=seed,
        max_steps=cfg.steps,
        eval_batch_size=1024,
    )
    seed_torch(seed)
    model = ViTClassifier(arm_config(arm, cfg, seed), token_dim=PATCH * PATCH, n_classes=10).to(device)
    trainer = Trainer(model, Classification(), train, val, tc)
    final = trainer.fit()
    return model.eval(), {
        "val_loss": final["val_loss"],
        "val_accuracy": final["val_accuracy"],
        "seconds": sum(trainer.epoch_seconds),
    }


@torch.no_grad()
def evaluate_offsets(model, offs, device: str = "cpu") -> dict:
    """Per offset "dy,dx" of the test split: accuracy and mean cross-entropy (the risk); B_z = max ||z|| over
    the pooled features z = model.features(...) (T8'.4)."""
    acc, risk, bz = {}, {}, 0.0
    for dy, dx in offs:
        data = tensor_data_on(_split("test", dy, dx), device)
        z = model.features(data.x, data.pos)
        logits = model.head(z)
        acc[f"{dy},{dx}"] = float((logits.argmax(-1) == data.y).float().mean())
        risk[f"{dy},{dx}"] = float(torch.nn.functional.cross_entropy(logits, data.y))
        bz = max(bz, float(z.norm(dim=-1).max()))
    return {"acc": acc, "risk": risk, "B_z": bz}


def model_ir(model, offs, cfg: OODConfig) -> dict | None:
    """IR_spec (T8'.7, T3.5's R_sp as the modules define it) of each rotary layer with nu uniform over the
    test offsets (in patch units) and R from `ir_radius`; the model's value is the max over layers. None for
    additive PE (no rotation)."""
    rots = [layer.rotary for layer in attention_layers(model) if layer.rotary is not None]
    if not rots:
        return None
    deltas = torch.tensor(offs, dtype=torch.float64) / PATCH
    radius = ir_radius()[0]
    per = []
    for rot in rots:
        mean, per_delta = dg.ir_spec(
            rot, radius, deltas=deltas, n_r=cfg.ir_n_r, ascent_steps=cfg.ir_ascent, return_per_delta=True
        )
        per.append((float(mean), float(per_delta.max())))
    out = {"ir_spec": max(p[0] for p in per), "ir_sup": max(p[1] for p in per)}
    if not rots[0].commuting:  # free generators (ESPR): report how far training took them from commuting
        with torch.no_grad():
            parts = [r.rotation_parts() for r in rots]  # (L, P, d_act), the RotaryPositional interface
            out["eps_comm"] = max(float(dg.eps_comm(L.double())) for L, _, _ in parts)
            out["eta_mix"] = max(float(dg.eta_mix(P.double(), d_act)) for _, P, d_act in parts)
    return out


def ood_job(arm: str, seed: int, lr: float, cfg: dict, *, spec: Arm, device: str = "cpu") -> dict:
    """One recorded run (a Job): train and test at every offset on `device`, then IR_spec and the Lipschitz
    constant in float64 on the CPU; JSON in and out. `arm` is the arm's name as the record carries it, `spec` the
    arm itself (the job's function carries it, outside the record's signature: `arm_job`)."""
    if spec.name != arm:
        fail("arm", arm, f"the name of spec ({spec.name!r})")
    c = OODConfig.from_dict(cfg, (spec,))
    model, info = train_model(spec, seed, lr, c, device)
    offs = offsets(c.offset_stride)
    ev = evaluate_offsets(model, offs, device)
    model = model.cpu()  # the float64 diagnostics below are exact on the CPU
    ev["ir"] = model_ir(model, offs, c)
    # L of T8'.3 for z -> loss: cross-entropy is sqrt(2)-Lipschitz in the logits, psi = head is ||W||_2-Lipschitz
    ev["L"] = math.sqrt(2) * float(torch.linalg.matrix_norm(model.head.weight.detach().double(), ord=2))
    ev.update(info, arm=arm, seed=seed, lr=lr)
    return ev


# the name the recorded runs carry (results/espr/runs); --resume matches records by it, whatever module holds ood_job
OOD_JOB = JobFunction(ood_job, "symformer.experiments.espr_ood.ood_job")


def _key(arm: Arm, seed: int, lr: float, cfg: OODConfig) -> str:
    return f"ood_{arm.name}_lr{lr:g}_s{seed}_t{cfg.steps}_o{cfg.offset_stride}"


def arm_job(arm: Arm, seed: int, lr: float, cfg: OODConfig, device: str = "cpu") -> Job:
    """The recorded run of `arm`: its arguments name the arm (the signature of the recorded runs), and its function
    carries the typed arm to the worker, so no worker reads an arm back from its name."""
    fn = JobFunction(functools.partial(OOD_JOB.fn, spec=arm), OOD_JOB.name, device)
    return Job(_key(arm, seed, lr, cfg), fn, dict(arm=arm.name, seed=seed, lr=lr, cfg=json_config(cfg)))


def run_ood(
    cfg: OODConfig,
    record_dir=None,
    n_workers: int = 1,
    resume: bool = False,
    stats: dict | None = None,
    device: str = "cpu",
) -> dict:
    """Every arm: the learning-rate grid with the first seed, then the other seeds at the lr with the lowest
    validation loss. Returns {"runs": {arm: [record per seed]}, "offsets": [...], "selected_lr": {arm: lr},
    "selection": {arm: {lr: val_loss}}}."""
    s0 = cfg.seeds[0]
    first = run_jobs(
        [arm_job(a, s0, lr, cfg, device) for a in cfg.arms for lr in cfg.lrs], record_dir, n_workers, resume, stats
    )
    selection = {a.name: {str(lr): first[_key(a, s0, lr, cfg)]["val_loss"] for lr in cfg.lrs} for a in cfg.arms}
    chosen = {a: min(cfg.lrs, key=lambda lr, a=a: _finite(selection[a.name][str(lr)])) for a in cfg.arms}
    rest = [arm_job(a, s, chosen[a], cfg, device) for a in cfg.arms for s in cfg.seeds[1:]]
    got = dict(first)
    got.update(run_jobs(rest, record_dir, n_workers, resume, stats))
    return {
        "runs": {a.name: [got[_key(a, s, chosen[a], cfg)] for s in cfg.seeds] for a in cfg.arms},
        "offsets": [list(o) for o in offsets(cfg.offset_stride)],
        "selected_lr": {a.name: lr for a, lr in chosen.items()},
        "selection": selection,
    }


def _finite(v: float) -> float:
    return v if math.isfinite(v) else float("inf")


def json_config(cfg: OODConfig) -> dict:
    """The config as JSON, each arm by its name (the jobs' arguments and results.json's config)."""
    d = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    d["arms"] = [a.name for a in cfg.arms]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
