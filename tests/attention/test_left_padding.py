"""Left padding is invisible (issue 61): for FAVOR+ and PLASH, a left-padded row gives its real tokens the outputs
of the row alone, in the full causal forward, the chunked prefill and every decoding step (float64, <= 1e-10).
PLASH's blocks count from each row's first real token."""

import pytest
import torch

import symformer
from symformer.attention import FavorAttention, PlashAttention
from symformer.models import CausalLM, TransformerConfig

PADS = (0, 3, 6, 1, 5, 2, 4)  # one row per pad count 0..6, in mixed order
N = 12  # tokens per padded row; row r has N - PADS[r] real ones


def _core(kind, block=4):
    if kind == "favor":
        return FavorAttention(8, n_features=16, chunk_size=4, seed=0).double()
    return PlashAttention(8, M=4, D_k=8, causal_block=block, mixer_heads=2, seed=0).double().eval()


CORES = [("favor", None)] + [("plash", c) for c in (1, 3, 4, 5, 16)]
IDS = [k if c is None else f"plash-c{c}" for k, c in CORES]


def _batch(h=2, d=8, seed=0):
    """q, k, v (B, H, N, d) with row r's real tokens at N - PADS[r].. and random junk in its padding; keep mask."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(len(PADS), h, N, d, generator=g, dtype=torch.float64) for _ in range(3))
    keep = torch.arange(N) >= torch.tensor(PADS)[:, None]  # (B, N)
    return q, k, v, keep[:, None, None, :]


def _alone(core, q, k, v, r):
    """Row r without its padding: the full causal forward of its real tokens (no mask)."""
    p = PADS[r]
    with torch.no_grad():
        return core(q[r : r + 1, :, p:], k[r : r + 1, :, p:], v[r : r + 1, :, p:], is_causal=True)[0]


def _max_diff(core, out, q, k, v):
    return max((out[r, :, PADS[r] :] - _alone(core, q, k, v, r)).abs().max().item() for r in range(len(PADS)))


@pytest.mark.parametrize(("kind", "block"), CORES, ids=IDS)
def test_full_causal_forward_of_a_left_padded_batch_equals_each_row_alone(kind, block):
    core = _core(kind, block)
    q, k, v, keep = _batch()
    with torch.no_grad():
        out = core(q, k, v, attn_mask=keep, is_causal=True)
    assert _max_diff(core, out, q, k, v) <= 1e-10
    if kind == "plash":  # a query before the row's first real token sees no kept key: output 0
        for r, p in enumerate(PADS):
            assert torch.equal(out[r, :, :p], torch.zeros_like(out[r, :, :p]))


@pytest.mark.parametrize(("kind", "block"), CORES, ids=IDS)
@pytest.mark.parametrize("prefill", [1, 7, N])
@pytest.mark.parametrize("reads", ["auto", "never"])
def test_prefill_and_token_steps_of_a_left_padded_batch_equal_each_row_alone(kind, block, prefill, reads):
    """A prefill of `prefill` tokens (1: every token is a step, the padding included), then one token at a time;
    reads="never": what an accelerator runs (the host does not read the mask, every row takes its own grid)."""
    core = _core(kind, block)
    q, k, v, keep = _batch(seed=1)
    st = core.init_state()
    with torch.no_grad(), symformer.value_checks(reads):
        ys = [core(q[..., :prefill, :], k[..., :prefill, :], v[..., :prefill, :], keep[..., :prefill], True, state=st)]
        for i in range(prefill, N):
            s = slice(i, i + 1)
            ys.append(core(q[..., s, :], k[..., s, :], v[..., s, :], keep[..., s], True, state=st))
        # then more tokens without a mask (what a generation step passes once the prompt is in)
        q2, k2, v2, _ = _batch(seed=2)
        for i in range(6):
            s = slice(i, i + 1)
            ys.append(core(q2[..., s, :], k2[..., s, :], v2[..., s, :], None, True, state=st))
    out = torch.cat(ys, dim=-2)
    qq, kk, vv = (torch.cat([a, b[..., :6, :]], dim=-2) for a, b in ((q, q2), (k, k2), (v, v2)))
    with torch.no_grad():
        worst = max((out[r, :, PADS[r] :] - _alone(core, qq, kk, vv, r)).abs().max().item() for r in range(len(PADS)))
    assert worst <= 1e-10


@pytest.mark.parametrize("block", [3, 5])
def test_a_mask_without_padding_decodes_as_no_mask_when_the_host_cannot_read_it(block):
    """On an accelerator every mask takes the per-row grids (the host cannot see it pads nothing): an all-kept
    mask then decodes as no mask does."""
    core = _core("plash", block)
    q, k, v, _ = _batch(seed=4)
    keep = torch.ones(len(PADS), 1, 1, N, dtype=torch.bool)
    outs = []
    for mask in (None, keep):
        st = core.init_state()

        def m(a, b, mask=mask):
            return None if mask is None else mask[..., a:b]

        with torch.no_grad(), symformer.value_checks("never"):
            ys = [core(q[..., :5, :], k[..., :5, :], v[..., :5, :], m(0, 5), True, state=st)]
            for i in range(5, N):
                s = slice(i, i + 1)
                ys.append(core(q[..., s, :], k[..., s, :], v[..., s, :], m(i, i + 1), True, state=st))
        outs.append(torch.cat(ys, dim=-2))
    assert (outs[0] - outs[1]).abs().max() <= 1e-12


LM_CORES = {
    "favor": {"n_features": 16, "chunk_size": 4},
    "plash": {"M": 4, "D_k": 8, "causal_block": 4, "mixer_heads": 2},
}


@pytest.mark.parametrize("attention", list(LM_CORES))
def test_causal_lm_generate_on_a_left_padded_batch_equals_each_prompt_alone(attention):
    """models.CausalLM.generate(attention_mask=) on three prompts of 11, 6 and 9 tokens, left-padded: each row's
    greedy tokens, and its logits at every step (prefill and steps fed the generated tokens), are those of the
    prompt alone."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=32, n_heads=4, n_layers=2, attention=attention, positional="rope", attention_kwargs=LM_CORES[attention]
    )
    lm = CausalLM(cfg, 48).double().eval()
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 48, (n,), generator=g) for n in (11, 6, 9)]
    n, new = 11, 7
    ids = torch.zeros(3, n, dtype=torch.long)
    mask = torch.zeros(3, n, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, n - len(p) :], mask[r, n - len(p) :] = p, 1
    out = lm.generate(ids, new, top_k=1, attention_mask=mask)

    def logits(seq, prompt_len, m=None, pads=None):
        with torch.no_grad():
            states = lm.init_states()
            rows = [lm.step(seq[:, :prompt_len], states, 0, m, pads)[:, -1:]]
            for t in range(prompt_len, seq.shape[1] - 1):
                rows.append(lm.step(seq[:, t : t + 1], states, t, None, pads))
        return torch.cat(rows, 1)

    padded = logits(out, n, mask, (mask == 0).sum(-1))
    for r, p in enumerate(prompts):
        alone = lm.generate(p[None], new, top_k=1)
        assert torch.equal(out[r, n:], alone[0, len(p) :])
        assert (padded[r] - logits(alone, len(p))[0]).abs().max() <= 1e-10
