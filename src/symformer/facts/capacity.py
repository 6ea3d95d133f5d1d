"""Full constructions (Alg. 1, Thm 4.3.1) by method name, and the capacity binary search (App. A.1.1-A.1.2)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from symformer._io import save_atomic
from symformer._rng import resolve_seed
from symformer._validation import check_choice, check_float, check_int, fail
from symformer.data.files import torch_load
from symformer.facts import baselines, decoders, encoders, hebbian
from symformer.facts.decodability import Decodability, decodability, require_vertices
from symformer.facts.embeddings import FactSet, fold_whitening, validate_fact_set, whitening_matrix
from symformer.facts.mlp import FactMLP, count_params, fact_accuracy
from symformer.results import atomic_write_text

ENCODERS = ("bin", "bin-bias", "cd", "lagrangian", "two-hot", "two-hot-gated", "gd")
DECODERS = ("jl", "jl-sign", "gd")
# "gd-bilinear" / "ntk-relu1": the authors' GD and NTK protocols (facts.hebbian.official_param_count has their counts)
BASELINES = ("naive", "ntk", "ntk-mo", "gd-swiglu", "gd-relu", "gd-bilinear", "ntk-relu1")
METHODS = tuple(f"{e}+{d}" for e in ENCODERS for d in DECODERS) + BASELINES + hebbian.VARIANTS
NEEDS_RHO = ("jl", "jl-sign", "naive", "ntk-mo", "hebbian-als")  # what decodability(values) is computed once for
# which integer knob the capacity search moves (App. A.1.1): m for constructions, h for NTK / GD MLPs
KNOB = {
    **{m: "m" for m in METHODS if "+" in m},
    "ntk": "h",
    "ntk-mo": "h",
    "gd-swiglu": "h",
    "gd-relu": "h",
    **{m: "h" for m in ("gd-bilinear", "ntk-relu1", *hebbian.VARIANTS)},
    "naive": None,
}


class FactStorageError(ValueError):
    """A construction that does not store every fact says so instead of returning the MLP.

    Examples:
        >>> from symformer.facts import FactStorageError, build_fact_mlp, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> try:
        ...     build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=2)  # two codes cannot decode 32 values
        ... except FactStorageError as e:
        ...     print(str(e).split(" stores")[0], "stores", "all" if "100.00%" in str(e) else "some")
        method 'bin+jl' (m=2, h=None) stores some
        >>> build_fact_mlp(fs.keys, fs.values, fs.facts, "bin+jl", m=2, strict=False).accuracy < 1.0
        True
    """


@dataclass
class BuildOptions:
    """The knobs of `build_fact_mlp` beyond method, m and h (App. A.1.1-A.1.3 defaults).

    Args:
        h_mult (float): encoder width multiplier (h~ = ceil(mult |K|/d~)).
        encoder_hidden (int | None): gadget width h~ per code, overriding h_mult (>= ceil(|K|/d~)).
        decoder_steps (int): Adam steps of the GD decoder.
        encoder_steps (int): Adam steps of the GD encoder.
        train_epochs (int): epochs of the GD MLP baselines.
        train_lr (float): their learning rate.
        ntk_degree (int): the NTK baselines' degree.
        whiten (float): partial ZCA strength alpha in [0, 1] (0: none).
        train_checkpoint (str | None): GD MLPs: file where the training state is saved and resumed from.
        decoder_early_stop (bool): the GD decoder stops once every value decodes.
        codec_cache (str | None): folder keeping each GD decoder built (same values, m, seed, steps: same codes).
        official_gd_epochs (int): epochs of "gd-bilinear" (the authors' protocol).
        hebbian_rounds (int): alternating refits of "hebbian-als".

    Examples:
        >>> from symformer.facts import BuildOptions, build_fact_mlp, make_fact_set
        >>> fs = make_fact_set(32, 16, kappa=4.0, seed=0)  # anisotropic embeddings
        >>> opts = BuildOptions(whiten=0.5)  # built on partially whitened ones, folded back (fold_whitening)
        >>> build_fact_mlp(fs.keys, fs.values, fs.facts, "naive", options=opts).accuracy
        1.0
    """

    h_mult: float = 1.0  # encoder width multiplier (h~ = ceil(mult |K|/d~))
    encoder_hidden: int | None = None  # gadget width h~ per code, overriding h_mult (>= ceil(|K|/d~))
    decoder_steps: int = 1000  # GD decoder (App. A.1.3)
    encoder_steps: int = 1000  # GD encoder
    train_epochs: int = 20000  # GD MLPs
    train_lr: float = 1e-3
    ntk_degree: int = 2
    whiten: float = 0.0  # partial ZCA strength alpha (App. A.1.3)
    train_checkpoint: str | None = None  # GD MLPs: file where the training state is saved and resumed from
    decoder_early_stop: bool = True  # GD decoder stops once every value decodes (App. A.1.3: all steps)
    codec_cache: str | None = None  # folder keeping each GD decoder built (same values, m, seed, steps: same codes)
    official_gd_epochs: int = 10000  # gd-bilinear: their GDMLPConfig.num_epochs
    hebbian_rounds: int = 4  # hebbian-als: alternating refits (facts.hebbian)


def _decoder(
    values: torch.Tensor, kind: str, m: int, seed: int, info: Decodability | None, opts: BuildOptions
) -> decoders.Decoder:
    if kind == "gd":
        return _gd_decoder_cached(values, m, seed, opts)
    return decoders.jl_decoder(values, m, "sign" if kind == "jl-sign" else "gaussian", seed=seed, info=info)


def _gd_decoder_cached(values: torch.Tensor, m: int, seed: int, opts: BuildOptions) -> decoders.Decoder:
    """The GD decoder, kept in opts.codec_cache when given. A GD decoder depends on the values, m, seed, steps
    and early stop alone (seeded stream, one thread), so Bin+GD and GD+GD evaluations at the same m and the
    GD+GD width search (m fixed at m^) read the same codes that a rebuild would give, without the 1000 steps
    (F = 4096: minutes each). The file is named by a hash of all of them."""

    def make() -> decoders.Decoder:
        return decoders.gd_decoder(values, m, steps=opts.decoder_steps, seed=seed, early_stop=opts.decoder_early_stop)

    if opts.codec_cache is None:
        return make()
    h = hashlib.sha256(json.dumps([m, seed, opts.decoder_steps, opts.decoder_early_stop]).encode())
    h.update(str(values.dtype).encode() + values.detach().cpu().contiguous().numpy().tobytes())
    path = Path(opts.codec_cache) / f"gd_decoder_{h.hexdigest()[:20]}.pt"
    if path.exists():
        state = torch_load(path, "a cached GD decoder")
        if (
            isinstance(state, dict)
            and isinstance(state.get("C"), torch.Tensor)
            and isinstance(state.get("D"), torch.Tensor)
        ):
            return decoders.Decoder(state["C"], state["D"], "gd")
    dec = make()
    save_atomic({"C": dec.C, "D": dec.D}, path)
    return dec


def _encoder(keys: torch.Tensor, codes: torch.Tensor, kind: str, seed: int, opts: BuildOptions) -> FactMLP:
    n, d = keys.shape
    if kind == "gd":
        m = codes.shape[1]
        return baselines.gd_encoder(
            keys, codes, h=max(1, math.ceil(m * n / d * opts.h_mult)), steps=opts.encoder_steps, seed=seed
        )
    if kind == "two-hot":
        return encoders.two_hot_encoder(keys, codes)
    if kind == "two-hot-gated":
        return encoders.two_hot_gated_encoder(keys, codes)
    bias = kind in ("bin-bias", "lagrangian")
    base = encoders.gadget_hidden(n, d, bias) * (2 if kind == "lagrangian" else 1)
    # Alg. 3: d h~ >= |K| gadget units per code, else the gadget system is underdetermined and cannot store f
    ht = (
        max(base, math.ceil(opts.h_mult * base))
        if opts.encoder_hidden is None
        else check_int("options.encoder_hidden", opts.encoder_hidden, base)
    )
    if kind == "cd":
        return encoders.central_difference_encoder(keys, codes, ht, seed=seed)
    if kind == "lagrangian":
        return encoders.relu_lagrangian_encoder(keys, codes, ht, seed=seed)
    return encoders.gated_encoder(keys, codes, ht, bias=bias, seed=seed)


#: the width search of build_fact_mlp(m=None) (and `symformer facts build` without --m): first width tried, and the
#: widest; App. A.1.2's search doubles from M_START until every fact is stored, then bisects
M_START, M_MAX = 32, 4096


def build_fact_mlp(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    method: str = "bin+jl",
    m: int | None = None,
    h: int | None = None,
    seed: int | None = 0,
    strict: bool = True,
    info: Decodability | None = None,
    options: BuildOptions | None = None,
    max_m: int = M_MAX,
) -> FactMLP:
    """Build an MLP storing f (eq. 1) with `method` (see METHODS). Returns the FactMLP with `.accuracy`,
    `.method` and `.n_facts`; with strict=True a method that does not store every fact raises FactStorageError.

    For a construction (method "<encoder>+<decoder>"), m=None searches for a small decoder width m <= max_m that
    stores every fact, as `symformer facts build` without --m does (App. A.1.2's search; see `_smallest_width`).
    NTK and GD MLPs need h.

    Args:
        keys (n_keys, d): key embeddings.
        values (n_values, d): value embeddings.
        facts (n_keys,): int64, the value index of each key.
        method (str): one of METHODS: "<encoder>+<decoder>" or a baseline ("naive", "ntk", "gd-swiglu", ...).
        m (int | None): the decoder width of a construction (None: searched).
        h (int | None): the hidden width of NTK and GD MLPs.
        seed (int | None): every draw of the build (None: one integer from torch's global generator).
        strict (bool): raise FactStorageError unless every fact is stored.
        info (Decodability | None): `decodability(values)` if already computed.
        options (BuildOptions | None): the remaining knobs.
        max_m (int): the widest m the search tries.

    Returns:
        mlp (FactMLP): float64, with `.accuracy`, `.method` and `.n_facts`; outputs (n, d) for keys (n, d).

    Raises:
        FactStorageError: strict and not every fact is stored.

    Examples:
        >>> import torch
        >>> from symformer.facts import build_fact_mlp, make_fact_set
        >>> fs = make_fact_set(32, 16, seed=0)
        >>> mlp = build_fact_mlp(fs.keys, fs.values, fs.facts)  # bin+jl at the smallest width m that stores all
        >>> mlp.method, mlp.accuracy, mlp.down.m < 32
        ('bin+jl', 1.0, True)
        >>> torch.equal((mlp(fs.keys) @ fs.values.T).argmax(1), fs.facts)  # key i decodes to value f(i)
        True
    """
    validate_fact_set(keys, values, facts)
    check_choice("method", method, METHODS)
    seed = resolve_seed(seed)  # None: one integer from torch's global generator for every part (and the codec cache)
    opts = options or BuildOptions()
    check_float("whiten", opts.whiten, 0.0, 1.0)
    knob = KNOB[method]
    if knob == "m" and m is None:
        return _smallest_width(keys, values, facts, method, seed, strict, info, opts, max_m)
    if knob == "h" and h is None:
        fail("h", h, f"a hidden size h >= 1 for method {method!r}")
    Kw, Vw, Tk, Tv = keys.double(), values.double(), None, None
    if opts.whiten > 0:
        Tk, Tv = whitening_matrix(Kw, opts.whiten), whitening_matrix(Vw, opts.whiten)
        Kw, Vw, info = Kw @ Tk, Vw @ Tv, None
    if KNOB[method] != "m":
        mlp = _baseline(Kw, Vw, facts, method, h, seed, info, opts)
    else:
        mlp = _construction(Kw, Vw, facts, method, m, seed, info, opts)
    if Tk is not None:
        fold_whitening(mlp, Tk, Tv)
    mlp.method, mlp.n_facts = method, int(facts.numel())
    mlp.accuracy = fact_accuracy(mlp, keys, values, facts)
    if strict and mlp.accuracy < 1.0:
        raise FactStorageError(
            f"method {method!r} (m={m}, h={h}) stores {mlp.accuracy:.2%} of the "
            f"{len(facts)} facts, expected all of them: increase m or h"
        )
    return mlp


def _construction(keys, values, facts, method: str, m: int, seed: int, info, opts: BuildOptions) -> FactMLP:
    """The encoder-decoder construction "<encoder>+<decoder>" at decoder width m: the decoder's codes C for the values,
    then an encoder mapping each key to the code of its value."""
    check_int("m", m, 1)
    enc_kind, dec_kind = method.split("+")
    if dec_kind != "gd":
        info = require_vertices(values, info)
    dec = _decoder(values, dec_kind, m, seed, info, opts)
    mlp = _encoder(keys, dec.C[facts], enc_kind, seed, opts)
    with torch.no_grad():
        mlp.down.D.copy_(dec.D.to(mlp.dtype))
    return mlp


def _smallest_width(
    keys: torch.Tensor,
    values: torch.Tensor,
    facts: torch.Tensor,
    method: str,
    seed: int,
    strict: bool,
    info: Decodability | None,
    opts: BuildOptions,
    max_m: int,
) -> FactMLP:
    """The MLP of a construction at the decoder width m <= max_m that App. A.1.2's search finds (`capacity_search`:
    m = 32, 64, ... up to the first width storing every fact, then bisection below it), every width built with
    `seed`, so the result is build_fact_mlp(..., m=result.down.m, seed=seed). The search takes storing to be
    monotone in m; with a random (JL) decoder it is not quite, so m - 1 does not store every fact but a smaller
    width may. No width storing every fact: FactStorageError, or with strict=False the MLP at m = max_m."""
    check_int("max_m", max_m, 1)
    if opts.whiten == 0 and not method.endswith("+gd"):
        info = require_vertices(values.double(), info)  # once for every width, and up front
    stores: dict[int, FactMLP] = {}  # the smallest width storing every fact so far (each new one is smaller)
    widest: dict[int, FactMLP] = {}
    errors: dict[int, Exception] = {}

    def evaluate(size: int, _seed_index: int) -> tuple[float, int]:
        try:
            mlp = build_fact_mlp(keys, values, facts, method, m=size, seed=seed, strict=False, info=info, options=opts)
        except (torch.linalg.LinAlgError, ValueError) as e:  # a gadget system not solvable at this width
            errors[size] = e
            return 0.0, 0
        if mlp.accuracy >= 1.0:
            stores.clear()
            stores[size] = mlp
        if size == max_m:
            widest[size] = mlp
        return mlp.accuracy, count_params(mlp)

    size, seen = capacity_search(evaluate, 1, 1, min(M_START, max_m), max_m)
    if size is not None:
        return stores[size]
    if len(errors) == len(seen) and isinstance(errors[max_m], ValueError):
        raise errors[max_m]  # no width could be built (keys not of the method's form, ...): that is the error
    if strict or max_m not in widest:
        why = f"m = {max_m}: {errors[max_m]}" if max_m in errors else f"m = {max_m} stores {seen[max_m][0]:.2%}"
        raise FactStorageError(
            f"m: got None (search for the smallest width m <= {max_m}), expected a width at "
            f"which method {method!r} stores all {len(facts)} facts; none does ({why}): "
            f"raise max_m or pick another method"
        ) from errors.get(max_m)
    return widest[max_m]


def _baseline(K, V, facts, method, h, seed, info, opts) -> FactMLP:
    if method == "naive":
        return baselines.naive_mlp(K, V, facts, info=info)
    if method in hebbian.VARIANTS:
        return hebbian.hebbian_mlp(K, V, facts, h, method, rounds=opts.hebbian_rounds, seed=seed, info=info)
    if method in ("ntk", "ntk-mo", "ntk-relu1"):
        deg, act = (1, "relu") if method == "ntk-relu1" else (opts.ntk_degree, "silu")  # theirs: degree 1, ReLU
        return baselines.ntk_mlp(K, V, facts, h, deg, method == "ntk-mo", act, seed=seed, info=info)
    if method == "gd-bilinear":  # their protocol: bilinear, no biases, all epochs down to a 1e-7 loss
        e = opts.official_gd_epochs
        ck = opts.train_checkpoint
        return baselines.train_mlp(K, V, facts, h, "linear", e, seed=seed, checkpoint=ck, bias=False, loss_cutoff=1e-7)
    return baselines.train_mlp(
        K,
        V,
        facts,
        h,
        activation="silu" if method == "gd-swiglu" else "relu",
        max_epochs=opts.train_epochs,
        lr=opts.train_lr,
        seed=seed,
        checkpoint=opts.train_checkpoint,
    )


# ---- capacity --------------------------------------------------------------------------------------


@dataclass
class CapacityResult:
    """What `method_capacity` finds for one method.

    Attributes:
        method (str): the method.
        size (int | None): smallest knob value (m or h) storing every fact of every fact set (None: none found).
        params (int | None): the parameter count there (the smaller one for GD encoders' width search).
        n_facts (int): F.
        n_values (int): |V|.
        facts_per_param (float | None): F / params.
        bits_per_param (float | None): F log2 |V| / params.
        info_bits (float): the information-theoretic content F log2 |V| (Prop. 2.1.1).
        evaluations (dict): knob -> (min accuracy over the fact sets, params).

    Examples:
        >>> from symformer.facts import make_fact_set, method_capacity
        >>> res = method_capacity("bin+jl", [make_fact_set(32, 16, seed=s) for s in range(2)], lo=4, hi=8)
        >>> res.evaluations[res.size][0], res.info_bits, res.facts_per_param == 32 / res.params
        (1.0, 160.0, True)
    """

    method: str
    size: int | None  # smallest knob value storing every fact (None: not found <= max)
    params: int | None
    n_facts: int
    n_values: int
    facts_per_param: float | None
    bits_per_param: float | None  # F log2 |V| / params
    info_bits: float  # the information-theoretic content F log2 |V| (Prop. 2.1.1)
    evaluations: dict = field(default_factory=dict)  # knob -> (min accuracy over seeds, params)


def capacity_search(
    evaluate: Callable[[int, int], tuple[float, int]], n_seeds: int, lo: int, hi: int, max_size: int | None = None
) -> tuple[int | None, dict]:
    """Smallest integer knob in [lo, max_size] whose minimum accuracy over seeds is 1.0 (App. A.1.2),
    assuming success is monotone in the knob. `evaluate(size, seed) -> (accuracy, params)`.

    Args:
        evaluate (Callable[[int, int], tuple[float, int]]): (size, seed index) -> (accuracy, parameter count).
        n_seeds (int): seed indices 0..n_seeds-1 per size (a size stops at its first seed below 1.0).
        lo (int): the smallest size considered.
        hi (int): the first size tried; doubled while it fails.
        max_size (int | None): the largest size tried (None: 16 hi).

    Returns:
        size (int | None): the smallest size storing every fact (None: none up to max_size).
        seen (dict): size -> (min accuracy over the seeds tried, params), for every size evaluated.

    Examples:
        >>> from symformer.facts import capacity_search
        >>> def evaluate(size, seed):  # stores every fact from size 37 on
        ...     return (1.0 if size >= 37 else 0.5), 10 * size
        >>> size, seen = capacity_search(evaluate, n_seeds=2, lo=1, hi=8)
        >>> size, sorted(seen)  # doubling 8, 16, 32, 64, then bisection in (32, 64]
        (37, [8, 16, 32, 36, 37, 38, 40, 48, 64])
    """
    check_int("lo", lo, 1)
    check_int("hi", hi, lo)
    max_size = max_size or 16 * hi
    seen: dict[int, tuple[float, int]] = {}

    def ok(size: int) -> bool:
        if size not in seen:
            worst, params = 1.0, 0
            for s in range(n_seeds):
                acc, params = evaluate(size, s)
                worst = min(worst, acc)
                if worst < 1.0:
                    break
            seen[size] = (worst, params)
        return seen[size][0] >= 1.0

    while not ok(hi):
        if hi >= max_size:
            return None, seen
        lo, hi = hi + 1, min(max_size, 2 * hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi, seen


class _Remembered:
    """A capacity search's evaluations kept in `work_dir` (one JSON file per search, written atomically after
    each evaluation) with a training checkpoint per GD evaluation: a search killed midway (a full-protocol GD
    search at F = 4096 trains for hours) resumes where it stopped, with the same results. The file is named by
    the method and a hash of the fact sets and options, so another search in the same folder (other facts, quick
    against full options) never reads this one's evaluations."""

    def __init__(self, work_dir: str | os.PathLike, method: str, fact_sets: Sequence[FactSet], opts: BuildOptions):
        h = hashlib.sha256(method.encode())
        h.update(
            json.dumps(
                {k: v for k, v in vars(opts).items() if k not in ("train_checkpoint", "codec_cache")},
                sort_keys=True,
                default=str,
            ).encode()
        )
        for fs in fact_sets:
            for t in (fs.keys, fs.values, fs.facts):
                h.update(str(t.dtype).encode() + t.detach().cpu().contiguous().numpy().tobytes())
        self.dir, self.name = Path(work_dir), f"{method}_{h.hexdigest()[:16]}"
        self.path = self.dir / f"{self.name}_evaluations.json"
        self.seen = self._read() if self.path.exists() else {}

    @staticmethod
    def check(work_dir) -> None:
        """Up front, before any fact set is hashed or any model trained: a folder path, or one that can be made."""
        if not isinstance(work_dir, (str, os.PathLike)):
            fail("work_dir", type(work_dir).__name__, "a folder path (str or os.PathLike) or None", TypeError)
        if Path(work_dir).exists() and not Path(work_dir).is_dir():
            fail("work_dir", str(work_dir), "a folder (this path is a file)")
        Path(work_dir).mkdir(parents=True, exist_ok=True)

    def _read(self) -> dict:
        try:
            seen = json.loads(self.path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            seen = None
        if not isinstance(seen, dict) or not all(isinstance(v, list) and len(v) == 2 for v in seen.values()):
            fail(
                "work_dir",
                str(self.path),
                "a remembered-evaluations file of {key: [accuracy, parameters]} (delete it to search afresh)",
            )
        return seen

    def __call__(self, key: str, build: Callable[[str], tuple[float, int]]) -> tuple[float, int]:
        if key not in self.seen:
            ckpt = self.dir / f"{self.name}_{key}.pt"
            self.seen[key] = list(build(str(ckpt)))
            atomic_write_text(self.path, json.dumps(self.seen))
            ckpt.unlink(missing_ok=True)  # remembered: the training's checkpoint is no longer needed
        acc, params = self.seen[key]
        return acc, params


def _search_setup(method, fact_sets, options, infos, work_dir) -> tuple:
    """(options, decodabilities, memo) of a capacity search, its inputs checked."""
    check_choice("method", method, METHODS)
    if work_dir is not None:
        _Remembered.check(work_dir)
    for fs in fact_sets:
        validate_fact_set(fs.keys, fs.values, fs.facts)
    opts = options or BuildOptions()
    if work_dir is not None and opts.codec_cache is None and method.endswith("+gd"):
        opts = replace(opts, codec_cache=str(work_dir))  # the search's GD decoders, kept until the record is written
    if infos is None and opts.whiten == 0 and method.split("+")[-1] in NEEDS_RHO:
        infos = [decodability(fs.values) for fs in fact_sets]
    memo = None if work_dir is None else _Remembered(work_dir, method, fact_sets, opts)
    return opts, infos, memo


def _remembering(memo):
    """remembered(key, build, options): build(options), or its remembered result (with a training checkpoint)."""

    def remembered(key: str, build: Callable[[BuildOptions], tuple[float, int]], o: BuildOptions):
        if memo is None:
            return build(o)
        return memo(key, lambda ckpt: build(replace(o, train_checkpoint=ckpt) if o.train_checkpoint is None else o))

    return remembered


def _gd_width_step(method, fact_sets, m_hat: int, opts, remembered, params, seen) -> tuple:
    """Two-step search for GD encoders (App. A.1.3): fix m = m^, then the smallest width multiplier in (0, 2]
    (steps of 1/8) that still stores every fact; (params, seen) updated where it needs fewer parameters."""

    def evaluate_width(k: int, s: int) -> tuple[float, int]:
        fs = fact_sets[s]

        def build(o: BuildOptions) -> tuple[float, int]:
            mlp = build_fact_mlp(fs.keys, fs.values, fs.facts, method, m=m_hat, seed=s, strict=False, options=o)
            return mlp.accuracy, count_params(mlp)

        return remembered(f"m={m_hat}_h_mult={k}_8_seed={s}", build, replace(opts, h_mult=k / 8))

    k, seen_w = capacity_search(evaluate_width, len(fact_sets), 1, 16, 16)
    if k is not None and seen_w[k][1] < params:
        params = seen_w[k][1]
        seen = {**seen, **{f"h_mult={kk / 8}": v for kk, v in seen_w.items()}}
    return params, seen


def method_capacity(
    method: str,
    fact_sets: Sequence[FactSet],
    lo: int,
    hi: int,
    max_size: int | None = None,
    options: BuildOptions | None = None,
    infos: Sequence[Decodability] | None = None,
    work_dir: str | os.PathLike | None = None,
) -> CapacityResult:
    """Capacity of one method over fact sets (one per seed): smallest knob, its parameter count, facts and
    bits per parameter. With `work_dir` every evaluation is remembered there and GD trainings checkpoint there,
    so a call after a kill continues the search (same results: each build seeds itself).

    Args:
        method (str): one of METHODS.
        fact_sets (Sequence[FactSet]): one fact set per seed (the same F and |V|); a size counts when it stores
            every fact of every set.
        lo (int): the smallest knob value considered.
        hi (int): the first knob value tried (`capacity_search`).
        max_size (int | None): the largest knob value tried.
        options (BuildOptions | None): build options.
        infos (Sequence[Decodability] | None): each set's `decodability(values)`, if already computed.
        work_dir (str | os.PathLike | None): folder remembering the evaluations (None: none).

    Returns:
        result (CapacityResult): the smallest knob value and its parameter count, facts and bits per parameter.

    Examples:
        >>> from symformer.facts import build_fact_mlp, count_params, make_fact_set, method_capacity
        >>> sets = [make_fact_set(32, 16, seed=s) for s in range(2)]
        >>> res = method_capacity("bin+jl", sets, lo=4, hi=8)
        >>> mlp = build_fact_mlp(sets[0].keys, sets[0].values, sets[0].facts, "bin+jl", m=res.size, seed=0)
        >>> mlp.accuracy, count_params(mlp) == res.params
        (1.0, True)
    """
    opts, infos, memo = _search_setup(method, fact_sets, options, infos, work_dir)
    remembered = _remembering(memo)

    def evaluate(size: int, s: int) -> tuple[float, int]:
        fs = fact_sets[s]
        kw = {KNOB[method]: size} if KNOB[method] else {}

        def build(o: BuildOptions) -> tuple[float, int]:
            try:
                mlp = build_fact_mlp(
                    fs.keys,
                    fs.values,
                    fs.facts,
                    method,
                    seed=s,
                    strict=False,
                    info=infos[s] if infos else None,
                    options=o,
                    **kw,
                )
            except (torch.linalg.LinAlgError, ValueError):  # a gadget system that is not solvable
                return 0.0, 0
            return mlp.accuracy, count_params(mlp)

        return remembered(f"size={size}_seed={s}", build, opts)

    size, seen = capacity_search(evaluate, len(fact_sets), lo, hi, max_size)
    params = seen[size][1] if size is not None else None
    if size is not None and method.startswith("gd+"):
        params, seen = _gd_width_step(method, fact_sets, size, opts, remembered, params, seen)
    F, nv = fact_sets[0].keys.shape[0], fact_sets[0].values.shape[0]
    bits = F * math.log2(max(nv, 2))
    return CapacityResult(
        method, size, params, F, nv, F / params if params else None, bits / params if params else None, bits, seen
    )
