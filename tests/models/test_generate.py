"""CausalLM.generate and step: decoding with per-layer states equals the full forward (float64); bad input."""

import pytest
import torch

from symformer.models import CausalLM, TransformerConfig

CORES = {
    "softmax": {},
    "favor": {"n_features": 16, "chunk_size": 4},
    "plash": {"M": 4, "D_k": 8, "causal_block": 5, "mixer_heads": 2},
}


def _lm(attention="favor", positional="rope", max_len=64, seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        d_model=32,
        n_heads=4,
        n_layers=2,
        attention=attention,
        positional=positional,
        attention_kwargs=CORES[attention],
        max_len=max_len,
    )
    return CausalLM(cfg, 48).double().eval()


def _ids(b=2, n=13, seed=1):
    return torch.randint(0, 48, (b, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("attention", list(CORES))
@pytest.mark.parametrize("positional", ["rope", "learned"])
def test_state_decoding_logits_equal_the_full_forward(attention, positional):
    """A 13-token prefill (PLASH: two finished blocks of 5), then 7 tokens one at a time: every logit row equals
    the full causal forward's; greedy generate() picks the full forward's argmax at every new position."""
    lm = _lm(attention, positional)
    out = lm.generate(_ids(), 7, top_k=1)
    with torch.no_grad():
        full = lm(out)
        states = lm.init_states()
        rows = [lm.step(out[:, :13], states, 0)] + [lm.step(out[:, t : t + 1], states, t) for t in range(13, 20)]
    assert (torch.cat(rows, dim=1) - full).abs().max() < 1e-10
    assert torch.equal(full[:, 12:-1].argmax(-1), out[:, 13:])


def test_sampling_is_reproducible_and_top_k_restricts():
    lm = _lm("plash")
    a = lm.generate(_ids(), 6, temperature=0.8, top_k=3, generator=torch.Generator().manual_seed(5))
    b = lm.generate(_ids(), 6, temperature=0.8, top_k=3, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and a.shape == (2, 19)
    with torch.no_grad():
        logits = lm(a)[:, 12:-1]
    top3 = logits.topk(3, dim=-1).indices
    assert bool((top3 == a[:, 13:, None]).any(-1).all())
    assert torch.equal(lm.generate(_ids(), 0), _ids())


def test_generate_bad_input():
    lm = _lm("favor", "learned", max_len=16)
    with pytest.raises(ValueError, match="^max_new_tokens: got -1"):
        lm.generate(_ids(), -1)
    with pytest.raises(ValueError, match="^temperature: got 0"):
        lm.generate(_ids(), 2, temperature=0.0)
    with pytest.raises(ValueError, match="^top_k: got 0"):
        lm.generate(_ids(), 2, top_k=0)
    with pytest.raises(ValueError, match="^ids: got 'an empty prompt"):
        lm.generate(_ids(n=0), 2)
    with pytest.raises(ValueError, match="^ids: got 'a prompt of 17 tokens'.*learned positional table of 16"):
        lm.generate(_ids(n=17), 1)
    with pytest.raises(ValueError, match="^max_new_tokens: got '4 after a prompt of 13 tokens'"):
        lm.generate(_ids(), 4)
    with pytest.raises(TypeError, match="^ids: "):
        lm.generate(_ids().double(), 1)
