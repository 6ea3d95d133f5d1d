"""The GD MLP baselines (App. A.1.3) trained many at a time: independent MLPs of several widths, on several fact
sets, stacked into one batched model.

Why: the GD baselines' capacity search trains one small MLP per (width, fact set) for 10k-20k full-batch epochs,
and at the grid's small points (d = 32, F = 256, h ~ 10) an epoch is mostly per-op overhead (Python and dispatch
around ~10 MFLOP of work). Stacked, the models share that overhead. The protocol is `baselines.train_mlp`'s, model
by model: the same initialisation (each model is built as train_mlp builds it, then copied in, zero-padded to the
widest), the same loss, Adam (elementwise, so stacking changes nothing but the rounding of the matmuls), the same
cosine schedule and the same stop per model: a model that stops is frozen where train_mlp would have stopped it
(padded units have zero weights and zero gradients, so Adam leaves them at zero). tests/facts check that the
batched models equal train_mlp's to rounding."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence

import torch

from symformer._io import save_atomic
from symformer._rng import seed_torch
from symformer._validation import check_choice, check_int, fail
from symformer.data.files import DataFileError, torch_load
from symformer.facts.capacity import BuildOptions, CapacityResult, _Remembered
from symformer.facts.embeddings import FactSet, validate_fact_set
from symformer.facts.mlp import FactMLP, activate, count_params, fact_accuracy, silu_prime
from symformer.results import atomic_write_text

#: epochs between the (host-syncing) checks whether every model has stopped
STOP_CHECK_EVERY = 100


def _stack(models: list[FactMLP], H: int, bias: bool, dtype: torch.dtype) -> list[torch.Tensor]:
    """[gate W, up W, down W, (gate b, up b, out b)] of the models, stacked and zero-padded to H hidden units."""
    B, d = len(models), models[0].d
    Wg, Wu, Wd = torch.zeros(B, H, d, dtype=dtype), torch.zeros(B, H, d, dtype=dtype), torch.zeros(B, d, H, dtype=dtype)
    bg, bu, bd = torch.zeros(B, H, dtype=dtype), torch.zeros(B, H, dtype=dtype), torch.zeros(B, d, dtype=dtype)
    with torch.no_grad():
        for i, m in enumerate(models):
            h = m.h
            Wg[i, :h], Wu[i, :h], Wd[i, :, :h] = m.gate.weight, m.up.weight, m.down.weight
            if bias:
                bg[i, :h], bu[i, :h], bd[i] = m.gate.bias, m.up.bias, m.down.bias
    ps = [Wg, Wu, Wd, bg, bu, bd] if bias else [Wg, Wu, Wd]
    return ps


def train_mlps(
    fact_sets: Sequence[FactSet],
    widths: Sequence[int],
    activation: str = "silu",
    max_epochs: int = 20000,
    lr: float = 1e-3,
    final_lr: float = 1e-6,
    seeds: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float32,
    bias: bool = True,
    loss_cutoff: float | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 500,
) -> list[FactMLP]:
    """`baselines.train_mlp` (gated: activation "silu" or "linear") for every pair (fact_sets[i], widths[i]),
    trained together. Model i is train_mlp(keys, values, facts, widths[i], activation, max_epochs, lr, final_lr,
    seeds[i], dtype, bias=bias, loss_cutoff=loss_cutoff) on fact_sets[i], to the rounding of its matmuls.

    Args:
        fact_sets (Sequence[FactSet]): one per model (the same F, |V| and d).
        widths (Sequence[int]): hidden width h per model.
        activation (str): "silu" (ours, SwiGLU) or "linear" (the authors' bilinear MLP).
        max_epochs (int): epochs (cosine lr -> final_lr over them).
        lr (float): Adam's learning rate.
        final_lr (float): the cosine schedule's last rate.
        seeds (Sequence[int] | None): each model's initialisation seed (None: 0 for all).
        dtype (torch.dtype): the training dtype.
        bias (bool): biases on gate, up and output.
        loss_cutoff (float | None): None: a model stops at the first epoch that starts with every fact stored;
            else it stops after the epoch whose loss (before its step) is at or below the cutoff.
        checkpoint (str | os.PathLike | None): a file where the training state is saved atomically every
            `checkpoint_every` epochs; a later call with the same arguments continues from it, to the same bits
            (a round at d = 64, F = 1024 trains for about an hour on one core).
        checkpoint_every (int): epochs between saves.

    Returns:
        mlps (list[FactMLP]): the trained models with `.accuracy` (fact_accuracy on their fact set).

    Example:
        >>> from symformer.facts import make_fact_set
        >>> fs = make_fact_set(16, 8, seed=0)
        >>> [m.h for m in train_mlps([fs, fs], [2, 6], max_epochs=20, lr=1e-2)]
        [2, 6]
    """
    check_choice("activation", activation, ("silu", "linear"))
    check_int("max_epochs", max_epochs, 1)
    check_int("checkpoint_every", checkpoint_every, 1)
    if len(fact_sets) != len(widths) or not widths:
        fail("widths", f"{len(widths)} widths", f"one per fact set ({len(fact_sets)}), at least one")
    seeds = [0] * len(widths) if seeds is None else list(seeds)
    for fs in fact_sets:
        validate_fact_set(fs.keys, fs.values, fs.facts)
    if len({(fs.keys.shape, fs.values.shape) for fs in fact_sets}) != 1:
        fail("fact_sets", "fact sets of different shapes", "one F, |V| and d for all")
    models = []
    for h, s in zip(widths, seeds):
        check_int("widths", h, 1)
        seed_torch(s)  # as train_mlp: its seed, then the model's draws
        models.append(FactMLP(fact_sets[0].keys.shape[1], h, activation, True, bias=bias, out_bias=bias, dtype=dtype))
    ps = _stack(models, max(widths), bias, dtype)
    K = torch.stack([fs.keys.double().to(dtype) for fs in fact_sets])  # build_fact_mlp trains on keys.double()
    V = torch.stack([fs.values.double().to(dtype) for fs in fact_sets])
    T = torch.stack([fs.facts for fs in fact_sets])
    settings = dict(widths=list(widths), seeds=seeds, activation=activation, max_epochs=max_epochs, lr=lr)
    settings |= dict(final_lr=final_lr, dtype=str(dtype), bias=bias, loss_cutoff=loss_cutoff)
    saving = None if checkpoint is None else (checkpoint, checkpoint_every, _tag(settings, K, V, T))
    ps = _fit(ps, K, V, T, activation, max_epochs, lr, final_lr, loss_cutoff, saving)
    for i, m in enumerate(models):
        _unstack(m, ps, i)
        fs = fact_sets[i]
        m.accuracy = fact_accuracy(m, fs.keys, fs.values, fs.facts)
    return models


def _grads(ps, K, V, T, activation: str) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """(gradients of each model's mean cross-entropy on g(K) V^T, its loss (B,), its stored facts (B,)) of the
    stacked gated MLPs, by hand: one logit tensor, worked on in place (autograd keeps four of them)."""
    Wg, Wu, Wd = ps[:3]
    g, u = torch.bmm(K, Wg.transpose(1, 2)), torch.bmm(K, Wu.transpose(1, 2))
    if len(ps) == 6:
        g, u = g + ps[3][:, None], u + ps[4][:, None]
    a = activate(activation, g)
    hdn = a * u
    out = torch.bmm(hdn, Wd.transpose(1, 2))
    if len(ps) == 6:
        out = out + ps[5][:, None]
    logits = torch.bmm(out, V.transpose(1, 2))
    n = logits.shape[1]
    target = logits.gather(2, T[..., None])[..., 0]
    top, arg = logits.max(2)
    stored = (arg == T).sum(1)
    p = logits.sub_(top[..., None]).exp_()
    z = p.sum(2)
    loss = (top + z.log() - target).mean(1)  # log-sum-exp - target logit
    p.div_(z[..., None]).scatter_add_(2, T[..., None], torch.full_like(target, -1.0)[..., None]).div_(n)
    G_out = torch.bmm(p, V)  # d loss / d out
    G_h = torch.bmm(G_out, Wd)
    G_u = G_h * a
    G_g = G_h * u if activation == "linear" else G_h * u * silu_prime(g)
    grads = [torch.bmm(G_g.transpose(1, 2), K), torch.bmm(G_u.transpose(1, 2), K)]
    grads.append(torch.bmm(G_out.transpose(1, 2), hdn))
    if len(ps) == 6:
        grads += [G_g.sum(1), G_u.sum(1), G_out.sum(1)]
    return grads, loss, stored


def _adam(ps, grads, m, v, step: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
    """torch.optim.Adam's step (its single-tensor path, no weight decay), op for op."""
    b1, b2 = betas
    bc1, bc2 = 1 - b1**step, 1 - b2**step
    for p, g, m_, v_ in zip(ps, grads, m, v):
        m_.lerp_(g, 1 - b1)
        v_.mul_(b2).addcmul_(g, g, value=1 - b2)
        p.addcdiv_(m_, (v_.sqrt() / bc2**0.5).add_(eps), value=-lr / bc1)


def _fit(ps, K, V, T, activation, max_epochs, lr, final_lr, loss_cutoff, saving=None) -> list[torch.Tensor]:
    """Adam + cosine over the stacked parameters, each model frozen where train_mlp stops it; models that have
    stopped leave the batch every STOP_CHECK_EVERY epochs. saving: (file, every) to checkpoint to and resume
    from. Returns the final parameters in the input order."""
    n = T.shape[1]
    st = {"epoch": 0, "final": [p.clone() for p in ps], "idx": torch.arange(T.shape[0]), "ps": ps}
    st |= {"m": [torch.zeros_like(p) for p in ps], "v": [torch.zeros_like(p) for p in ps]}
    st["active"] = torch.ones(T.shape[0], dtype=torch.bool)  # per row still in the batch
    st["tag"] = None if saving is None else saving[2]
    start = 0 if saving is None else _load_fit(saving[0], st)
    final, idx, ps, m, v, active = (st[k] for k in ("final", "idx", "ps", "m", "v", "active"))
    K, V, T = K[idx], V[idx], T[idx]
    lrs = _cosine_lrs(lr, final_lr, max_epochs)
    for epoch in range(start, max_epochs):
        if epoch % STOP_CHECK_EVERY == 0 and epoch:
            keep = active.nonzero()[:, 0]
            if len(keep) < len(idx):
                for f, p in zip(final, ps):
                    f[idx] = p
                if not len(keep):
                    return final
                ps, m, v = ([t[keep] for t in ts] for ts in (ps, m, v))
                K, V, T, idx, active = K[keep], V[keep], T[keep], idx[keep], active[keep]
        if saving is not None and epoch > start and epoch % saving[1] == 0:
            state = {"epoch": epoch, "final": final, "idx": idx, "ps": ps, "m": m, "v": v, "active": active}
            save_atomic({**state, "tag": saving[2]}, saving[0])
        grads, loss, stored = _grads(ps, K, V, T, activation)
        if loss_cutoff is None:  # ours: stop before the step of the first epoch starting with all stored
            active &= stored < n
        old = [p.clone() for p in ps]
        _adam(ps, grads, m, v, epoch + 1, lrs[epoch])
        for p, o in zip(ps, old):
            torch.where(active.view(-1, *[1] * (p.ndim - 1)), p, o, out=p)
        if loss_cutoff is not None:  # theirs: stop after the epoch whose loss was at or below the cutoff
            active &= loss > loss_cutoff
    for f, p in zip(final, ps):
        f[idx] = p
    return final


def _load_fit(path: str | os.PathLike, st: dict) -> int:
    """The epoch to start from: 0, or the one saved in `path` after loading its state into `st` (a file _fit
    wrote, for models of the same shapes; loaded with weights_only=True; anything else is a one-line
    DataFileError naming it)."""
    if not os.path.exists(path):
        return 0
    what = "a batched GD training checkpoint"
    got = torch_load(path, what)
    shapes = [p.shape for p in st["final"]]
    ok = isinstance(got, dict) and set(got) == set(st) and [f.shape for f in got.get("final", [])] == shapes
    if not ok or got["ps"][0].shape[1:] != shapes[0][1:] or got["idx"].shape != got["active"].shape:
        raise DataFileError(f"{path} is not {what} of these {len(st['idx'])} models (delete it to train afresh)")
    if got["tag"] != st["tag"]:
        raise DataFileError(f"{path} is {what} of other fact sets or settings (delete it to train afresh)")
    st.update(got)
    return int(got["epoch"])


def _tag(settings: dict, *tensors: torch.Tensor) -> str:
    """What a checkpoint was trained on and with: the settings and the fact sets' bytes, hashed."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for t in tensors:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def _cosine_lrs(lr: float, final_lr: float, epochs: int) -> list[float]:
    """The learning rate of each epoch, from the scheduler train_mlp steps (CosineAnnealingLR's recursion)."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs, eta_min=final_lr)
    out = []
    for _ in range(epochs):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def _unstack(m: FactMLP, ps: list[torch.Tensor], i: int) -> None:
    h = m.h
    with torch.no_grad():
        m.gate.weight.copy_(ps[0][i, :h])
        m.up.weight.copy_(ps[1][i, :h])
        m.down.weight.copy_(ps[2][i, :, :h])
        if len(ps) == 6:
            m.gate.bias.copy_(ps[3][i, :h])
            m.up.bias.copy_(ps[4][i, :h])
            m.down.bias.copy_(ps[5][i])


#: each protocol's train_mlps arguments from BuildOptions: ours (SwiGLU, biases, early stop) and the authors'
#: (bilinear, no biases, every epoch down to a 1e-7 loss), as facts.capacity's _baseline calls train_mlp
def _protocol(method: str, opts: BuildOptions) -> dict:
    if method == "gd-bilinear":
        return dict(activation="linear", max_epochs=opts.official_gd_epochs, bias=False, loss_cutoff=1e-7)
    return dict(activation="silu", max_epochs=opts.train_epochs, lr=opts.train_lr, bias=True)


def _digest(new: list[tuple[int, int]]) -> str:
    """A round's checkpoint name: its (width, fact set) pairs, hashed."""
    return hashlib.sha256(json.dumps(new).encode()).hexdigest()[:12]


def _next_widths(seen: dict, guess: int, max_size: int, per_round: int) -> list[int]:
    """The widths of the next round: around the guess first, then up by doubling until one stores, then spread
    over the gap between the widest failing width below the smallest storing one and it; [] when they are
    adjacent (the threshold is verified: a width storing, the one below not)."""
    if not seen:
        return sorted({min(max_size, max(1, round(guess * r))) for r in (0.5, 0.71, 1.0, 1.41, 2.0)})
    ok = [w for w, (acc, _) in seen.items() if acc >= 1.0]
    if not ok:
        top = max(seen)
        return [] if top >= max_size else [min(max_size, 2 * top)]
    hi = min(ok)
    lo = max([w for w in seen if w < hi], default=0)
    if hi - lo <= 1:
        return []
    step = (hi - lo) / (min(per_round, hi - lo - 1) + 1)
    return sorted({lo + max(1, round(j * step)) for j in range(1, min(per_round, hi - lo - 1) + 1)} - {hi})


def gd_capacity(
    method: str,
    fact_sets: Sequence[FactSet],
    guess: int,
    max_size: int,
    options: BuildOptions | None = None,
    work_dir: str | os.PathLike | None = None,
    per_round: int = 4,
) -> CapacityResult:
    """`method_capacity` for the GD baselines ("gd-swiglu", "gd-bilinear"), each round's widths trained together
    (`train_mlps`, all fact sets): the smallest width h <= max_size at which every fact set stores every fact,
    with the width below it failing (both evaluated). Rounds: widths guess x {1/2, 0.71, 1, 1.41, 2}, then
    doubling while none stores, then up to per_round widths spread over the remaining gap. Model s trains on
    fact_sets[s] with seed s, as method_capacity's evaluations do, so an evaluation is the one method_capacity
    would make (to rounding); unlike capacity_search every fact set is trained at each width tried.

    Args:
        method (str): "gd-swiglu" or "gd-bilinear".
        fact_sets (Sequence[FactSet]): one per seed (the same F, |V| and d).
        guess (int): the width the first round is centred on.
        max_size (int): the widest h tried.
        options (BuildOptions | None): train_epochs / train_lr (ours), official_gd_epochs (theirs).
        work_dir (str | os.PathLike | None): folder remembering each round's evaluations, and the training
            checkpoint of the round under way (None: none).
        per_round (int): widths per round after the first.

    Returns:
        result (CapacityResult): as method_capacity's; evaluations: h -> (min accuracy over the sets, params).

    Example:
        >>> from symformer.facts import BuildOptions, make_fact_set
        >>> sets = [make_fact_set(16, 8, seed=s) for s in range(2)]
        >>> r = gd_capacity("gd-swiglu", sets, 4, 64, BuildOptions(train_epochs=200, train_lr=1e-2))
        >>> r.evaluations[r.size][0], r.evaluations[r.size - 1][0] < 1.0
        (1.0, True)
    """
    check_choice("method", method, ("gd-swiglu", "gd-bilinear"))
    check_int("guess", guess, 1)
    check_int("max_size", max_size, 1)
    check_int("per_round", per_round, 1)
    opts = options or BuildOptions()
    memo = None if work_dir is None else _Remembered(work_dir, f"{method}-batched", fact_sets, opts)
    evals = {} if memo is None else memo.seen  # "size={h}_seed={s}" -> [accuracy, params], as method_capacity's
    seen: dict[int, tuple[float, int]] = {}
    while widths := _next_widths(seen, guess, max_size, per_round):
        new = [(w, s) for w in widths for s in range(len(fact_sets)) if f"size={w}_seed={s}" not in evals]
        if new:
            sets, hs, seeds = [fact_sets[s] for _, s in new], [w for w, _ in new], [s for _, s in new]
            ck = None if memo is None else memo.dir / f"{memo.name}_round_{_digest(new)}.pt"
            for (w, s), mlp in zip(new, train_mlps(sets, hs, seeds=seeds, checkpoint=ck, **_protocol(method, opts))):
                evals[f"size={w}_seed={s}"] = [mlp.accuracy, count_params(mlp)]
            if memo is not None:
                atomic_write_text(memo.path, json.dumps(evals))
                ck.unlink(missing_ok=True)  # remembered: the round's checkpoint is no longer needed
        for w in widths:
            runs = [evals[f"size={w}_seed={s}"] for s in range(len(fact_sets))]
            seen[w] = (min(a for a, _ in runs), runs[0][1])
    ok = [w for w, (acc, _) in seen.items() if acc >= 1.0]
    size = min(ok) if ok else None
    params = seen[size][1] if size is not None else None
    F, nv = fact_sets[0].keys.shape[0], fact_sets[0].values.shape[0]
    bits = F * math.log2(max(nv, 2))
    return CapacityResult(
        method,
        size,
        params,
        F,
        nv,
        F / params if params else None,
        bits / params if params else None,
        bits,
        dict(sorted(seen.items())),
    )
