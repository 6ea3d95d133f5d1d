"""Property-based checks (hypothesis): config resolution, and the `positions` argument of every registered
positional part. Any input is either accepted and handled correctly, or rejected with a ValueError/TypeError
that names the argument; no other exception ever escapes."""

import math

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import symformer.positional  # noqa: F401  (registers the parts)
from symformer.registry import POSITIONAL
from symformer.train.presets import PRESETS, SECTIONS, TASKS, resolve, valid_keys
from symformer.train.trainer import TrainConfig

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- config resolution
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=5), c, max_size=3)),
    max_leaves=6,
)


def _keys(task):
    known = valid_keys(task)
    return st.one_of(
        st.sampled_from(["task", "seed"]),
        st.sampled_from(SECTIONS),
        *[st.sampled_from([f"{s}.{k}" for k in known[s]]) for s in SECTIONS if known[s]],
        st.text(alphabet="abcdefgh._", min_size=1, max_size=10),
    )


@st.composite
def set_items(draw):
    task = draw(st.sampled_from(TASKS))
    items = draw(st.lists(st.tuples(_keys(task), json_values), max_size=4))
    return [f"{k}={_dump(v)}" for k, v in items]


def _dump(v):
    import json

    return json.dumps(v) if not isinstance(v, str) else v


@FAST
@given(
    preset=st.one_of(st.none(), st.sampled_from(sorted(PRESETS))),
    config=st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["task", "data", "model", "train", "seed", "bogus"]), json_values, max_size=3),
    ),
    sets=set_items(),
)
def test_resolve_accepts_or_names_the_problem(preset, config, sets):
    try:
        spec = resolve(preset, config, sets)
    except (ValueError, TypeError) as e:
        msg = str(e)
        assert "\n" not in msg and any(w in msg for w in ("config", "--set", "task", "seed", "--preset")), msg
        return
    # accepted: a known task, known keys only, and the last --set of each key wins
    assert spec["task"] in TASKS
    known = valid_keys(spec["task"], spec.get("model", {}).get("arch"))
    for sec in SECTIONS:
        assert set(spec.get(sec, {})) <= set(known[sec])
    # accepted train settings either build a TrainConfig or are rejected naming the field
    try:
        cfg = TrainConfig(**spec.get("train", {}))
    except (ValueError, TypeError) as e:
        assert any(k in str(e) for k in spec.get("train", {})), str(e)
    else:
        assert isinstance(cfg.epochs, int) and math.isfinite(cfg.lr) and cfg.lr > 0


@FAST
@given(
    st.lists(
        st.tuples(st.sampled_from(["train.lr", "train.epochs", "model.d_model"]), st.integers(1, 9)),
        min_size=1,
        max_size=5,
    )
)
def test_last_set_wins(pairs):
    spec = resolve("digits-vit", {"train": {"lr": 0.5}}, [f"{k}={v}" for k, v in pairs])
    for key in {k for k, _ in pairs}:
        sec, name = key.split(".")
        assert spec[sec][name] == [v for k, v in pairs if k == key][-1]


# ---------------------------------------------------------------- positions of every positional part
PARTS = [n for n in POSITIONAL.names() if n != "none"]
DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.bool,
    torch.complex64,
]


@st.composite
def positions_case(draw):
    c = draw(st.integers(1, 3))
    n = draw(st.integers(1, 5))
    ndim = draw(st.sampled_from([1, 2, 2, 3, 3, 4]))
    last = draw(st.sampled_from([c, c, c, c + 1]))
    rows = draw(st.sampled_from([n, n, n, n + 1]))
    shape = {1: (rows,), 2: (rows, last), 3: (2, rows, last), 4: (1, 2, rows, last)}[ndim]
    dtype = draw(st.sampled_from(DTYPES))
    integral = draw(st.booleans())
    vals = torch.tensor(
        draw(
            st.lists(
                st.integers(-3, 40) if integral else st.floats(-50, 50),
                min_size=math.prod(shape),
                max_size=math.prod(shape),
            )
        ),
        dtype=torch.float64,
    )
    pos = vals.reshape(shape)
    special = draw(st.sampled_from([None, None, math.nan, math.inf, -math.inf]))
    if special is not None and pos.numel():
        pos.view(-1)[draw(st.integers(0, pos.numel() - 1))] = special
    pos = pos.to(dtype) if dtype.is_floating_point or dtype.is_complex else pos.nan_to_num(0, 0, 0).to(dtype)
    return c, n, pos


def _part(name, c):
    kind = getattr(POSITIONAL.get(name), "kind", None)
    kw = dict(head_dim=8, coord_dim=c, n_heads=2, d_model=6 * c if name == "sinusoidal" else 8)
    if name == "learned":
        kw["max_len"] = 32
    torch.manual_seed(0)
    return kind, POSITIONAL.build(name, **kw).double()


def _valid(pos, c, n):
    """float32 / float64 (finite) or integer positions of shape (N, C) or (B, N, C), or (N,) token positions when
    C = 1 (issue 42); 16-bit floats round positions (bfloat16: 257 -> 256), so they are refused, as are bool and
    complex."""
    integer = not pos.dtype.is_floating_point and not pos.dtype.is_complex and pos.dtype != torch.bool
    shaped = (pos.ndim in (2, 3) and pos.shape[-1] == c and pos.shape[-2] == n) or (
        pos.ndim == 1 and c == 1 and pos.shape[0] == n
    )
    return (pos.dtype in (torch.float32, torch.float64) or integer) and shaped and bool(torch.isfinite(pos).all())


@pytest.mark.parametrize("name", PARTS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=positions_case())
@example(case=(2, 3, torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], dtype=torch.float64)))  # valid, shared
@example(case=(1, 4, torch.arange(8, dtype=torch.float32).view(2, 4, 1)))  # valid, batched, float32
@example(case=(3, 1, torch.tensor([[[0.0, 0.0, 0.0]], [[0.0, 0.0, 1.0]]], dtype=torch.float64)))  # batched, C = 3
@example(case=(1, 2, torch.tensor([[0.0], [math.nan]], dtype=torch.float64)))  # NaN
@example(case=(1, 2, torch.tensor([[0], [1]])))  # integer dtype (exact: accepted)
@example(case=(1, 2, torch.tensor([[0.0], [257.0]], dtype=torch.bfloat16)))  # 16-bit: refused, never rounded
def test_positions_accepted_correctly_or_rejected_by_name(name, case):
    c, n, pos = case
    kind, part = _part(name, c)
    g = torch.Generator().manual_seed(1)
    try:
        if kind == "additive":
            x = torch.randn(2, n, part.d_model if hasattr(part, "d_model") else 8, generator=g, dtype=torch.float64)
            out = part(x, pos)
        else:
            q, k = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
            out = part(q, k, pos)
    except (ValueError, TypeError) as e:
        assert "positions" in str(e), f"{name}: {e}"
        if _valid(pos, c, n) and name != "learned":  # learned PE also needs integers inside its table
            raise AssertionError(f"{name} rejected valid positions {pos.dtype} {tuple(pos.shape)}: {e}") from e
        return
    assert _valid(pos, c, n), f"{name} accepted invalid positions {pos.dtype} {tuple(pos.shape)}"
    p64 = pos.double()
    if kind == "additive":  # x + encoding of exactly these positions
        ref = part(x, p64)
        assert torch.allclose(out, ref, atol=1e-2 if pos.dtype in (torch.float16, torch.bfloat16) else 1e-12)
    else:  # a rotation: norms kept, and equal to the matrix the part reports for these positions
        rq, _ = out
        if name != "espr":  # ESPR zeroes the inactive block and P mixes it: norms of the active part only
            assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), rtol=1e-9)
        r = part.matrix(pos)
        # batched positions: (B, N, Dh, Dh) gets the head axis; per-head parts (STRING's per-head RoPE-Mixed) have it
        ref = (r[..., None, :, :, :] if pos.ndim == 3 and r.ndim == 4 else r) @ q[..., None]
        ref = ref[..., 0]
        if name == "espr":
            d = part.d_act
            ref = torch.nn.functional.pad(
                (part.active_matrix(pos)[..., None, :, :, :] if pos.ndim == 3 else part.active_matrix(pos))
                @ q[..., :d, None],
                (0, 0, 0, 8 - d),
            )[..., 0]
        assert torch.allclose(rq, ref, atol=1e-9), name
