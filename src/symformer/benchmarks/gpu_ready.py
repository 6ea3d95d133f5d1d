"""`gpu_ready` suite (issue 57): what makes a step slow on an accelerator, counted on any device, per positional
part x attention core in a config-built 4-layer Hugging Face Llama (hidden 128, intermediate 256, 4 heads, 2 KV
heads, vocab 256). Parts: native, rope, string, espr (`hf.patch_positional`); cores: the native SDPA and every
registered decoding core, favor and plash (attention.decoding_cores; `hf.configure(model, attention=...)`).
docs/performance.md, "GPU", explains the design of the checks.

Per row (part, core):
- decoding step after a 256-token prefill (SDPA: transformers' DynamicCache; a decoding core: `hf.state_cache`,
  passed as `cache=`), after one warm-up step: host syncs, value-dependent sizes, aten ops (symformer.profiling's
  OpCounter);
- training forward + backward (2 x 128 tokens, labels = ids), after one warm-up step: the same, and the graph
  breaks of the forward (`torch._dynamo.explain`; AOTAutograd traces the backward from the forward graph, and
  dynamo traces a custom autograd.Function's backward when it meets its forward, so a break in either shows);
- `torch.compile(model)` decoding T steps after an eager warm-up step (profiling.compile_counts): the graph breaks
  of its first step (its graphs less one, explain's count, without tracing the step twice) and the recompiles of
  steps 2..T, T = 256 after a 256-token prefill (quick: 16 after a 248-token prefill, so the steps cross PLASH's
  block boundary at 256; backend "eager" in quick, "aot_eager" otherwise: the recompiles are dynamo's);
- on a GPU only: per-token decode time, eager and compiled (mode="reduce-overhead"), against the native model;
  FAVOR+ and PLASH against SDPA at a 1k and a 16k context; whether a decoding step passes
  `torch.cuda.set_sync_debug_mode("error")`.
Syncs and ops are counted under `symformer.value_checks("never")`, what an accelerator gets by default, so a CPU
run counts the syncs a GPU run makes; `host_syncs_decode_cpu_default` / `host_syncs_train_cpu_default` are the
counts in the CPU's default mode ("auto": value checks read CPU tensors), for information.
A measurement that raises (dynamo failing on a construct, say) is recorded in its row's `errors` and makes the
ratio over rows `inf`; the suite goes on.

Ratios (goals of issue 57): host_syncs_decode_max = host_syncs_train_max = 0, graph_breaks_decode_max =
graph_breaks_train_max = 0, recompiles_decode_256_max <= 2, ops_decode_vs_native_rotary_max <= 1.2 (a rotary part,
native core, over the native model's ops), ops_decode_vs_native_core_max <= 2.0 (FAVOR+ / PLASH, native positional,
over the native SDPA model's ops); on a GPU: decode_compiled_vs_native[rope] <= 1.05, favor/plash_decode_vs_sdpa_1k
<= 1.0, favor/plash_decode_vs_sdpa_16k <= 0.25, sync_debug_error_decode_ok (1: every row passed).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Callable

import torch

from symformer._rng import seeded_generator
from symformer._validation import value_checks
from symformer.attention.decoding import decoding_cores
from symformer.benchmarks._hf_llama import config_llama
from symformer.benchmarks.base import BenchContext, BenchResult, one_call_seconds, suite
from symformer.integrations import hf
from symformer.integrations.hf.cache import cache_kwargs, state_cache
from symformer.profiling import OpCounter, compile_counts, graph_breaks

SPEC = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
# the parts of issue 57's table, named on purpose (not every registered rotary part): HF's own RoPE, symformer's
# RoPE, STRING and ESPR, the parts whose op counts the issue's goals were set on
PARTS = ("native", "rope", "string", "espr")


def cores() -> tuple[str, ...]:
    """The native SDPA, then every registered decoding core in name order (favor, plash: the recorded order)."""
    return ("sdpa", *sorted(decoding_cores()))


def all_rows() -> tuple[tuple[str, str], ...]:
    return tuple((p, c) for p in PARTS for c in cores())


def issue_rows() -> tuple[tuple[str, str], ...]:
    """The rows of issue 57's table: each part with the native core, each decoding core with the native part, and
    STRING with each decoding core."""
    decoding = cores()[1:]
    return tuple([(p, "sdpa") for p in PARTS] + [("native", c) for c in decoding] + [("string", c) for c in decoding])


def __getattr__(name: str):
    # CORES, ALL_ROWS, ISSUE_ROWS: read from the registry when asked, so a core registered later has its rows
    views = {"CORES": cores, "ALL_ROWS": all_rows, "ISSUE_ROWS": issue_rows}
    if name in views:
        return views[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class GpuReadyPlan:
    layers: int = 4
    prefill: int = 256
    train_batch: int = 2
    train_tokens: int = 128
    recompile_tokens: int = 256
    recompile_prefill: int = 256  # the prefill before the compiled steps
    backend: str = "aot_eager"  # for counting recompiles on the CPU; a GPU row's timing compiles with inductor
    rows: tuple[tuple[str, str], ...] = dataclasses.field(default_factory=all_rows)
    compile_rows: tuple[tuple[str, str], ...] | None = None  # rows whose breaks and recompiles are counted (None: all)
    timed_tokens: int = 64  # GPU: per-token time = mean over this many steps (64: one PLASH block, its refresh)
    contexts: tuple[int, ...] = (1024, 16384)

    @classmethod
    def for_run(cls, quick: bool) -> "GpuReadyPlan":
        """Quick: the 8 rows of issue 57's table, with the eager backend for the compiled decoding run (the
        recompiles are dynamo's, whatever the backend). Full: all 12 rows, with aot_eager. Both decode 256 steps
        after a 256-token prefill."""
        if quick:
            return cls(rows=issue_rows(), backend="eager")
        return cls()

    @classmethod
    def tiny(cls) -> "GpuReadyPlan":
        """A 1-layer smoke version for the tests (seconds): 3 rows, breaks and recompiles of one."""
        return cls(
            layers=1,
            prefill=8,
            train_batch=1,
            train_tokens=8,
            recompile_tokens=3,
            recompile_prefill=8,
            backend="eager",
            rows=(("native", "sdpa"), ("rope", "sdpa"), ("native", "favor")),
            compile_rows=(("rope", "sdpa"),),
            timed_tokens=3,
            contexts=(32,),
        )


def build_model(part: str, core: str, layers: int, device: str, seed: int, max_len: int = 2048):
    """The suite's Llama with `part` in every attention layer (native: HF's RoPE) and `core` (sdpa: HF's)."""

    model = config_llama(seed, max_len, num_hidden_layers=layers, **SPEC)
    if part != "native":
        model = hf.patch_positional(model, part)
    if core != "sdpa":
        hf.configure(model, attention=core)
    return model.to(device).eval()


class Decoding:
    """A model's cache after a prefill of `prefill` random tokens, and the next token; `step(fn)` decodes one
    token with `fn` (the model, or a compiled model). Positions stay on the device: no host value per step.
    SDPA's cache is transformers' DynamicCache, or with `static_len` its StaticCache of that many positions (HF's
    recipe for mode="reduce-overhead": a CUDA graph needs fixed shapes)."""

    def __init__(self, model, core: str, prefill: int, seed: int, static_len: int | None = None):
        import transformers as tf

        self.model = model
        dev = next(model.parameters()).device
        ids = torch.randint(0, SPEC["vocab_size"], (1, prefill), generator=seeded_generator(seed)).to(dev)
        if core != "sdpa":
            self.cache = state_cache(model)
        elif static_len is not None:
            self.cache = tf.StaticCache(config=model.config, max_cache_len=static_len)
        else:
            self.cache = tf.DynamicCache(config=model.config)
        self.kwargs = {**cache_kwargs(model, self.cache), "use_cache": True}
        with torch.no_grad():
            out = model(ids, **self.kwargs, logits_to_keep=1)
        self.next = out.logits[:, -1:].argmax(-1)
        self.position = torch.full((1, 1), prefill, dtype=torch.long, device=dev)

    def step(self, fn: Callable[..., Any] | None = None) -> None:
        with torch.no_grad():
            out = (self.model if fn is None else fn)(self.next, position_ids=self.position, **self.kwargs)
            self.next = out.logits[:, -1:].argmax(-1)
        self.position = self.position + 1


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def _attempt(row: dict, keys: tuple[str, ...], fn: Callable[[], Any], what: str | None = None) -> Any:
    """fn()'s result, and row.update(it) when it is a dict; when fn raises, the row's `keys` are None and the
    error is in row["errors"][what or keys[0]] (the suite goes on; a ratio over a None reads inf)."""
    try:
        got = fn()
    except Exception as e:  # noqa: BLE001 - a row that fails is a result, recorded
        row.update(dict.fromkeys(keys))
        row.setdefault("errors", {})[what or keys[0]] = _one_line(e)
        return None
    if isinstance(got, dict):
        row.update(got)
    return got


def _counted(fn: Callable[[], Any], mode: str) -> OpCounter:
    with value_checks(mode), OpCounter() as c:
        fn()
    return c


def _counts(fn: Callable[[], Any], what: str, cpu: bool) -> dict:
    """Syncs, value-dependent sizes and ops of `fn()` under value_checks("never"); on the CPU also the syncs in
    its default mode ("auto")."""
    c = _counted(fn, "never")
    out = {f"host_syncs_{what}": c.syncs, f"shape_syncs_{what}": c.shape_syncs, f"aten_ops_{what}": c.ops}
    if cpu:
        out[f"host_syncs_{what}_cpu_default"] = _counted(fn, "auto").syncs
    return out


def _breaks(fn: Callable[[], Any], what: str, details: dict) -> dict:
    with value_checks("never"):
        reasons = graph_breaks(fn)
    details[f"graph_break_reasons_{what}"] = reasons
    return {f"graph_breaks_{what}": len(reasons)}


def _compiled_decode(model, core: str, plan: GpuReadyPlan, seed: int, details: dict) -> dict:
    """Graph breaks of the first compiled decoding step (its graphs less one, explain's count) and the
    recompiles of the later steps, from one run of `torch.compile(model)` (profiling.compile_counts)."""
    dec = _warm(Decoding(model, core, plan.recompile_prefill, seed))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=plan.backend)
    with value_checks("never"):
        counts = compile_counts(lambda: dec.step(compiled), plan.recompile_tokens)
    torch._dynamo.reset()
    details["graph_break_reasons_decode"] = counts.break_reasons
    return {"graph_breaks_decode": counts.graph_breaks, "recompiles_decode": counts.recompiles}


def _warm(dec: Decoding) -> Decoding:
    """One step that builds the tables and buffers a first step builds, in the mode the counted steps run in (an
    accelerator's: the caches key sync-free there, so a warm-up in the CPU's value-reading mode would not warm them)."""
    with value_checks("never"):
        dec.step()
    return dec


def count_row(part: str, core: str, plan: GpuReadyPlan, device: str, seed: int) -> tuple[dict, dict]:
    """One (part, core) row of counts, and the graph-break reasons behind them."""
    row: dict[str, Any] = {"part": part, "core": core}
    details: dict[str, Any] = {}
    cpu = device == "cpu"
    model = build_model(part, core, plan.layers, device, seed)
    compiled = plan.compile_rows is None or (part, core) in plan.compile_rows
    compile_keys = ("graph_breaks_decode", "recompiles_decode") if compiled else ()
    count_keys = ("host_syncs_decode", "aten_ops_decode")
    dec = _attempt(row, count_keys + compile_keys, lambda: _warm(Decoding(model, core, plan.prefill, seed)), "prefill")
    if dec is not None:
        _attempt(row, count_keys, lambda: _counts(dec.step, "decode", cpu))
        if compiled:
            _attempt(row, compile_keys, lambda: _compiled_decode(model, core, plan, seed, details))
    model.train()
    ids = torch.randint(0, SPEC["vocab_size"], (plan.train_batch, plan.train_tokens), generator=seeded_generator(seed))
    ids = ids.to(device)

    def train_step():
        model(input_ids=ids, labels=ids).loss.backward()

    def train_forward():
        return model(input_ids=ids, labels=ids).loss

    def train_warm_up():
        with value_checks("never"):  # the counted mode (_warm)
            train_step()

    _attempt(row, ("host_syncs_train", "aten_ops_train"), train_warm_up, "train warm-up")
    _attempt(row, ("host_syncs_train", "aten_ops_train"), lambda: _counts(train_step, "train", cpu))
    if compiled:
        _attempt(row, ("graph_breaks_train",), lambda: _breaks(train_forward, "train", details))
    model.zero_grad(set_to_none=True)
    return row, details


# --------------------------------------------------------------------------- GPU only: timing and sync debug


def _per_token(step: Callable[[], Any], tokens: int, device: str, warmup: int = 2) -> float:
    """Mean synchronised wall time of `tokens` decoding steps after `warmup` steps."""
    for _ in range(warmup):
        step()
    return sum(one_call_seconds(step, device) for _ in range(tokens)) / tokens


def _sync_debug_ok(dec: Decoding) -> dict:
    """Whether one decoding step runs under torch.cuda.set_sync_debug_mode("error") (a sync raises there)."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        dec.step()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return {"sync_debug_error_ok": 1}


def time_row(row: dict, plan: GpuReadyPlan, device: str, seed: int) -> None:
    """GPU: a row's eager and compiled (mode="reduce-overhead", SDPA on a StaticCache) per-token decode time, and
    whether a decoding step passes the sync-debug check."""
    part, core = row["part"], row["core"]
    model = build_model(part, core, plan.layers, device, seed)
    dec = _warm(Decoding(model, core, plan.prefill, seed))
    _attempt(row, ("sync_debug_error_ok",), lambda: _sync_debug_ok(dec))
    if row["sync_debug_error_ok"] is None:
        row["sync_debug_error_ok"] = 0
    _attempt(row, ("decode_eager_s",), lambda: {"decode_eager_s": _per_token(dec.step, plan.timed_tokens, device)})
    warmup = 5  # compile, recompile with dynamic sizes, CUDA-graph warm-up and recording
    static = Decoding(model, core, plan.prefill, seed, static_len=plan.prefill + warmup + plan.timed_tokens + 1)
    torch._dynamo.reset()
    compiled = torch.compile(model, mode="reduce-overhead")

    def compiled_step():
        torch.compiler.cudagraph_mark_step_begin()
        static.step(compiled)

    _attempt(
        row,
        ("decode_compiled_s",),
        lambda: {"decode_compiled_s": _per_token(compiled_step, plan.timed_tokens, device, warmup)},
    )
    torch._dynamo.reset()


def context_rows(plan: GpuReadyPlan, device: str, seed: int) -> list[dict]:
    """GPU: per-token eager decode time of each core (native positional) after a prefill of each context."""
    rows = []
    for n in plan.contexts:
        for core in cores():
            row: dict[str, Any] = {"part": "native", "core": core, "context": n}

            def measure(core=core, n=n):
                model = build_model("native", core, plan.layers, device, seed, max_len=n + plan.timed_tokens + 8)
                dec = Decoding(model, core, n, seed)
                return {"decode_s": _per_token(dec.step, plan.timed_tokens, device)}

            _attempt(row, ("decode_s",), measure)
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- ratios and the suite


def _worst(rows: list[dict], key: str) -> float | None:
    """The largest `key` over the rows that measured it; inf when one of them failed (its error is in the row)."""
    values = [r[key] for r in rows if key in r]
    if not values:
        return None
    return math.inf if any(v is None for v in values) else float(max(values))


def _ops_over(rows: list[dict], base: tuple[str, str], pick: Callable[[dict], bool]) -> float | None:
    """max over the picked rows of their decode ops / the `base` row's (inf when a count failed)."""
    base_rows = [r for r in rows if (r["part"], r["core"]) == base]
    picked = [r.get("aten_ops_decode") for r in rows if pick(r)]
    if not base_rows or not picked:
        return None
    ref = base_rows[0].get("aten_ops_decode")
    return math.inf if ref is None or any(v is None for v in picked) else max(v / ref for v in picked)


def count_ratios(rows: list[dict]) -> dict[str, float | None]:
    return {
        "host_syncs_decode_max": _worst(rows, "host_syncs_decode"),
        "host_syncs_train_max": _worst(rows, "host_syncs_train"),
        "graph_breaks_decode_max": _worst(rows, "graph_breaks_decode"),
        "graph_breaks_train_max": _worst(rows, "graph_breaks_train"),
        "recompiles_decode_256_max": _worst(rows, "recompiles_decode"),
        "ops_decode_vs_native_rotary_max": _ops_over(
            rows, ("native", "sdpa"), lambda r: r["core"] == "sdpa" and r["part"] != "native"
        ),
        "ops_decode_vs_native_core_max": _ops_over(
            rows, ("native", "sdpa"), lambda r: r["part"] == "native" and r["core"] != "sdpa"
        ),
    }


def _time_ratio(num: float | None, den: float | None) -> float:
    return num / den if num is not None and den else math.inf


def gpu_ratios(rows: list[dict], contexts: list[dict]) -> dict[str, float]:
    by = {(r["part"], r["core"]): r for r in rows}
    native = by.get(("native", "sdpa"), {})
    out = {}
    for part in PARTS[1:]:
        if (part, "sdpa") in by:
            out[f"decode_compiled_vs_native[{part}]"] = _time_ratio(
                by[part, "sdpa"].get("decode_compiled_s"), native.get("decode_compiled_s")
            )
    ctx = {(r["core"], r["context"]): r.get("decode_s") for r in contexts}
    decoding = [c for c in dict.fromkeys(r["core"] for r in contexts) if c != "sdpa"]  # the rows' decoding cores
    for n in sorted({r["context"] for r in contexts}):
        label = f"{n // 1024}k" if n % 1024 == 0 else str(n)
        for core in decoding:
            out[f"{core}_decode_vs_sdpa_{label}"] = _time_ratio(ctx.get((core, n)), ctx.get(("sdpa", n)))
    timed = [r for r in rows if "sync_debug_error_ok" in r]
    out["sync_debug_error_decode_ok"] = float(bool(timed) and all(r["sync_debug_error_ok"] == 1 for r in timed))
    return out


SUITE_NOTES = (
    "Host syncs and aten ops are counted under symformer.value_checks('never'), which is what an accelerator gets "
    "by default (value checks read tensor values only on CPU tensors in eager mode), so the CPU counts are the "
    "syncs a GPU run makes; *_cpu_default columns are the CPU's default mode ('auto'), for information.",
    "host_syncs: .item()/int/float/bool(t), torch.equal, .tolist(); shape_syncs (not in the ratios): ops whose "
    "output size depends on values (nonzero, boolean-mask indexing), a sync on a GPU too.",
    "Graph breaks: of the first step of the compiled decoding run (its graphs less one, as explain counts), and "
    "torch._dynamo.explain of the training forward (with labels; the backward is traced from the forward graph). "
    "A row whose explain or compile raises records "
    "the error in `errors` and makes the ratio over rows inf.",
    "Recompiles: graphs dynamo compiles in decoding steps 2..T of torch.compile(model) after the prefill (dynamo's "
    "unique_graphs counter); dynamo gives up on a frame after 8 recompiles and runs it eagerly.",
)


COUNT_KEYS = tuple(f"{m}_{w}" for w in ("decode", "train") for m in ("host_syncs", "aten_ops", "graph_breaks")) + (
    "recompiles_decode",
)


def _rows_for(plan: GpuReadyPlan, ctx: BenchContext) -> tuple[list[dict], dict]:
    rows, details = [], {}
    for part, core in plan.rows:
        row: dict[str, Any] = {"part": part, "core": core}
        got = _attempt(row, COUNT_KEYS, lambda p=part, c=core: count_row(p, c, plan, ctx.device, ctx.seed), "model")
        row, detail = got if got is not None else (row, {})
        rows.append(row)
        details[f"{part}+{core}"] = detail
        if ctx.progress:
            shown = {k: v for k, v in row.items() if k not in ("part", "core", "errors")}
            errs = f" errors: {sorted(row['errors'])}" if row.get("errors") else ""
            print(f"[gpu_ready] {part} + {core}: {shown}{errs}", file=sys.stderr, flush=True)
    return rows, details


def measure(ctx: BenchContext, plan: GpuReadyPlan | None = None) -> BenchResult:
    """The suite, with `plan` (default: GpuReadyPlan.for_run(ctx.quick)); tests pass GpuReadyPlan.tiny()."""
    plan = plan or GpuReadyPlan.for_run(ctx.quick)
    rows, details = _rows_for(plan, ctx)
    ratios: dict[str, Any] = count_ratios(rows)
    notes = list(SUITE_NOTES)
    if plan.recompile_tokens != 256:
        notes.append(
            f"recompiles_decode_256_max here counts over {plan.recompile_tokens} decoded tokens after a "
            f"{plan.recompile_prefill}-token prefill, not 256 (--quick: each compiled step runs dynamo's guards over "
            "the whole model, slow on a CPU; the steps cross PLASH's block boundary at position 256)."
        )
    if ctx.device.startswith("cuda"):
        timed = [r for r in rows if r["core"] == "sdpa" or r["part"] == "native"]
        for row in timed:
            keys = ("sync_debug_error_ok", "decode_eager_s", "decode_compiled_s")
            _attempt(row, keys, lambda r=row: time_row(r, plan, ctx.device, ctx.seed), "gpu timing")
        contexts = context_rows(plan, ctx.device, ctx.seed)
        rows += contexts
        ratios.update(gpu_ratios(timed, contexts))
    config = {"plan": dataclasses.asdict(plan), "model": {**SPEC, "num_hidden_layers": plan.layers}}
    config["graph_break_reasons"] = details
    return BenchResult(rows=rows, ratios=ratios, config=config, notes=notes)


@suite("gpu_ready", "host syncs, aten ops, graph breaks and recompiles per part x core in an HF Llama")
def run(ctx: BenchContext) -> BenchResult:
    return measure(ctx)
