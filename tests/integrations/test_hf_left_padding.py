"""Left padding is invisible in HF generate() (issue 61): a tiny Llama configured with FAVOR+ or PLASH generates,
for each prompt of a left-padded batch of three lengths, the tokens and per-step logits of that prompt alone
(float64, <= 1e-10)."""

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
LENGTHS, NEW, PAD = (11, 6, 9), 7, 0


def _generate(model, ids, mask):
    res = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=False,
        pad_token_id=PAD,
        return_dict_in_generate=True,
        output_logits=True,
    )
    return res.sequences[:, ids.shape[1] :], torch.stack(res.logits, 1)  # (B, NEW), (B, NEW, V)


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_generate_on_a_left_padded_batch_equals_each_prompt_alone(kind):
    model = hf.configure(tiny("llama", torch.float64, seed=0), attention=kind, **OPTIONS[kind])
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 40, (n,), generator=g) for n in LENGTHS]
    n = max(LENGTHS)
    ids = torch.full((len(prompts), n), PAD, dtype=torch.long)
    mask = torch.zeros(len(prompts), n, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, n - len(p) :], mask[r, n - len(p) :] = p, 1
    with torch.no_grad():
        tokens, logits = _generate(model, ids, mask)
        for r, p in enumerate(prompts):
            alone_tokens, alone_logits = _generate(model, p[None], torch.ones(1, len(p), dtype=torch.long))
            assert torch.equal(tokens[r], alone_tokens[0])
            assert (logits[r] - alone_logits[0]).abs().max() <= 1e-10
