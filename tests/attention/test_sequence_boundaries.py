"""One guarantee for every core (issue 61): a document gets the same outputs from an attention layer (rotary part +
core) whether it runs alone (the full causal forward), as a chunked prefill, token by token from a decoding state,
as one row of a left-padded batch, or as one document of a packed row (positions restarting at each document).
Within 1e-10 in float64; in bfloat16 within BF16_BOUND of the float64 reference of the same (bf16-valued) weights.
Parameterised over softmax / FAVOR+ / PLASH x RoPE / STRING / ESPR."""

import copy

import pytest
import torch

from symformer.models.layers import MultiHeadAttention

D, H = 16, 2
CORES = {
    "softmax": {},
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 4, "mixer_heads": 2, "seed": 0},
}
POSITIONAL = {"rope": {}, "string": {"init_scale": 0.3}, "espr": {}}
DOC, PREFILL, PADS = 13, 6, 5  # the document's tokens; a prefill of 6 then 7 single steps; 5 pads before it
OTHERS = (9, 4, 7)  # the packed row: 9 tokens, the document, 4, 7 (its first token at 9, not a block boundary)
# bf16: unit roundoff u = 2^-8; the layer rounds its input, q/k/v and output projections and the core's output to
# bf16 (each a relative error <= u): the outputs stay within 2 u of their scale (max |ref| ~ 1 here)
BF16_BOUND = 2 * 2.0**-8


def _layer(core: str, positional: str) -> MultiHeadAttention:
    torch.manual_seed(0)
    m = MultiHeadAttention(
        D,
        H,
        attention=core,
        positional=positional,
        attention_kwargs=CORES[core],
        positional_kwargs=POSITIONAL[positional],
    )
    return m.double().eval()


def _ways(m: MultiHeadAttention, x: torch.Tensor, junk: torch.Tensor) -> dict[str, torch.Tensor]:
    """The document x (1, DOC, D) through the layer five ways -> {way: its (DOC, D) outputs}."""
    dt, n = x.dtype, x.shape[1]
    pos = torch.arange(n)[:, None]
    out = {"full": m(x, pos, is_causal=True)[0]}
    st = m.init_state()
    pre = [m(x[:, :PREFILL], pos[:PREFILL], state=st)]
    out["prefill"] = torch.cat(pre + [m(x[:, PREFILL:], pos[PREFILL:], state=st)], 1)[0]
    st = m.init_state()
    out["tokens"] = torch.cat([m(x[:, i : i + 1], pos[i : i + 1], state=st) for i in range(n)], 1)[0]
    # left padding: row 0 the document after PADS junk tokens, row 1 junk with no padding
    padded = torch.cat([torch.cat([junk[:, :PADS], x], 1), junk[:, : PADS + n]], 0)
    keep = torch.arange(PADS + n)[None] >= torch.tensor([PADS, 0])[:, None]  # (2, N)
    ppos = (torch.arange(PADS + n)[None] - torch.tensor([PADS, 0])[:, None]).clamp_min(0)[..., None]
    if m.core.__class__.__name__ == "SoftmaxAttention":  # SDPA: key padding and causality in one boolean mask
        mask = keep[:, None, None, :] & torch.ones(PADS + n, PADS + n, dtype=torch.bool).tril()
        out["left_padded"] = m(padded, ppos, attn_mask=mask)[0, PADS:]
    else:
        out["left_padded"] = m(padded, ppos, attn_mask=keep[:, None, None, :], is_causal=True)[0, PADS:]
    # packed: junk documents around it, positions restarting at each
    a, b, c = OTHERS
    row = torch.cat([junk[:, :a], x, junk[:, a : a + b], junk[:, a + b : a + b + c]], 1)
    lens = torch.tensor([a, n, b, c])
    seg = torch.repeat_interleave(torch.arange(4), lens)[None]
    rpos = torch.cat([torch.arange(int(t)) for t in lens])[:, None]
    out["packed"] = m(row, rpos, is_causal=True, segment_ids=seg)[0, a : a + n]
    return {k: v.to(dt) for k, v in out.items()}


def _inputs(dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, DOC, D, generator=g, dtype=torch.float64)
    junk = 3 * torch.randn(1, 40, D, generator=g, dtype=torch.float64)  # large: a leak would show
    return x.to(dtype), junk.to(dtype)


@pytest.mark.parametrize("positional", list(POSITIONAL))
@pytest.mark.parametrize("core", list(CORES))
def test_five_ways_give_one_document_the_same_outputs_in_float64(core, positional):
    m = _layer(core, positional)
    x, junk = _inputs()
    with torch.no_grad():
        ways = _ways(m, x, junk)
    ref = ways.pop("full")
    for way, y in ways.items():
        assert (y - ref).abs().max().item() <= 1e-10, way


@pytest.mark.parametrize("positional", list(POSITIONAL))
@pytest.mark.parametrize("core", list(CORES))
def test_five_ways_in_bfloat16_stay_within_bf16_rounding_of_float64(core, positional):
    m16 = _layer(core, positional).to(torch.bfloat16)
    m64 = copy.deepcopy(m16).double()  # the same bf16-valued weights (exact in float64)
    x, junk = _inputs(torch.bfloat16)
    with torch.no_grad():
        ref = m64(x.double(), torch.arange(DOC)[:, None], is_causal=True)[0]
        ways = _ways(m16, x, junk)
    scale = max(1.0, ref.abs().max().item())
    for way, y in ways.items():
        assert (y.double() - ref).abs().max().item() <= BF16_BOUND * scale, way


def test_a_leak_across_documents_would_be_caught():
    """Negative control: the packed row without its boundaries (one document) changes the document's outputs."""
    m = _layer("plash", "rope")
    x, junk = _inputs()
    a = OTHERS[0]
    row = torch.cat([junk[:, :a], x], 1)
    with torch.no_grad():
        alone = m(x, torch.arange(DOC)[:, None], is_causal=True)[0]
        pos = torch.cat([torch.arange(a), torch.arange(DOC)])[:, None]
        leaked = m(row, pos, is_causal=True)[0, a:]
    assert (leaked - alone).abs().max().item() > 1e-3
