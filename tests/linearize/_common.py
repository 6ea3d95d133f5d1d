"""What the linearize tests share: tiny cores' options, a random token split, a run killed at a validation point."""

import pytest
import torch

from symformer.data.base import Split, TensorData
from symformer.linearize import recipe

#: the cores' options of the tiny test models (fast, and large enough to learn)
OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4},
    "plash": {"M": 4, "D_k": 8, "causal_block": 4, "mixer_heads": 2},
}


def random_split(n=24, block=12, vocab=40, seed=0) -> Split:
    """n random windows of `block` tokens (train), their first 4 as val and test."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, block + 1), generator=g)
    part = TensorData(ids[:, :-1], ids[:, 1:])
    return Split(part, TensorData(part.x[:4], part.y[:4]), TensorData(part.x[:4], part.y[:4]), {"vocab_size": vocab})


def kill_at(monkeypatch, call: int) -> None:
    """Make the `call`-th call of recipe.evaluate raise KeyboardInterrupt (a killed run); the others run."""
    real, calls = recipe.evaluate, []

    def evaluate(*a, **k):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(recipe, "evaluate", evaluate)


def resumes_to_the_uninterrupted_result(teacher, data, cfg, folder, monkeypatch, call: int):
    """Run `cfg` once uninterrupted (folder/ref) and once killed at the `call`-th validation point, then resumed
    (folder/run); assert equal weights and curves, and return (reference, resumed) results."""
    ref = recipe.linearize(teacher, data, cfg, out=folder / "ref")
    with monkeypatch.context() as m:
        kill_at(m, call)
        with pytest.raises(KeyboardInterrupt):
            recipe.linearize(teacher, data, cfg, out=folder / "run")
    got = recipe.linearize(teacher, data, cfg, out=folder / "run", resume=True)
    a, b = ref.model.state_dict(), got.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert got.history == ref.history
    return ref, got
