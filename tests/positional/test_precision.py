"""Every positional part in bfloat16 and float16 against a float64 reference (issue 40): 8192 token positions and a
2-D grid, forward and backward, built in 16 bits, cast with .to(), or run under autocast; the float32 master; bad
input. Bound (experiments.precision.rotation_checks): max|out - float64 out| <= 2 eps(dtype) max|q|."""

from __future__ import annotations

import pytest
import torch

from symformer.experiments.precision.rotation_checks import (
    ADDITIVE_PARTS,
    ROTATION_PARTS,
    ROUTES,
    build_part,
    grid_positions,
    rotation_errors,
)

PARTS = ROTATION_PARTS + ADDITIVE_PARTS
DTYPES = (torch.bfloat16, torch.float16)
LOW = (torch.bfloat16, torch.float16)


def _check(res: dict) -> None:
    assert res["out_dtype_ok"]
    for key in ("forward", "grad_input", "grad_param"):
        assert res[key] <= 1.0, (key, res)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_8192_token_positions_within_bound(part, dtype, route):
    _check(rotation_errors(part, dtype, route, n=8192, coord_dim=1, backward=True, heads=1))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_2d_grid_within_bound(part, dtype, route):
    _check(rotation_errors(part, dtype, route, n=32 * 32, coord_dim=2, backward=True, heads=1))


@pytest.mark.cuda
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_8192_token_positions_within_bound_cuda(part, dtype, route):
    _check(rotation_errors(part, dtype, route, n=8192, coord_dim=1, backward=True, heads=4, device="cuda"))


def test_bound_detects_rounded_frequencies():
    """The check can fail: RoPE with its frequencies rounded to bfloat16 (what casting the part did) is far out."""
    res = rotation_errors("rope", torch.bfloat16, "cast", n=8192)
    assert res["forward"] <= 1.0
    part = build_part("rope").to(torch.bfloat16)
    with torch.no_grad():
        part.beta.copy_(part.beta.to(torch.bfloat16))
    ref = build_part("rope").double()
    q = torch.randn(1, 1, 8192, 16).to(torch.bfloat16)
    p = grid_positions(8192, 1)
    err = (part(q, q, p)[0].double() - ref(q.double(), q.double(), p)[0]).abs().max()
    assert float(err) > 10 * 2 * 2.0**-7 * float(q.abs().max())


# ---------------------------------------------------------------- the float32 master
def _floats(module) -> list[torch.Tensor]:
    return [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]


@pytest.mark.parametrize("part", PARTS)
def test_master_survives_casts_and_state_dict(part):
    m = build_part(part, n=64)
    host = torch.nn.ModuleDict({"part": m, "lin": torch.nn.Linear(4, 4)})
    for cast in (
        lambda h: h.half(),
        lambda h: h.bfloat16(),
        lambda h: h.to(torch.bfloat16),
        lambda h: h.to("cpu", torch.float16),
        lambda h: h.type(torch.float16),
    ):
        cast(host)
        assert host["lin"].weight.dtype in LOW
        assert all(t.dtype == torch.float32 for t in _floats(m))
    assert all(v.dtype == torch.float32 for v in m.state_dict().values() if v.is_floating_point())
    host.to("meta", torch.bfloat16)  # a device move still applies, without the rounding
    assert all(t.device.type == "meta" and t.dtype == torch.float32 for t in _floats(m))


@pytest.mark.parametrize("part", PARTS)
def test_built_in_16_bits_and_float64_casts(part):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        m = build_part(part, n=64)
    finally:
        torch.set_default_dtype(old)
    assert all(t.dtype == torch.float32 for t in _floats(m))
    m.double()
    assert all(t.dtype == torch.float64 for t in _floats(m))  # a float64 master when the user asks for one
    m.half()
    assert all(t.dtype == torch.float64 for t in _floats(m))
    m.float()
    assert all(t.dtype == torch.float32 for t in _floats(m))


@pytest.mark.parametrize("assign", [False, True])
def test_loading_16_bit_state_dict_upcasts(assign):
    m = build_part("string")
    sd = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in m.state_dict().items()}
    m.load_state_dict(sd, assign=assign)
    for k, v in m.state_dict().items():
        if v.is_floating_point():
            assert v.dtype == torch.float32 and torch.equal(v, sd[k].float())


def test_optimizer_sees_float32_parameters_and_gradients():
    m = build_part("espr")
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    m.to(torch.bfloat16)
    q = torch.randn(1, 2, 64, 16, dtype=torch.bfloat16)
    out = m(q, q, torch.arange(64)[:, None])
    assert out[0].dtype == torch.bfloat16
    (out[0].float().square().sum()).backward()
    opt.step()
    for p in m.parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32 and bool(torch.isfinite(p).all())


def test_autocast_keeps_input_dtype_and_float32_angles():
    m = build_part("string")
    q = torch.randn(1, 1, 4096, 16)
    p = grid_positions(4096, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(q, q, p)[0]
    assert out.dtype == torch.float32  # an elementwise op under autocast: float32 in, float32 out
    assert torch.allclose(out, m(q, q, p)[0], atol=1e-5)


def test_cache_keys_include_dtype():
    m = build_part("rope")
    p = grid_positions(512, 1)
    q = torch.randn(1, 1, 512, 16, dtype=torch.float64)
    first = m(q.to(torch.bfloat16), q.to(torch.bfloat16), p)[0]
    exact = m(q, q, p)[0]
    assert exact.dtype == torch.float64 and m(q.to(torch.bfloat16), q.to(torch.bfloat16), p)[0].equal(first)
    assert torch.allclose(exact, build_part("rope").double()(q, q, p)[0], atol=1e-13)


@pytest.mark.parametrize("part", ROTATION_PARTS)
def test_int64_positions_equal_float_positions(part):
    m = build_part(part)
    q = torch.randn(2, 2, 300, 16)
    p = torch.arange(300)[:, None]
    a, b = m(q, q, p), m(q, q, p.float())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("part", ROTATION_PARTS)
def test_bad_dtypes(part):
    m = build_part(part)
    q = torch.randn(1, 2, 8, 16)
    p = torch.arange(8)[:, None]
    for bad in (torch.int64, torch.float8_e4m3fn, torch.complex64):
        with pytest.raises(TypeError, match=r"q: got 'dtype torch\.(int64|float8_e4m3fn|complex64)'.*bfloat16"):
            m(q.to(bad), q, p)
    with pytest.raises(TypeError, match=r"k: got 'dtype torch\.int32'.*float16"):
        m(q, q.to(torch.int32), p)
    with pytest.raises(TypeError, match=r"k: got 'dtype torch\.bfloat16'.*dtype of q"):
        m(q, q.to(torch.bfloat16), p)
    for low in (*LOW, torch.float8_e4m3fn):
        with pytest.raises(ValueError, match=r"positions: got 'dtype torch\.(b?float16|float8_e4m3fn)'.*int64 or"):
            m(q, q, p.to(low))
    with pytest.raises(ValueError, match=r"positions: got 'shape \(3, 8, 1\) \(batch 3\)'"):
        m(q.expand(2, 2, 8, 16), q.expand(2, 2, 8, 16), p.expand(3, 8, 1))


@pytest.mark.parametrize("part", ADDITIVE_PARTS)
def test_bad_dtypes_additive(part):
    m = build_part(part, n=64)
    x = torch.randn(1, 8, 16)
    p = torch.arange(8)[:, None]
    with pytest.raises(TypeError, match=r"x: got 'dtype torch\.int64'"):
        m(x.long(), p)
    with pytest.raises(ValueError, match=r"positions: got 'dtype torch\.bfloat16'.*int64 or float32"):
        m(x, p.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("part", PARTS)
def test_a_part_built_under_a_16bit_default_dtype_is_the_float32_build(part, dtype):
    """from_pretrained(dtype=) builds parts under a 16-bit default dtype: their float32 masters must hold the float32
    build's values for the same seed (random draws made in the default dtype would differ with torch's version)."""
    from symformer.experiments.precision.rotation_checks import _built_in

    a, b = _built_in(torch.float32, part, 1, 0, 64), _built_in(dtype, part, 1, 0, 64)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y), name
