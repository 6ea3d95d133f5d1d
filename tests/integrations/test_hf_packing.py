"""Packed sequences in HF (issue 61): a config-built tiny Llama (float64, use_cache=False) given one row of three
documents (11, 7 and 14 tokens) with restarting position_ids, or DataCollatorWithFlattening's batch with its
cu_seq_lens_* kwargs, gives each document the logits it has alone, within 1e-10, for symformer_favor and
symformer_plash (native sdpa: the same check, ~1e-16). Packing with a cache is a ValueError that says so."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402

from symformer.integrations import hf  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 4, "mixer_heads": 2},
}
LENGTHS = (11, 7, 14)


def _model(kind):
    m = tiny("llama", torch.float64, seed=0)
    m.config.use_cache = False
    if kind == "sdpa":
        m.set_attn_implementation("sdpa")
        return m
    return hf.configure(m, attention=kind, **OPTIONS[kind])


def _docs():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, 40, (n,), generator=g) for n in LENGTHS]


def _worst(model, logits, docs):
    worst, a = 0.0, 0
    for d in docs:
        alone = model(d[None], use_cache=False).logits[0]
        worst = max(worst, (logits[0, a : a + len(d)] - alone).abs().max().item())
        a += len(d)
    return worst


@pytest.mark.parametrize("kind", ["sdpa", "favor", "plash"])
def test_packed_row_gives_each_document_its_logits_alone(kind):
    from transformers import DataCollatorWithFlattening

    model, docs = _model(kind), _docs()
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": d.tolist()} for d in docs])
    flash = {k: v for k, v in batch.items() if k.startswith("cu_seq_lens")}
    assert set(flash) == {"cu_seq_lens_q", "cu_seq_lens_k"}
    with torch.no_grad():
        packed = model(ids, position_ids=pos, use_cache=False).logits
        assert _worst(model, packed, docs) <= 1e-10
        collated = model(batch["input_ids"], position_ids=batch["position_ids"], use_cache=False, **flash).logits
        assert (collated - packed).abs().max() <= 1e-12
        if kind != "sdpa":  # negative control: the row without restarts mixes the documents
            assert _worst(model, model(ids, use_cache=False).logits, docs) > 1e-4


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_packing_with_a_cache_or_disagreeing_boundaries_is_a_value_error(kind):
    model, docs = _model(kind), _docs()
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    cu = torch.tensor([0, 11, 18, 32], dtype=torch.int32)
    with torch.no_grad():
        with pytest.raises(ValueError, match="packed sequences with a cache are not defined"):
            model(ids, position_ids=pos, use_cache=True)
        with pytest.raises(ValueError, match="position_ids"):  # the boundaries say 3 documents, positions say 1
            model(ids, use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
        with pytest.raises(ValueError, match="cu_seq_lens_k"):
            model(ids, position_ids=pos, use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu.flip(0))
        with pytest.raises(ValueError, match="cu_seqlens.*increasing"):
            bad = torch.tensor([0, 18, 11, 32], dtype=torch.int32)
            model(ids, position_ids=pos, use_cache=False, cu_seq_lens_q=bad, cu_seq_lens_k=bad)
