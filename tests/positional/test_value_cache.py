"""The value-keyed caches of RoPE / STRING / ESPR (positional/_cache.ValueCache): a table cached during
evaluation is rebuilt after the parameter changes, whether in place or by an optimizer step, and the
cache never enters a state_dict."""

from __future__ import annotations

import copy

import pytest
import torch

from symformer.positional import ESPR, STRING, RoPE
from symformer.positional._cache import ValueCache


def _qk(n: int, dh: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 2, n, dh, generator=g, dtype=torch.float64) for _ in range(2))


def _train_step(mod: torch.nn.Module, pos: torch.Tensor) -> None:
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    q, k = _qk(pos.shape[0], mod.head_dim, 1)
    a, b = mod(q, k, pos)
    (a @ b.mT).square().sum().backward()
    opt.step()


def _fresh_copy(mod: torch.nn.Module) -> torch.nn.Module:
    """A deep copy with every cache of every submodule dropped (STRING's RoPE part has its own)."""
    new = copy.deepcopy(mod)
    for sub in new.modules():
        for key in [k for k in sub.__dict__ if k.endswith("_cache")]:
            del sub.__dict__[key]
    return new


@pytest.mark.parametrize(
    "make",
    [
        lambda: RoPE(8, 2, pairing="half", mode="mixed", learnable=True),
        lambda: RoPE(8, 1, pairing="interleaved", learnable=True),
        lambda: STRING(8, 2, init_scale=0.1),
        lambda: ESPR(8, 2, commuting_init=False),
    ],
)
def test_cached_tables_rebuilt_after_optimizer_step_and_in_place_change(make):
    mod = make().double()
    pos = torch.tensor([[0.0, 1.0], [2.0, 0.5], [1.0, 3.0]], dtype=torch.float64)[:, : mod.coord_dim]
    q, k = _qk(3, 8)
    with torch.no_grad():
        before = mod(q, k, pos)
        again = mod(q, k, pos.clone())
    assert all(torch.equal(a, b) for a, b in zip(before, again))
    _train_step(mod, pos)  # the optimizer changes the parameters in place
    with torch.no_grad():
        after = mod(q, k, pos)
        ref = _fresh_copy(mod)(q, k, pos)  # same parameters, no cache
    assert not torch.allclose(after[0], before[0])
    assert all((a - b).abs().max() <= 1e-14 for a, b in zip(after, ref))
    with torch.no_grad():
        next(iter(mod.parameters())).mul_(1.5)  # in-place change outside any optimizer
        changed = mod(q, k, pos)
        ref = _fresh_copy(mod)(q, k, pos)
    assert all((a - b).abs().max() <= 1e-14 for a, b in zip(changed, ref))
    assert not any(key.endswith("_cache") for key in mod.state_dict())


def test_cached_espr_path_keeps_gradcheck():
    mod = ESPR(4, 2, commuting_init=False).double()
    pos = torch.tensor([[0.0, 1.0], [2.0, 0.5], [0.0, 1.0]], dtype=torch.float64)
    with torch.no_grad():
        mod(*_qk(3, 4), pos)  # fills the cache
    q, k = (t.requires_grad_() for t in _qk(3, 4, 2))
    assert torch.autograd.gradcheck(
        lambda a, b, g: mod.__class__.forward(_with_gen(mod, g), a, b, pos),
        (q, k, mod.gen_param.detach().clone().requires_grad_()),
    )


def _with_gen(mod: ESPR, g: torch.Tensor) -> ESPR:
    """mod with gen_param replaced by g (a tensor that needs grad), its cache kept."""
    new = copy.copy(mod)
    new._parameters = dict(mod._parameters, gen_param=g)
    return new


def test_value_cache_is_bounded_and_most_recent_first():
    cache = ValueCache(2)
    a, b, c = (torch.tensor([float(i)]) for i in range(3))
    for t in (a, b, c):
        cache.store("x", (t,), t * 10)
    assert len(cache) == 2 and cache.lookup("x", (a,)) is None
    assert torch.equal(cache.lookup("x", (b.clone(),)), b * 10)
