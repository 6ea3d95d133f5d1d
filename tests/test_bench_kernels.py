"""The `kernels` suite (benchmarks/kernels.py): GPU only, so on this machine it must refuse cleanly; its pieces
(the compared implementations, the memory floor, the section list others plug into) are checked on the CPU."""

from __future__ import annotations

import pytest
import torch

from symformer import cli
from symformer.benchmarks import kernels as kb
from symformer.benchmarks.base import SUITES, BenchContext


def test_refuses_without_cuda_in_one_line(tmp_path, capsys, monkeypatch):
    code = cli.main(["bench", "kernels", "--out", str(tmp_path / "o")])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[kernels]")]
    assert code == 2 and len(err) == 1 and "--device" in err[0] and "CUDA device" in err[0], err
    assert not (tmp_path / "o" / "kernels" / "results.json").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine, but --device cpu
    with pytest.raises(ValueError, match="--device.*'cpu'.*a CUDA device"):
        kb.run(BenchContext(out_dir=tmp_path, device="cpu"))


def test_runs_only_when_named_and_sections_plug_in():
    spec = SUITES.get("kernels")
    assert spec.by_name_only and spec.fn is kb.run
    assert kb.SECTIONS[:2] == [kb.rotary_rows, kb.circulant_rows] and all(callable(s) for s in kb.SECTIONS)


def test_circulant_fft_and_matmul_rows_rotate_alike():
    part = kb.CirculantSTRING(8, seed=0)
    pos = torch.arange(5)
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(1))
    fft, mm = kb.circulant_methods(part, pos).values()
    assert (fft(x) - mm(x)).abs().max() <= 1e-5


@pytest.mark.parametrize("with_hf", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_compared_implementations_rotate_alike(monkeypatch, with_hf):
    """Every half-pairing method the suite times computes the same rotation (same frequencies and layout), so the
    ratios compare like with like; rotary-embedding-torch rotates interleaved pairs, checked by its norms only.
    HF's apply in the slow variant only: importing transformers' Llama takes 5-15 s here."""
    if not with_hf:
        monkeypatch.setattr(kb, "_hf_apply", lambda: None)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # our kernel's row forces the kernel: the interpreter runs it here
    pos = torch.arange(3, 9)
    methods = kb.rope_methods(8, pos, torch.float32)
    assert {"symformer_kernel", "symformer_torch"} <= set(methods) and with_hf == ("hf_eager" in methods)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g)
    ref = methods["symformer_torch"](q, k)
    for name in ("symformer_kernel", "hf_eager"):
        if name in methods and (name != "symformer_kernel" or kb.triton_available()):
            assert all((a - b).abs().max() <= 1e-5 for a, b in zip(methods[name](q, k), ref)), name
    if "rotary_embedding_torch" in methods:
        qr, _ = methods["rotary_embedding_torch"](q, k)
        assert torch.allclose(qr.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    kb._runner(methods["symformer_torch"], q, k, backward=True)()  # the timed fwd+bwd call runs


def test_memory_floor_counts_q_k_in_and_out_and_the_tables():
    b, h, n, dh = 2, 4, 16, 8
    once = 4 * b * h * n * dh * 2 + 2 * n * (dh // 2) * 4
    assert kb._floor_bytes((b, h, n, dh), torch.bfloat16, False) == once
    assert kb._floor_bytes((b, h, n, dh), torch.bfloat16, True) == 2 * once
