"""Experiment `extrapolation`: character LMs on tiny Shakespeare trained at context 64 with each positional part,
evaluated at contexts 64, 128, 256 and 512 on the validation split (bits per character and the ratio to 64).

No paper in this project claims anything about length extrapolation: this is our own measurement, made the
same way for every part. Every (part, seed) is one `Job` trained by `train.Trainer` (records under runs/,
`--resume`, `--jobs`). At every context the same validation characters are predicted: the first N + 1
characters of the split, N a multiple of the longest context, cut into non-overlapping windows of that context
(every position of a window is scored, so a longer context also means fewer short-context positions)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

from symformer._validation import check_float, check_int, fail
from symformer.experiments.base import RunContext, experiment
from symformer.experiments.jobs import Job, one_thread, reuse_note, run_jobs
from symformer.experiments.plots import pyplot
from symformer.results import Claim, ExperimentResult, verdict

PARTS = ("none", "sinusoidal", "learned", "rope", "string", "circulant_string", "espr")
DATA = "tinyshakespeare.txt"
PAPER_SETTING = "none: no paper in this project makes a length-extrapolation claim (our own measurement)"


@dataclass(frozen=True)
class ExtrapolationConfig:
    parts: tuple[str, ...] = PARTS
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 2000
    batch: int = 32
    lr: float = 3e-3
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    train_context: int = 64
    eval_contexts: tuple[int, ...] = (64, 128, 256, 512)
    eval_chars: int | None = None  # cap on the validation characters scored (None: the whole split)

    def __post_init__(self) -> None:
        import symformer.positional  # noqa: F401  (registers the parts)
        from symformer.registry import POSITIONAL

        for name in ("parts", "seeds", "eval_contexts"):
            if not isinstance(getattr(self, name), tuple) or not getattr(self, name):
                fail(name, getattr(self, name), "a non-empty tuple")
        for p in self.parts:
            if p not in POSITIONAL.names():
                fail("parts", p, f"positional parts among {', '.join(POSITIONAL.names())}")
        for s in self.seeds:
            check_int("seeds", s, 0)
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_int("train_context", self.train_context, 2)
        for c in self.eval_contexts:
            check_length("eval_contexts", c)
        if self.eval_chars is not None:
            check_int("eval_chars", self.eval_chars, max(self.eval_contexts) + 1)

    @classmethod
    def from_dict(cls, d: dict) -> "ExtrapolationConfig":
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def check_length(name: str, v) -> int:
    """A context length: a positive integer (a float, a bool or a string is a ValueError too)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        fail(name, v, "a positive integer number of tokens")
    return v


def max_context(model) -> int | None:
    """Longest context a model's positional part supports: a learned table's max_len, else None (no limit)."""
    from symformer.positional.absolute import LearnedPE

    tables = [m.max_len for m in model.modules() if isinstance(m, LearnedPE)]
    return min(tables) if tables else None


def check_context(model, context) -> int:
    """ValueError naming both lengths when `context` exceeds what the model's positional part supports."""
    check_length("context", context)
    limit = max_context(model)
    if limit is not None and context > limit:
        fail(
            "context",
            context,
            f"at most {limit} (the learned positional table has max_len={limit} positions; "
            "a longer context would index past it)",
        )
    return context


@torch.no_grad()
def context_bpc(model, ids: torch.Tensor, context: int, n_chars: int, batch: int = 16) -> float:
    """Bits per character predicting ids[1 : n_chars + 1] in non-overlapping windows of `context` tokens."""
    check_context(model, context)
    check_int("n_chars", n_chars, 1)
    if n_chars % context or n_chars + 1 > len(ids):
        fail("n_chars", n_chars, f"a multiple of context={context} with n_chars + 1 <= {len(ids)} characters")
    x = ids[:n_chars].reshape(-1, context)
    y = ids[1 : n_chars + 1].reshape(-1, context)
    model.eval()
    nats = 0.0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch])
        nats += float(
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y[i : i + batch].reshape(-1), reduction="sum"
            )
        )
    return nats / n_chars / math.log(2)


def validation_ids(val) -> torch.Tensor:
    """The contiguous validation characters behind load_char_text's non-overlapping windows."""
    return torch.cat([val.x.reshape(-1), val.y[-1, -1:]])


def build_lm(part: str, cfg: ExtrapolationConfig, vocab_size: int):
    from symformer.models import TransformerConfig
    from symformer.models.lm import CausalLM

    kw = {"d_act": cfg.d_model // cfg.n_heads - 4} if part == "espr" else {}  # 4 null coordinates for mixing
    if part in ("string", "espr"):
        kw["pairing"] = "interleaved"  # the pairing of the recorded runs (STRING/ESPR's default before issue 42)
    tc = TransformerConfig(
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        n_layers=cfg.n_layers,
        positional=part,
        positional_kwargs=kw,
        max_len=cfg.train_context,
    )  # learned table = training context
    return CausalLM(tc, vocab_size)


def lm_job(part: str, seed: int, cfg: dict, data_dir: str | None = None) -> dict:
    """One recorded run: train at the training context, then bpc at every evaluation context (None + reason
    where the part cannot go)."""
    from symformer.data import load_char_text
    from symformer.train import TrainConfig, Trainer
    from symformer.train.tasks import LanguageModeling

    c = ExtrapolationConfig.from_dict(cfg)
    split = load_char_text(block=c.train_context, data_dir=data_dir)
    spe = len(split.train) // c.batch
    tc = TrainConfig(
        epochs=-(-c.steps // spe),
        batch_size=c.batch,
        optimizer="adamw",
        lr=c.lr,
        weight_decay=0.01,
        schedule="cosine",
        warmup_steps=max(1, c.steps // 20),
        grad_clip=1.0,
        seed=seed,
        max_steps=c.steps,
        eval_batch_size=256,
    )
    torch.manual_seed(seed)
    model = build_lm(part, c, split.meta["vocab_size"])
    t0 = time.perf_counter()
    Trainer(model, LanguageModeling(), split.train, None, tc).fit()
    train_s = time.perf_counter() - t0
    ids = validation_ids(split.val)
    longest = max(c.eval_contexts)
    avail = len(ids) - 1 if c.eval_chars is None else min(c.eval_chars, len(ids) - 1)
    n_chars = avail // longest * longest
    bpc, na = {}, {}
    for ctx_len in c.eval_contexts:
        try:
            bpc[str(ctx_len)] = context_bpc(model, ids, ctx_len, n_chars)
        except ValueError as e:  # a learned table cannot index past its size: N/A with the reason
            bpc[str(ctx_len)], na[str(ctx_len)] = None, str(e)
    return {
        "part": part,
        "seed": seed,
        "bpc": bpc,
        "na": na,
        "n_chars": n_chars,
        "train_seconds": train_s,
        "seconds": time.perf_counter() - t0,
    }


def _mean_se(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((v - m) ** 2 for v in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return m, se


def summarize(runs: dict[str, list[dict]], contexts: tuple[int, ...]) -> tuple[dict, dict]:
    """(extrapolation_bpc, extrapolation_ratio_512): per part and length the mean bpc over seeds and its standard
    error ({"mean": None, "se": None, "na": reason} where the part cannot go); per part the mean over seeds of
    bpc(512) / bpc(train context) (None where 512 is N/A or not evaluated)."""
    table, ratio = {}, {}
    base = str(min(contexts))
    for part, rs in runs.items():
        row = {}
        for c in map(str, contexts):
            vals = [r["bpc"][c] for r in rs]
            if any(v is None for v in vals):
                row[c] = {"mean": None, "se": None, "na": next(r["na"][c] for r in rs if c in r["na"])}
            else:
                m, se = _mean_se(vals)
                row[c] = {"mean": m, "se": se}
        table[part] = row
        ok = "512" in row and row["512"]["mean"] is not None
        ratio[part] = _mean_se([r["bpc"]["512"] / r["bpc"][base] for r in rs])[0] if ok else None
    return table, ratio


def claims(runs: dict[str, list[dict]], cfg: ExtrapolationConfig) -> list[Claim]:
    """One row per part: is bpc at the longest context lower than at the training context? Paired by seed;
    holds / fails when the mean difference is more than 2 standard errors below / above 0."""
    lo, hi = str(cfg.train_context), str(max(cfg.eval_contexts))
    st = (
        f"ours: char LM d={cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, trained at context "
        f"{cfg.train_context} for {cfg.steps} AdamW steps of {cfg.batch}; {len(cfg.seeds)} seed(s); tiny Shakespeare "
        "validation split"
    )
    out = []
    for part, rs in runs.items():
        if any(r["bpc"].get(hi) is None or r["bpc"].get(lo) is None for r in rs):
            reason = next((r["na"][hi] for r in rs if hi in r["na"]), f"context {hi} or {lo} not evaluated")
            meas, ok = f"N/A: {reason}", None
        else:
            diffs = [r["bpc"][hi] - r["bpc"][lo] for r in rs]
            m, se = _mean_se(diffs)
            ok = None if not math.isfinite(se) else (True if m < -2 * se else False if m > 2 * se else None)
            meas = (
                f"bpc {hi} - bpc {lo} = {m:+.4f} (SE {se:.4f}, {len(diffs)} seed(s)); ratio "
                f"{sum(r['bpc'][hi] / r['bpc'][lo] for r in rs) / len(rs):.3f}"
            )
        out.append(
            Claim(
                f"EXT.{part}",
                f"{part}: bpc at context {hi} is lower than at the training context {lo}",
                "none (our own measurement)",
                meas,
                verdict(ok),
                "paired by seed; inconclusive within 2 SE or with one seed",
                st,
                PAPER_SETTING,
            )
        )
    return out


def plot(table: dict, contexts: tuple[int, ...], path) -> None:
    """bpc against evaluation context, one line per part (N/A points left out), standard errors as bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for part, row in table.items():
        pts = [(c, row[str(c)]) for c in contexts if row[str(c)]["mean"] is not None]
        se = [p[1]["se"] if math.isfinite(p[1]["se"]) else 0.0 for p in pts]
        ax.errorbar([p[0] for p in pts], [p[1]["mean"] for p in pts], yerr=se, marker="o", capsize=3, label=part)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(contexts), [str(c) for c in contexts])
    ax.set_xlabel("evaluation context (tokens; trained at the first)")
    ax.set_ylabel("validation bits per character")
    ax.set_title("Length extrapolation, tiny Shakespeare")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def config_for(quick: bool) -> ExtrapolationConfig:
    """Quick (<= 2 minutes): rope and string, 1 seed, a small model and budget, 16k validation characters.
    Full: every part, 3 seeds, the same budget for each."""
    if quick:
        return ExtrapolationConfig(
            parts=("rope", "string"), seeds=(0,), steps=600, batch=16, d_model=32, n_heads=2, eval_chars=16384
        )
    return ExtrapolationConfig()


@experiment(
    "extrapolation",
    "Length extrapolation of char LMs trained at context 64 with each positional part (our own measurement)",
    data_files=(DATA,),
)
def run(ctx: RunContext) -> ExperimentResult:
    # small models: one intra-op thread per process (as run_jobs' workers use) is as fast and does not oversubscribe
    with one_thread():
        return _run(ctx)


def _run(ctx: RunContext) -> ExperimentResult:
    t0 = time.time()
    cfg = config_for(ctx.quick)
    cfg = ExtrapolationConfig.from_dict({**asdict(cfg), "seeds": [ctx.seed + s for s in cfg.seeds]})
    data_dir = str(ctx.data_file(DATA).parent)
    cd = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    jobs = [
        Job(f"lm_{p}_s{s}_t{cfg.steps}", lm_job, dict(part=p, seed=s, cfg=cd, data_dir=data_dir))
        for p in cfg.parts
        for s in cfg.seeds
    ]
    stats: dict = {}
    got = run_jobs(jobs, ctx.out_dir / "runs", ctx.jobs, ctx.resume, stats, ctx.job_log)
    runs = {p: [got[f"lm_{p}_s{s}_t{cfg.steps}"] for s in cfg.seeds] for p in cfg.parts}
    table, ratio = summarize(runs, cfg.eval_contexts)
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    plot(table, cfg.eval_contexts, ctx.out_dir / "bpc_vs_length.png")
    rows = [
        f"{p}: " + ", ".join(f"{c}: " + ("N/A" if v["mean"] is None else f"{v['mean']:.3f}") for c, v in row.items())
        for p, row in table.items()
    ]
    notes = [
        f"wall time {time.time() - t0:.0f}s; per-run training seconds: "
        + ", ".join(f"{k}: {v['train_seconds']:.0f}" for k, v in got.items()),
        reuse_note("LM", stats),
        "bpc by context: " + "; ".join(rows),
        f"{runs[cfg.parts[0]][0]['n_chars']} validation characters scored at every context.",
        "learned PE has a table of the training context's size: longer contexts are N/A (never clamped).",
    ]
    return ExperimentResult(
        metrics={"extrapolation_bpc": table, "extrapolation_ratio_512": ratio},
        claims=claims(runs, cfg),
        config=asdict(cfg),
        figures=["bpc_vs_length.png"],
        notes=notes,
    )
