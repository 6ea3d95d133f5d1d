"""Fact editing on the book -> author LM (fact-storing-mlps.txt Sec. 5.4, App. A.3.4): MLP swapping against
ROME, MEMIT and AlphaEdit adapted as the paper says: residual updates at the fact MLP's output (inside the
MoE) on the final prompt token, one templated prompt per fact (no random prefixes), no KL term for ROME.
The closed-form weight updates are `symformer.facts.editors`; the edited weight is the fact MLP's
down-projection W (out = W k + b, k the hidden activation)."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from symformer._rng import resolve_seed, seeded_generator
from symformer._validation import check_choice, check_float, fail
from symformer.facts import editors
from symformer.facts.lm.books import TEMPLATES, BooksTask
from symformer.facts.lm.edit_eval import LastTokenCache
from symformer.facts.lm.model import FactRecallTransformer
from symformer.facts.lm.recall import model_device, module_on

METHODS = ("swap", "rome", "memit", "alphaedit")
# App. A.3.4 grids
GRIDS = {
    "memit": {
        "train_steps": [10, 25, 100],
        "lr": [0.005, 0.05, 0.5],
        "lam": [1.5e4, 1.5e3, 1.5e2, 1.0],
        "clip_norm": [0.5, 0.75, 1.0],
    },
    "alphaedit": {
        "train_steps": [10, 25, 100],
        "lr": [0.005, 0.05, 0.5],
        "clip_norm": [0.5, 0.75, None],
        "tol": [1e-2, 1.0, 10.0],
    },
    "rome": {
        "train_steps": [10, 25, 100],
        "lr": [0.005, 0.05, 0.5],
        "wd": [1.5e-3, 1.5e-4, 0.0],
        "early_stopping_loss": [5e-2, None],
    },
}
ALPHAEDIT_L2 = 10.0  # AlphaEdit's L2 hparam (not in the paper's grid; ours)


@dataclass
class EditSplit:
    altered: torch.Tensor  # book indices whose author changes
    preserved: torch.Tensor  # book indices that must keep their author
    new_facts: torch.Tensor  # the full map after the edit


PRESERVED_RATIO = 4.0  # App. A.3.4: (6554, 1638), (3277, 819), (1311, 327) of 2^14 facts: preserved = 4 x altered


def make_split(
    task: BooksTask, fraction: float, seed: int | None = 0, preserved_ratio: float = PRESERVED_RATIO
) -> EditSplit:
    """Alter `fraction` of the facts: their authors are permuted among themselves with no fixed point
    (so every author still has one book). The preserved set holds `preserved_ratio` times as many facts
    (App. A.3.4: 40% / 10%, 20% / 5%, 8% / 2% of the 16,384 facts); facts in neither set keep their authors
    but are not scored."""
    check_float("fraction", fraction, 0.0, 1.0, low_open=True)
    check_float("preserved_ratio", preserved_ratio, 0.0)
    n = len(task.books)
    g = seeded_generator(20_000 + resolve_seed(seed))
    order = torch.randperm(n, generator=g)
    k = max(2, round(fraction * n))
    p = round(preserved_ratio * fraction * n)
    if k + p > n:
        fail("preserved_ratio", preserved_ratio, f"at most {(n - k) / (fraction * n):.3g} at fraction {fraction}")
    altered, preserved = order[:k].sort().values, order[k : k + p].sort().values
    new = task.facts.clone()
    new[altered] = task.facts[altered.roll(1)]  # a cyclic shift: every altered book changes author
    return EditSplit(altered, preserved, new)


def prompts(task: BooksTask, books: torch.Tensor, template: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    tok, mask, _ = task.sequences(books, torch.full_like(books, template))
    return tok[:, :-1], mask[:, :-1]  # on the CPU, where the task draws them


@torch.no_grad()
def mlp_io(model: FactRecallTransformer, tok: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden activation k, fact MLP output) at the last position: ROME's key and value of the layer."""
    x = F.embedding(tok, model.embedding_table())
    h = model.attend(x, mask, last_only=True)[:, -1]
    z = model.mlp_norm(h).to(model.fact.mlp.dtype)
    return model.fact.mlp.hidden(z).double(), model.fact.mlp(z).double()


@torch.no_grad()
def key_moment(model: FactRecallTransformer, task: BooksTask, books: torch.Tensor) -> torch.Tensor:
    """C = E[k k^T] of the fact MLP's hidden activations over every position of the preserved facts'
    sequences (the 'mom2' statistic; ROME/MEMIT take it over Wikipedia text)."""
    b = books.repeat_interleave(len(TEMPLATES))
    t = torch.arange(len(TEMPLATES)).repeat(len(books))
    tok, mask, _ = (x.to(model_device(model)) for x in task.sequences(b, t))
    x = F.embedding(tok, model.embedding_table())
    z = model.mlp_norm(model.attend(x, mask, last_only=False))[mask]
    k = model.fact.mlp.hidden(z.to(model.fact.mlp.dtype)).double()
    return k.T @ k / k.shape[0]


def target_values(
    model: FactRecallTransformer,
    tok,
    mask,
    targets,
    train_steps: int,
    lr: float,
    clip_norm: float | None = None,
    wd: float = 0.0,
    early_stopping_loss: float | None = None,
) -> torch.Tensor:
    """v* = MLP output + delta for each fact (ROME 'compute_v' / MEMIT 'compute_z'); see `target_trajectory`."""
    return target_trajectory(model, tok, mask, targets, [train_steps], lr, clip_norm, wd, early_stopping_loss)[
        train_steps
    ]


def target_trajectory(
    model: FactRecallTransformer,
    tok,
    mask,
    targets,
    steps: list[int],
    lr: float,
    clip_norm: float | None = None,
    wd: float = 0.0,
    early_stopping_loss: float | None = None,
) -> dict[int, torch.Tensor]:
    """{s: v* with train_steps = s} for every s in `steps`, from one optimisation run. Per fact, as ROME's
    compute_v and MEMIT's compute_z run one request at a time: loss_i = CE of the new author at the last token
    + wd |delta_i| / |out_i|^2; Adam on delta_i (its state is per element, so summing the independent per-fact
    losses runs the per-fact optimisations side by side); a fact stops for good once loss_i <
    early_stopping_loss; the last of `train_steps` iterations only evaluates the loss (their loop breaks
    before stepping), so train_steps = s makes s - 1 updates; after each update delta_i is clipped to
    clip_norm |out_i|. Shorter runs are prefixes of longer ones, hence one run serves every s."""
    if not steps or min(steps) < 1:
        fail("steps", steps, "a non-empty list of train_steps >= 1")
    _, out = mlp_io(model, tok, mask)
    base = out.norm(dim=1).float()
    delta = torch.zeros(out.shape, device=out.device, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)
    active = torch.ones(len(out), dtype=torch.bool, device=out.device)
    snaps: dict[int, torch.Tensor] = {}
    for it in range(max(steps)):
        if it + 1 in steps:  # train_steps = it + 1 ends here, before this iteration's update
            snaps[it + 1] = out + delta.detach().double()
        if it + 1 == max(steps):
            break
        logits = model(tok, mask, last_only=True, mlp_out_delta=delta)
        loss = F.cross_entropy(logits, targets, reduction="none") + wd * delta.norm(dim=1) / base**2
        if early_stopping_loss is not None:
            active &= loss.detach() >= early_stopping_loss
        if not bool(active.any()):
            break
        frozen = delta.detach()[~active].clone()
        opt.zero_grad()
        loss[active].sum().backward()
        opt.step()
        with torch.no_grad():
            delta[~active] = frozen  # Adam's momentum would still move a stopped fact
            if clip_norm is not None:
                n = delta.norm(dim=1, keepdim=True)
                delta.mul_(torch.clamp(clip_norm * base[:, None] / n.clamp_min(1e-12), max=1.0))
    final = out + delta.detach().double()
    return {s: snaps.get(s, final) for s in steps}


def apply_editor(
    mlp, method: str, keys: torch.Tensor, values: torch.Tensor, C: torch.Tensor, hp: dict, pre: dict | None = None
):
    """A copy of `mlp` whose down-projection W carries the method's update (values: full outputs v*). `pre`, a
    dict kept across calls with the same keys and C, holds what does not depend on the values (C^-1 k for
    ROME, the null-space projector per tolerance for AlphaEdit). The float64 closed forms run on the CPU whatever
    the MLP's device (LAPACK: the gelsd driver facts.editors uses exists only there, and the eigenvalue threshold
    of AlphaEdit's null space sees the CPU's eigenvalues); the copy stays on the MLP's device."""
    check_choice("method", method, ("rome", "memit", "alphaedit"))
    pre = {} if pre is None else pre
    new = copy.deepcopy(mlp)
    keys, values, C = keys.cpu(), values.cpu(), C.cpu()
    W = new.down.weight.detach().double().cpu()
    b = new.down.bias.detach().double().cpu() if new.down.bias is not None else 0.0
    V = (values - b).T
    if method == "rome":  # sequential rank-one edits, each on the current W (targets from the original model)
        if "rome_u" not in pre:
            pre["rome_u"] = torch.linalg.solve(C.double(), keys.double().T).T
        for i in range(keys.shape[0]):
            W = W + editors.rome_update(W, C, keys[i], V[:, i], c_inv_key=pre["rome_u"][i])
    elif method == "memit":
        W = W + editors.memit_update(W, C, keys.T, V, hp["lam"])
    else:
        if ("P", hp["tol"]) not in pre:
            pre["P", hp["tol"]] = editors.null_space_projector(C, hp["tol"])
        W = W + editors.alphaedit_update(W, pre["P", hp["tol"]], keys.T, V, ALPHAEDIT_L2)
    with torch.no_grad():
        new.down.weight.copy_(W.to(new.down.weight.dtype))
    return new


def harmonic(xs: list[float]) -> float:
    return 0.0 if min(xs) <= 0 else len(xs) / sum(1 / x for x in xs)


def edit_caches(model: FactRecallTransformer, task: BooksTask, split: EditSplit) -> dict[str, LastTokenCache]:
    """The scored prompts of `edit_scores`, run once through `model` (only the fact MLP varies afterwards)."""
    nt = len(TEMPLATES)
    alt, pre = split.altered, split.preserved
    return {
        "efficacy": LastTokenCache(model, task, alt, torch.zeros_like(alt)),
        "paraphrase": LastTokenCache(model, task, alt.repeat_interleave(nt - 1), torch.arange(1, nt).repeat(len(alt))),
        "specificity": LastTokenCache(model, task, pre.repeat_interleave(nt), torch.arange(nt).repeat(len(pre))),
    }


def edit_scores(
    model: FactRecallTransformer,
    task: BooksTask,
    split: EditSplit,
    mlp=None,
    caches: dict[str, LastTokenCache] | None = None,
) -> dict:
    """Efficacy: altered facts under the edit template; paraphrase: altered facts under the other 15
    templates; specificity: preserved facts under every template; score: their harmonic mean (App. A.3.4;
    the paper's text swaps the names efficacy/specificity, which leaves the score unchanged). `mlp` (default:
    the model's own) is scored in the fact slot; `caches` from `edit_caches` spare re-running the model."""
    caches = caches or edit_caches(model, task, split)
    mlp = model.fact.mlp if mlp is None else mlp
    r = {k: c.accuracy(mlp, split.new_facts) for k, c in caches.items()}
    return {**r, "score": harmonic([r["efficacy"], r["paraphrase"], r["specificity"]])}


def grid_configs(method: str, quick: bool) -> list[dict]:
    grid = GRIDS[method]
    if quick:  # the middle steps and the largest lr, every method-specific value
        grid = {**grid, "train_steps": [25], "lr": [0.5]}
    keys = list(grid)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(grid[k] for k in keys))]


def _zgroup(hp: dict) -> tuple:
    """(lr, clip_norm, wd, early_stopping_loss): the target optimisation a configuration needs."""
    return (hp["lr"], hp.get("clip_norm"), hp.get("wd", 0.0), hp.get("early_stopping_loss"))


def run_editors(
    model: FactRecallTransformer,
    task: BooksTask,
    split: EditSplit,
    new_mlp,
    quick: bool = True,
    methods: tuple[str, ...] = METHODS,
    configs: dict[str, list[dict]] | None = None,
) -> dict:
    """Every method's best configuration over its grid (by score) with its efficacy/paraphrase/specificity.
    `new_mlp` is the MLP trained on the full edited fact set (MLP swapping); `configs` overrides the grids."""
    out: dict = {}
    dev = model_device(model)
    new_mlp = module_on(new_mlp, dev)  # trained on the CPU, scored on the model's device
    caches = edit_caches(model, task, split)
    if "swap" in methods:
        out["swap"] = {"config": {}, **edit_scores(model, task, split, new_mlp, caches), "n_configs": 1}
    tok, mask = (x.to(dev) for x in prompts(task, split.altered, 0))
    targets = task.author_token(split.new_facts[split.altered]).to(dev)
    keys, _ = mlp_io(model, tok, mask)
    keys, C = keys.cpu(), key_moment(model, task, split.preserved).cpu()  # for the closed forms (apply_editor)
    grids = {m: (configs or {}).get(m) or grid_configs(m, quick) for m in methods if m != "swap"}
    # one target optimisation per (lr, clip, wd, early stop) serves every train_steps (prefixes of one run)
    runs: dict[tuple, set[int]] = {}
    for hp in itertools.chain(*grids.values()):
        runs.setdefault(_zgroup(hp), set()).add(hp["train_steps"])
    zs: dict[tuple, dict[int, torch.Tensor]] = {}
    pre: dict = {}
    for method, grid in grids.items():
        best, n = None, 0
        for hp in grid:
            g = _zgroup(hp)
            if g not in zs:
                zs[g] = target_trajectory(model, tok, mask, targets, sorted(runs[g]), *g)
            try:
                mlp = apply_editor(model.fact.mlp, method, keys, zs[g][hp["train_steps"]], C, hp, pre)
            except torch.linalg.LinAlgError:  # a singular C for ROME / MEMIT at lam = 0: this config fails
                continue
            n += 1
            res = edit_scores(model, task, split, mlp, caches)
            if best is None or res["score"] > best["score"]:
                best = {"config": hp, **res}
        out[method] = {**(best or {"config": None, "score": 0.0}), "n_configs": n}
    return out
