"""facts/dot_ce.py: the fused, blocked cross-entropy on dot-product logits against autograd's."""

import pytest
import torch

from symformer.facts.dot_ce import dot_product_cross_entropy


def _case(n=37, F=29, d=6, dtype=torch.float64, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    out = (scale * torch.randn(n, d, generator=g, dtype=dtype)).requires_grad_(True)
    V = torch.randn(F, d, generator=g, dtype=dtype).requires_grad_(True)
    t = torch.randint(0, F, (n,), generator=g)
    t[::3] = (out @ V.T).argmax(1)[::3]  # every third row decodes to its target
    return out, V, t


@pytest.fixture(params=["fused", "small"])
def path(request, monkeypatch):
    """Both code paths: the fused blocks (forced at any size) and autograd's below FUSED_MIN_LOGITS."""
    from symformer.facts import dot_ce

    monkeypatch.setattr(dot_ce, "FUSED_MIN_LOGITS", 0 if request.param == "fused" else 10**12)
    return request.param


@pytest.mark.parametrize("block", [1, 5, 37, 64])
def test_value_gradients_and_count_match_autograd(block, path):
    out, V, t = _case()
    loss, correct = dot_product_cross_entropy(out, V, t, block)
    assert ("_DotProductCE" in type(loss.grad_fn).__name__) == (path == "fused")
    g_out, g_v = torch.autograd.grad(2.5 * loss, (out, V))
    logits = out @ V.T
    ref = torch.nn.functional.cross_entropy(logits, t)
    r_out, r_v = torch.autograd.grad(2.5 * ref, (out, V))
    assert abs(float(loss - ref)) <= 1e-14 * float(ref)
    assert torch.allclose(g_out, r_out, rtol=0, atol=1e-15) and torch.allclose(g_v, r_v, rtol=0, atol=1e-15)
    assert int(correct) == int((logits.argmax(1) == t).sum()) and 0 < int(correct) < len(t)


def test_gradcheck_and_large_logits(path):
    out, V, t = _case(n=7, F=5, d=3)
    assert torch.autograd.gradcheck(lambda o, v: dot_product_cross_entropy(o, v, t, 3)[0], (out, V))
    out, V, t = _case(scale=1e3)  # logits ~1e3: exp would overflow without the max shift
    loss, _ = dot_product_cross_entropy(out, V, t)
    ref = torch.nn.functional.cross_entropy(out @ V.T, t)
    assert torch.isfinite(loss) and abs(float(loss - ref)) <= 1e-12 * float(ref)


def test_values_without_grad_and_float32(path):
    out, V, t = _case(dtype=torch.float32)
    V = V.detach()
    loss, correct = dot_product_cross_entropy(out, V, t, 8)
    loss.backward()
    out2 = out.detach().clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(out2 @ V.T, t).backward()
    assert torch.allclose(out.grad, out2.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "args, match, exc",
    [
        (lambda o, v, t: (o[0], v, t), "out", TypeError),
        (lambda o, v, t: (o, v[:, :2], t), "values", ValueError),
        (lambda o, v, t: (o, v.float(), t), "values", TypeError),
        (lambda o, v, t: (o, v, t.int()), "targets", TypeError),
        (lambda o, v, t: (o, v, t.clamp(max=0) + 29), "targets", ValueError),
    ],
)
def test_bad_input_names_the_argument(args, match, exc):
    with pytest.raises(exc, match=match):
        dot_product_cross_entropy(*args(*_case()))


def test_train_mlp_killed_and_resumed_from_its_checkpoint_is_exact(tmp_path, monkeypatch):
    from symformer.facts import baselines

    g = torch.Generator().manual_seed(1)
    K, V = torch.randn(40, 8, generator=g), torch.randn(40, 8, generator=g)
    f = torch.randperm(40, generator=g)
    kw = dict(h=3, max_epochs=60, seed=2)  # too small to store 40 facts: all 60 epochs run
    plain = baselines.train_mlp(K, V, f, **kw)
    real, calls = baselines.dot_product_cross_entropy, {"n": 0}

    def dies_in_epoch_26(*a, **k):
        calls["n"] += 1
        if calls["n"] == 27:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(baselines, "dot_product_cross_entropy", dies_in_epoch_26)
    ck = tmp_path / "gd.pt"
    with pytest.raises(KeyboardInterrupt):
        baselines.train_mlp(K, V, f, checkpoint=ck, checkpoint_every=10, **kw)
    resumed = baselines.train_mlp(K, V, f, checkpoint=ck, checkpoint_every=10, **kw)
    assert calls["n"] == 27 + 40  # went on from the checkpoint of epoch 20
    for (name, a), b in zip(plain.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_bench_gd_epoch_rows_time_both_losses():
    from symformer.benchmarks.facts import _gd_epoch_rows

    threads = torch.get_num_threads()
    fused, auto = _gd_epoch_rows(64, 8, 4, seed=0, min_run_time=0.01)
    assert (fused["method"], auto["method"]) == ("gd-epoch-fused", "gd-epoch-autograd")
    assert fused["seconds"] > 0 and auto["seconds"] > 0 and torch.get_num_threads() == threads


def test_train_mlp_rejects_a_file_that_is_not_its_checkpoint(tmp_path):
    from symformer.data.files import DataFileError
    from symformer.facts import baselines

    g = torch.Generator().manual_seed(1)
    K, V = torch.randn(10, 4, generator=g), torch.randn(10, 4, generator=g)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(DataFileError, match="junk.pt is not a GD fact-MLP training checkpoint"):
        baselines.train_mlp(K, V, torch.arange(10), h=2, max_epochs=3, checkpoint=junk)
    other = tmp_path / "other.pt"
    torch.save({"step": 3}, other)
    with pytest.raises(DataFileError, match=r"other.pt is not a GD fact-MLP training checkpoint \(no epoch, mlp"):
        baselines.train_mlp(K, V, torch.arange(10), h=2, max_epochs=3, checkpoint=other)
