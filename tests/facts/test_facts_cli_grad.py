"""`symformer facts build|rho`, gradchecks of the hand-written modules, registration of experiment/bench."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from symformer.cli import main
from symformer.facts import make_fact_set, sample_embeddings
from symformer.facts.mlp import FactMLP, silu_prime


def test_cli_build_npy_and_pt(tmp_path, capsys):
    fs = make_fact_set(48, 12, tied=False, seed=2)
    np.save(tmp_path / "K.npy", fs.keys.numpy())
    torch.save(fs.values, tmp_path / "V.pt")
    np.save(tmp_path / "f.npy", fs.facts.numpy())
    out = tmp_path / "mlp.pt"
    rc = main(
        [
            "facts",
            "build",
            "--keys",
            str(tmp_path / "K.npy"),
            "--values",
            str(tmp_path / "V.pt"),
            "--facts",
            str(tmp_path / "f.npy"),
            "--method",
            "bin+jl",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["accuracy"] == 1.0 and info["params"] > 0 and out.is_file()
    saved = torch.load(out, weights_only=True)
    cfg = saved["config"]
    mlp = FactMLP(cfg["d"], cfg["h"], m=cfg["m"])
    mlp.load_state_dict(saved["state_dict"])
    pred = (mlp(fs.keys) @ fs.values.T).argmax(1)
    assert torch.equal(pred, fs.facts)


def test_cli_rho(tmp_path, capsys):
    V = sample_embeddings(30, 4, seed=1)
    V = torch.cat([V, V[:2].mean(0, keepdim=True) * 0.1])
    np.save(tmp_path / "V.npy", V.numpy())
    assert main(["facts", "rho", "--values", str(tmp_path / "V.npy")]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["not_vertices"] == [30] and info["rho"] <= 0


def test_cli_errors(tmp_path, capsys):
    K = sample_embeddings(10, 4, seed=0)
    np.save(tmp_path / "K.npy", K.numpy())
    np.save(tmp_path / "V5.npy", sample_embeddings(10, 5, seed=1).numpy())
    (tmp_path / "f.json").write_text(json.dumps([[0, 1], [0, 2]] + [[i, i] for i in range(1, 10)]))
    (tmp_path / "K.txt").write_text("1 2")
    cases = [
        (["facts", "build", "--keys", str(tmp_path / "K.txt"), "--values", str(tmp_path / "K.npy")], "--keys"),
        (["facts", "build", "--keys", str(tmp_path / "K.npy"), "--values", str(tmp_path / "V5.npy")], "width"),
        (
            [
                "facts",
                "build",
                "--keys",
                str(tmp_path / "K.npy"),
                "--values",
                str(tmp_path / "K.npy"),
                "--facts",
                str(tmp_path / "f.json"),
            ],
            "two values",
        ),
        (
            [
                "facts",
                "build",
                "--keys",
                str(tmp_path / "K.npy"),
                "--values",
                str(tmp_path / "K.npy"),
                "--method",
                "magic",
            ],
            "--method",
        ),
        (["facts", "rho", "--values", str(tmp_path / "missing.npy")], "--values"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err, (argv, err)


@pytest.mark.parametrize(
    "gated,act,m,bias",
    [(True, "silu", 2, True), (False, "relu", None, True), (False, "silu", 3, False), (True, "silu_prime", 2, False)],
)
def test_gradcheck_fact_mlp(gated, act, m, bias):
    torch.manual_seed(0)
    mlp = FactMLP(3, 6, activation=act, gated=gated, bias=bias, m=m, code_bias=bias, out_bias=bias)
    with torch.no_grad():
        for p in mlp.parameters():
            p.normal_()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(mlp, (x,))
    params = tuple(mlp.parameters())

    def f(*ps):
        return torch.func.functional_call(mlp, {n: p for (n, _), p in zip(mlp.named_parameters(), ps)}, (x,))

    assert torch.autograd.gradcheck(f, tuple(p.detach().clone().requires_grad_() for p in params))


def test_silu_prime_is_the_derivative():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(torch.nn.functional.silu(x).sum(), x)
    assert torch.allclose(silu_prime(x.detach()), g, atol=1e-15)


def test_fact_mlp_bad_input():
    mlp = FactMLP(3, 6, m=2)
    with pytest.raises(ValueError, match="x"):
        mlp(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="x"):
        mlp([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="h"):
        FactMLP(3, 5, m=2)
    with pytest.raises(ValueError, match="activation"):
        FactMLP(3, 4, activation="tanh")


def test_registered():
    from symformer.benchmarks import load_all as load_bench
    from symformer.experiments import load_all as load_exp

    assert "facts" in load_exp().names()
    assert "facts" in load_bench().names()
