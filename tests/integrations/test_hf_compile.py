"""torch.compile (CPU, inductor) of the rotary parts and attention cores that the HF integration plugs in: same
outputs as eager; the graph breaks are printed (run with -s to see them). Slow: inductor compiles C++ kernels."""

from __future__ import annotations

import pytest
import torch

from symformer.attention.favor import FavorAttention
from symformer.attention.plash import PlashAttention
from symformer.positional import ESPR, STRING, CirculantSTRING, RoPE

PARTS = {
    "rope_half": lambda: RoPE(16, pairing="half"),
    "string": lambda: STRING(16, pairing="half", init_scale=0.1),
    "circulant_string": lambda: CirculantSTRING(16),
    "espr": lambda: ESPR(16, init_scale=0.05),
}
CORES = {
    "favor": lambda: FavorAttention(16, n_features=64),
    "favor_causal": lambda: FavorAttention(16, n_features=64),
    "plash": lambda: PlashAttention(16, n_heads=2, d_model=32, M=4, D_k=16, mixer_heads=2),
    "plash_causal": lambda: PlashAttention(16, n_heads=2, d_model=32, M=4, D_k=16, mixer_heads=2, causal_block=8),
}


def _graph_breaks(fn, *args, **kw) -> list[str]:
    torch._dynamo.reset()
    info = torch._dynamo.explain(fn)(*args, **kw)
    return [str(getattr(b, "reason", b)).split("\n")[0] for b in info.break_reasons]


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, 24, 16, generator=g) for _ in range(3))
    return q, k, v, torch.arange(24, dtype=torch.float32)[:, None]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PARTS))
def test_rotary_part_compiles_to_eager_outputs(name):
    torch.manual_seed(0)
    part = PARTS[name]().eval()
    q, k, _, pos = _inputs()
    ref = part(q, k, pos)
    print(f"\n[compile] {name}: graph breaks {_graph_breaks(part, q, k, pos)}")
    torch._dynamo.reset()
    out = torch.compile(part, backend="inductor")(q, k, pos)
    for a, b in zip(out, ref):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), (a - b).abs().max()
    q2 = q.clone().requires_grad_(True)  # training path: gradients flow through the compiled part
    qo, ko = torch.compile(part, backend="inductor")(q2, k, pos)
    (qo.sum() + ko.sum()).backward()
    assert torch.isfinite(q2.grad).all()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORES))
def test_attention_core_compiles_to_eager_outputs(name):
    torch.manual_seed(0)
    core = CORES[name]().eval()
    q, k, v, _ = _inputs(1)
    causal = name.endswith("causal")
    ref = core(q, k, v, is_causal=causal)
    print(f"\n[compile] {name}: graph breaks {_graph_breaks(core, q, k, v, is_causal=causal)}")
    torch._dynamo.reset()
    out = torch.compile(core, backend="inductor")(q, k, v, is_causal=causal)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4), (out - ref).abs().max()
