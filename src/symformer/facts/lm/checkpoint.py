"""Save / load a fact-recall model (SSFR or book -> author LM) with its fact set, and edit it by MLP
swapping (fact-storing-mlps.txt Sec. 5.4): build an MLP for the edited fact set, swap it in, verify.

A checkpoint is a dict of tensors and plain values (torch.load(weights_only=True) reads it; nothing is
unpickled). The task is rebuilt from its seed, so key and value names come back as they were."""

from __future__ import annotations

from pathlib import Path

import torch

from symformer._io import save_atomic
from symformer._validation import fail
from symformer.data.files import torch_load
from symformer.facts.capacity import KNOB, BuildOptions, build_fact_mlp
from symformer.facts.lm.books import TEMPLATES, make_books
from symformer.facts.lm.books_lm import lm_eval
from symformer.facts.lm.model import FactRecallConfig, FactRecallTransformer
from symformer.facts.lm.recall import value_logits
from symformer.facts.lm.ssfr import make_ssfr
from symformer.facts.mlp import FactMLP, FactorisedDown
from symformer.facts.mse import train_mse_mlp
from symformer.facts.slot import swap_fact_mlp

MARKER = "symformer-fact-model"


def mlp_spec(mlp: FactMLP) -> dict:
    """The FactMLP constructor arguments that rebuild `mlp`'s shape (its weights come from the state dict)."""
    down = mlp.down
    fac = isinstance(down, FactorisedDown)
    return {
        "d": mlp.d,
        "h": mlp.h,
        "activation": mlp.activation,
        "gated": mlp.gated,
        "bias": mlp.up.bias is not None,
        "m": down.m if fac else None,
        "dense_codes": bool(fac and down.dense),
        "code_bias": bool(fac and down.code_bias is not None),
        "out_bias": (down.out_bias is not None) if fac else (down.bias is not None),
        "dtype": str(mlp.dtype).replace("torch.", ""),
    }


def save_fact_model(
    path: str | Path,
    model: FactRecallTransformer,
    task_kind: str,
    task_args: dict,
    facts: torch.Tensor,
    mlp_build: dict,
) -> None:
    """`task_args`: make_books / make_ssfr arguments; `mlp_build`: how to build an MLP for another fact set
    ({"method": "gd-mse", "h": ..., "steps": ...} or {"method": <build_fact_mlp method>, "size": ...})."""
    if task_kind not in ("books", "ssfr"):
        fail("task_kind", task_kind, "'books' or 'ssfr'")
    save_atomic(
        {
            MARKER: 1,
            "task_kind": task_kind,
            "task_args": dict(task_args),
            "facts": facts.clone(),
            "model_config": model.cfg.to_dict(),
            "embeddings": model.emb.clone(),
            "trainable_rows": model.trainable_rows.clone(),
            "mlp_spec": mlp_spec(model.fact.mlp),
            "mlp_build": dict(mlp_build),
            "state_dict": model.state_dict(),
        },
        path,
    )


def load_fact_model(path: str | Path):
    """(model, task, checkpoint dict) from a checkpoint written by `save_fact_model`."""
    ck = torch_load(path, "a symformer fact-model checkpoint")
    if not isinstance(ck, dict) or ck.get(MARKER) != 1:
        fail("--model", str(path), "a checkpoint written by symformer.facts.lm.checkpoint.save_fact_model")
    task = make_task(ck["task_kind"], ck["task_args"]).with_facts(ck["facts"])
    model = FactRecallTransformer(FactRecallConfig(**ck["model_config"]), ck["embeddings"], ck["trainable_rows"])
    spec = dict(ck["mlp_spec"])
    spec["dtype"] = getattr(torch, spec["dtype"])
    swap_fact_mlp(model, FactMLP(**spec))
    model.load_state_dict(ck["state_dict"])
    model.eval()
    return model, task, ck


def make_task(kind: str, args: dict):
    return make_books(**args) if kind == "books" else make_ssfr(**args)


def names(task) -> tuple[list[str], list[str]]:
    """Key and value names: books/authors for the LM, k<i>/v<j> for SSFR."""
    if hasattr(task, "books"):
        return list(task.books), list(task.authors)
    return [f"k{i}" for i in range(task.n_keys)], [f"v{j}" for j in range(task.n_values)]


def parse_edits(pairs: list, task) -> dict[int, int]:
    """[[key, value], ...] by name or index -> {key index: value index}; unknown keys/values and keys given
    two values are one ValueError listing them all."""
    keys, vals = names(task)
    kidx, vidx = {k: i for i, k in enumerate(keys)}, {v: j for j, v in enumerate(vals)}

    def look(x, table, n):
        if isinstance(x, int) and not isinstance(x, bool):
            return x if 0 <= x < n else None
        return table.get(x) if isinstance(x, str) else None

    out: dict[int, int] = {}
    unknown, twice = [], []
    for k, v in pairs:
        ki, vi = look(k, kidx, len(keys)), look(v, vidx, len(vals))
        if ki is None:
            unknown.append(f"key {k!r}")
        if vi is None:
            unknown.append(f"value {v!r}")
        if ki is None or vi is None:
            continue
        if ki in out and out[ki] != vi:
            twice.append(f"{k!r} -> {vals[out[ki]]!r} and {vals[vi]!r}")
        out[ki] = vi
    if unknown or twice:
        parts = ([f"unknown {', '.join(unknown)}"] if unknown else []) + (
            [f"keys with two values: {'; '.join(twice)}"] if twice else []
        )
        fail("--facts", "; ".join(parts), "known key and value names (or indices), one value per key")
    return out


def _mlp_embeddings(model: FactRecallTransformer, task) -> tuple[torch.Tensor, torch.Tensor]:
    E = model.emb.double()
    if hasattr(task, "books"):
        K = E[task.n_words : task.n_words + len(task.books)]
        V = E[task.author_slice]
    else:
        K, V = E[: task.n_keys], E[task.value_slice]
    return K / K.norm(dim=1, keepdim=True), V


def build_mlp_for(
    model: FactRecallTransformer, task, facts: torch.Tensor, build: dict, seed: int | None = 0
) -> FactMLP:
    """An MLP storing `facts` on the model's (tied) embeddings, built as the checkpoint says."""
    K, V = _mlp_embeddings(model, task)
    if build["method"] == "gd-mse":
        return train_mse_mlp(K.float(), V.float(), facts, build["h"], steps=build.get("steps", 3000), seed=seed)
    opts = BuildOptions(**build.get("options", {}))
    return build_fact_mlp(
        K, V, facts, build["method"], seed=seed, strict=False, options=opts, **{KNOB[build["method"]]: build["size"]}
    )


@torch.no_grad()
def recall_accuracy(model: FactRecallTransformer, task, keys: torch.Tensor) -> float:
    """Accuracy of the model on `keys` under every template / junk pair of the task."""
    if len(keys) == 0:
        return 1.0
    if hasattr(task, "books"):
        nt = len(TEMPLATES)
        return lm_eval(model, task, keys.repeat_interleave(nt), torch.arange(nt).repeat(len(keys)))["fact_accuracy"]
    nj = len(task.prefixes)
    k, p = keys.repeat_interleave(nj), torch.arange(nj).repeat(len(keys))
    tok, mask, tgt = task.batch(k, p)
    return float((value_logits(model, task, tok, mask).argmax(-1) == tgt).double().mean())


def edit_by_swap(model: FactRecallTransformer, task, ck: dict, edits: dict[int, int], seed: int | None = 0) -> dict:
    """MLP swapping (Sec. 5.4): the full fact set with `edits` applied is stored in a new MLP that replaces
    the model's. Returns a report; the model keeps the new MLP."""
    new_facts = task.facts.clone()
    for k, v in edits.items():
        new_facts[k] = v
    changed = (new_facts != task.facts).nonzero().flatten()
    kept = (new_facts == task.facts).nonzero().flatten()
    new_task = task.with_facts(new_facts)
    mlp = build_mlp_for(model, task, new_facts, ck["mlp_build"], seed)
    swap_fact_mlp(model, mlp)
    kn, vn = names(task)
    return {
        "requested": len(edits),
        "changed": [
            {"key": kn[int(i)], "old": vn[int(task.facts[i])], "new": vn[int(new_facts[i])]} for i in changed[:50]
        ],
        "n_changed": len(changed),
        "mlp_stores": mlp.accuracy,
        "edited_accuracy": recall_accuracy(model, new_task, torch.tensor(sorted(edits), dtype=torch.long)),
        "kept_accuracy": recall_accuracy(model, new_task, kept[:512]),
        "new_facts": new_facts,
    }
