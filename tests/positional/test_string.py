"""STRING and circulant-STRING: relative property (T2.9), orthogonality (T2.8), folding, gradcheck."""

from __future__ import annotations

import pytest
import torch

from symformer.models import fold_rotary
from symformer.models.layers import MultiHeadAttention
from symformer.positional import STRING, CirculantSTRING
from symformer.positional import diagnostics as dg

EYE = None


def _randomise(mod, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mod.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return mod


def _relative_and_orthogonality(mod, c, n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    ri = torch.randn(n, c, generator=g, dtype=torch.float64) * 10
    rj = torch.randn(n, c, generator=g, dtype=torch.float64) * 10
    mi, mj, md = mod.matrix(ri), mod.matrix(rj), mod.matrix(rj - ri)
    eye = torch.eye(mi.shape[-1], dtype=torch.float64)
    return (mi.mT @ mj - md).abs().max().item(), (mi.mT @ mi - eye).abs().max().item()


@pytest.mark.parametrize("cls", [STRING, CirculantSTRING])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_relative_property_and_orthogonality(cls, c):
    mod = _randomise(cls(16, c).double(), seed=c)
    rel, orth = _relative_and_orthogonality(mod, c)
    assert rel <= 1e-12 and orth <= 1e-12
    with torch.no_grad():
        L = mod.generators()
        assert dg.eps_comm(L) <= 1e-12  # commuting generators (T1.1)
        det = torch.linalg.det(mod.matrix(torch.randn(20, c, dtype=torch.float64)))
        assert (det - 1).abs().max() <= 1e-12  # T2.8: in SO(Dh)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_forward_logits_equal_matrix_logits(pairing):
    mod = _randomise(STRING(8, 2, pairing=pairing).double())
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.randn(2, 5, 2, generator=g, dtype=torch.float64)
    qr, kr = mod(q, k, pos)
    m = mod.matrix(pos)[:, None]  # (B, 1, N, Dh, Dh)
    qm, km = (m @ q[..., None])[..., 0], (m @ k[..., None])[..., 0]
    assert (qr @ kr.mT - qm @ km.mT).abs().max() <= 1e-12
    p = mod.orthogonal()
    assert (p.mT @ p - torch.eye(8, dtype=torch.float64)).abs().max() <= 1e-12


def test_circulant_forward_matches_matrix_and_odd_dim():
    mod = _randomise(CirculantSTRING(7, 2).double())  # no pairs needed for circulant generators
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 2, 5, 7, generator=g, dtype=torch.float64)
    pos = torch.randn(5, 2, generator=g, dtype=torch.float64)
    qr, _ = mod(q, q, pos)
    assert (qr - (mod.matrix(pos) @ q[..., None])[..., 0]).abs().max() <= 1e-12
    a = torch.einsum("nc,cij->nij", pos, mod.generators())
    assert (torch.linalg.matrix_exp(a) - mod.matrix(pos)).abs().max() <= 1e-12


def test_fold_into_preserves_attention_output():
    torch.manual_seed(0)
    layer = (
        MultiHeadAttention(16, 2, positional="string", coord_dim=2, positional_kwargs={"init_scale": 0.3})
        .double()
        .eval()
    )
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pos = torch.randn(6, 2, dtype=torch.float64)
    before = layer(x, pos)
    assert fold_rotary(layer) == 1
    assert bool(layer.rotary.folded)
    assert (layer(x, pos) - before).abs().max() <= 1e-12
    assert fold_rotary(layer) == 0  # already folded: untouched
    with pytest.raises(ValueError, match="folded"):
        layer.rotary.fold_into(layer.q_proj, layer.k_proj)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_fold_gives_an_attention_layer_equal_to_the_unfolded_one(pairing):
    """STRING.fold (P merged into W_Q / W_K, biases too): the folded layer's output equals the unfolded one's in
    float64, and its forward no longer multiplies by P (RoPE alone, what the rotary kernel applies)."""
    torch.manual_seed(1)
    kw = {"init_scale": 0.4, "pairing": pairing}
    layer = MultiHeadAttention(16, 2, positional="string", positional_kwargs=kw).double().eval()
    x, pos = torch.randn(2, 7, 16, dtype=torch.float64), torch.arange(7)
    before = layer(x, pos)
    assert layer.rotary.fold(layer.q_proj, layer.k_proj) is layer.rotary
    assert (layer(x, pos) - before).abs().max() <= 1e-12
    q = torch.randn(1, 2, 7, 8, dtype=torch.float64)
    assert torch.equal(layer.rotary.rotate(q, pos), layer.rotary.rope.rotate(q, pos))  # RoPE alone after the fold
    unfolded = STRING(8, **kw).double()
    unfolded.load_state_dict({k: v for k, v in layer.rotary.state_dict().items() if k != "folded"}, strict=False)
    assert (unfolded.rotate(q, pos) - layer.rotary.rotate(q, pos)).abs().max() > 1e-3  # negative control: P is not I


def test_gradcheck_string_and_circulant():
    g = torch.Generator().manual_seed(5)
    pos = torch.randn(3, 2, generator=g, dtype=torch.float64)
    q = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    s = _randomise(STRING(4, 2, pairing="half").double())
    fn = lambda a, b, beta, sk: s(a, b, pos)  # noqa: E731  (parameters enter through the module)
    assert torch.autograd.gradcheck(fn, (q, k, s.rope.beta, s.skew_param))
    c = _randomise(CirculantSTRING(5, 2).double())
    q5 = torch.randn(1, 1, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, cc: c(a, a, pos)[0], (q5, c.c))


def test_bad_input():
    with pytest.raises(ValueError, match="head_dim"):
        STRING(7)
    with pytest.raises(ValueError, match="head_dim"):
        CirculantSTRING(1)
    s = STRING(8, 2)
    q = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match="positions"):
        s(q, q, torch.zeros(3, 3))
    with pytest.raises(ValueError, match="positions"):
        s(q, q, torch.tensor([[0.0, float("inf")]] * 3))
    with pytest.raises(TypeError, match="q_linear"):
        s.fold_into("W", torch.nn.Linear(8, 8))
    with pytest.raises(ValueError, match="k_linear"):
        s.fold_into(torch.nn.Linear(8, 8), torch.nn.Linear(8, 12))
    c = CirculantSTRING(6, 1)
    with pytest.raises(ValueError, match="q"):
        c(torch.randn(1, 1, 3, 5), torch.randn(1, 1, 3, 6), torch.zeros(3, 1))
