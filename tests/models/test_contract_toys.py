"""A rotary part and a decoding core added as CONTRIBUTING's recipes say (tests/_toys.py: their file's content and one
registration line each) run in models.CausalLM with no other edit: it generates, decodes token by token exactly as
its full causal forward, keeps a state whose size does not grow with the context, and reorders its rows for beam
search, all through the contracts (attention.decoding, positional.rotary_parts)."""

from __future__ import annotations

import torch
from tests._toys import ToyLinearAttention, ToyRotary, registered

from symformer.attention import DecodingState, decoding_cores
from symformer.models import CausalLM, TransformerConfig
from symformer.positional import rotary_parts

VOCAB = 40


def _lm(seed: int = 0) -> CausalLM:
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, d_ff=64, attention="toy_linear", positional="toy_rotary", max_len=64
    )
    return CausalLM(cfg, VOCAB).double().eval()


def _ids(b: int = 2, n: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def _decode(lm: CausalLM, ids: torch.Tensor, states: list, start: int = 0) -> torch.Tensor:
    """Logits of ids (B, L) fed one token at a time after the `start` tokens the states hold."""
    return torch.cat([lm.step(ids[:, t : t + 1], states, start + t) for t in range(ids.shape[1])], dim=1)


def test_the_toys_are_read_from_the_registries_inside_the_block_only():
    with registered():
        assert decoding_cores()["toy_linear"] is ToyLinearAttention
        assert rotary_parts()["toy_rotary"] is ToyRotary
        lm = _lm()
        assert all(isinstance(blk.attn.core, ToyLinearAttention) for blk in lm.encoder.blocks)
        assert all(isinstance(blk.attn.rotary, ToyRotary) for blk in lm.encoder.blocks)
    assert "toy_linear" not in decoding_cores() and "toy_rotary" not in rotary_parts()


def test_toy_lm_generates_and_decodes_as_its_full_forward():
    """Greedy generate() picks the full forward's argmax; token-by-token steps (and a prefill then steps) give the
    full causal forward's logits to rounding (float64)."""
    with registered(), torch.no_grad():
        lm = _lm()
        out = lm.generate(_ids(), 7, top_k=1)
        assert out.shape == (2, 16) and torch.equal(out[:, :9], _ids())
        full = lm(out)
        assert torch.equal(full[:, 8:-1].argmax(-1), out[:, 9:])
        by_token = _decode(lm, out, lm.init_states())
        assert (by_token - full).abs().max() < 1e-12
        states = lm.init_states()
        prefilled = torch.cat([lm.step(out[:, :9], states, 0), _decode(lm, out[:, 9:], states, 9)], dim=1)
        assert (prefilled - full).abs().max() < 1e-12


def test_toy_state_size_does_not_grow_with_the_context():
    with registered(), torch.no_grad():
        lm = _lm()
        ids = _ids(n=48)
        states = lm.init_states()
        assert all(isinstance(st, DecodingState) for st in states)
        lm.step(ids[:, :4], states, 0)
        short = [st.nbytes() for st in states]
        _decode(lm, ids[:, 4:], states, 4)
        assert [st.nbytes() for st in states] == short and all(n > 0 for n in short)


def test_toy_state_select_reorders_rows_for_beam_search():
    """After a prefill of three sequences, select(index) on every layer's state continues the reordered rows (a beam
    reorder) as their own full forward; repeat_interleave expands them (num_return_sequences)."""
    with registered(), torch.no_grad():
        lm = _lm()
        ids = _ids(b=3, n=12)
        full = lm(ids)
        states = lm.init_states()
        lm.step(ids[:, :8], states, 0)
        index = torch.tensor([2, 0, 0])
        for st in states:
            st.select(index)
        got = _decode(lm, ids[index, 8:], states, 8)
        assert (got - full[index, 8:]).abs().max() < 1e-12
        states = lm.init_states()
        lm.step(ids[:, :8], states, 0)
        for st in states:
            st.repeat_interleave(2)
        got = _decode(lm, ids.repeat_interleave(2, 0)[:, 8:], states, 8)
        assert (got - full.repeat_interleave(2, 0)[:, 8:]).abs().max() < 1e-12
