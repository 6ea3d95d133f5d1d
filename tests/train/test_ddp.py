"""Two gloo processes on CPU end with the parameters of one process with the same global batch."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from symformer.data import load_digits_patches
from symformer.models import TransformerConfig, ViTClassifier
from symformer.train import Classification, TrainConfig, Trainer


def _model():
    torch.manual_seed(0)
    return ViTClassifier(TransformerConfig(d_model=16, n_heads=2, n_layers=1, coord_dim=2), 4, 10)


def _cfg():
    return TrainConfig(epochs=2, batch_size=32, lr=1e-2, optimizer="sgd", grad_clip=None, seed=0)


def _data():
    s = load_digits_patches()
    return s.train.subset(torch.arange(192))


def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        t = Trainer(_model(), Classification(), _data(), None, _cfg())
        t.fit()
        if rank == 0:
            torch.save(t.raw_model.state_dict(), out)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")
def test_two_process_gloo_matches_single(tmp_path, monkeypatch):
    out = tmp_path / "ddp.pt"
    # spawned interpreters copy this sys.path and re-import this module by name: make it importable
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.syspath_prepend(here)
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(here)))
    mp.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    single = Trainer(_model(), Classification(), _data(), None, _cfg())
    single.fit()
    ddp = torch.load(out)
    for n, p in single.raw_model.state_dict().items():
        assert torch.allclose(p, ddp[n], atol=1e-5, rtol=0), n
