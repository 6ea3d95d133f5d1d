import pytest
import torch

from symformer.positional import RoPE, pair_indices


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("coord_dim,mode", [(1, "axial"), (2, "axial"), (3, "axial"), (2, "mixed")])
def test_relative_property_float64(pairing, coord_dim, mode):
    torch.manual_seed(0)
    rope = RoPE(head_dim=16, coord_dim=coord_dim, pairing=pairing, mode=mode).double()
    n = 12
    pos = torch.randn(n, coord_dim, dtype=torch.float64) * 5
    q = torch.randn(1, 1, n, 16, dtype=torch.float64)
    k = torch.randn(1, 1, n, 16, dtype=torch.float64)
    qr, kr = rope(q, k, pos)
    logits = (qr @ kr.transpose(-1, -2))[0, 0]
    # the same vectors rotated at positions shifted by a common offset give the same logits
    shift = torch.randn(1, coord_dim, dtype=torch.float64) * 7
    qs, ks = rope(q, k, pos + shift)
    assert (logits - (qs @ ks.transpose(-1, -2))[0, 0]).abs().max() < 1e-12
    # and R(r_i)^T R(r_j) = R(r_j - r_i) (T2.9)
    R = rope.matrix(pos)
    lhs = R[:, None].transpose(-1, -2) @ R[None, :]
    rhs = rope.matrix((pos[None, :] - pos[:, None]).reshape(-1, coord_dim)).reshape(n, n, 16, 16)
    assert (lhs - rhs).abs().max() < 1e-12
    assert (R.transpose(-1, -2) @ R - torch.eye(16, dtype=torch.float64)).abs().max() < 1e-12


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_matrix_matches_forward_and_pairs(pairing):
    rope = RoPE(head_dim=8, pairing=pairing).double()
    pos = torch.arange(5, dtype=torch.float64)[:, None]
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    y, _ = rope(x, x, pos)
    y2 = (rope.matrix(pos) @ x[0, 0, :, :, None])[..., 0]
    assert torch.allclose(y[0, 0], y2, atol=1e-14)
    # a rotation only mixes the coordinates of each pair
    R = rope.matrix(torch.tensor([[1.0]], dtype=torch.float64))[0]
    for a, b in pair_indices(8, pairing).tolist():
        mask = torch.zeros(8, 8, dtype=torch.bool)
        mask[a, a] = mask[a, b] = mask[b, a] = mask[b, b] = True
        assert R[a][~mask[a]].abs().max() == 0 and R[b][~mask[b]].abs().max() == 0


def test_bad_input():
    with pytest.raises(ValueError, match="head_dim"):
        RoPE(head_dim=7)
    with pytest.raises(ValueError, match="pairing"):
        RoPE(head_dim=8, pairing="diag")
    rope = RoPE(head_dim=8, coord_dim=2)
    q = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match="positions"):
        rope(q, q, torch.zeros(3, 1))
    with pytest.raises(ValueError, match="positions"):
        rope(q, q, torch.tensor([[0.0, float("nan")]] * 3))


def test_gradcheck_learnable():
    rope = RoPE(head_dim=4, coord_dim=2, mode="mixed", learnable=True).double()
    q = torch.randn(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(3, 2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b, beta: rope.__class__.forward(rope, a, b, pos), (q, k, rope.beta))
