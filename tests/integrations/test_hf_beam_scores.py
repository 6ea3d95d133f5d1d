"""HF beam search over decoding states (issue 58, item 2): 3 beams on a config-built Llama configured with FAVOR+ /
PLASH, every returned beam's score equal to the sum of its tokens' log-probabilities under the full forward (a
float64 model; generate() rounds each step's logits to float32, and so does the reference: 1e-10). Beam search
reorders the states at every step (StateLayer.reorder_cache -> state.select), so a select that left out one tensor
of a state would change the scores (checked by mutation)."""

import pytest
import torch
from tests.integrations._hf_models import transformers_or_skip  # noqa: E402

transformers_or_skip()

from tests.integrations._hf_models import tiny  # noqa: E402

from symformer.attention.favor_state import FavorState  # noqa: E402
from symformer.attention.plash_state import PlashState  # noqa: E402
from symformer.integrations import hf  # noqa: E402

OPTIONS = {
    "favor": {"n_features": 16, "chunk_size": 4, "seed": 0},
    "plash": {"M": 4, "D_k": 8, "causal_block": 3, "mixer_heads": 2, "seed": 0},
}
PROMPT, NEW, BEAMS = 5, 5, 3


def _beam_score_error(kind: str) -> float:
    model = hf.configure(tiny("llama", torch.float64, seed=0), attention=kind, **OPTIONS[kind])
    ids = torch.randint(1, 40, (2, PROMPT), generator=torch.Generator().manual_seed(3))
    res = model.generate(
        ids,
        max_new_tokens=NEW,
        num_beams=BEAMS,
        num_return_sequences=BEAMS,
        do_sample=False,
        length_penalty=0.0,  # the score is the plain sum of log-probabilities
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    seq = res.sequences
    assert seq.shape == (2 * BEAMS, PROMPT + NEW)
    with torch.no_grad():  # generate() takes each step's logits to float32 (and so its log-probabilities)
        logp = torch.log_softmax(model(seq).logits[:, PROMPT - 1 : -1].float(), dim=-1)
    steps = logp.gather(-1, seq[:, PROMPT:, None])[..., 0]
    full = torch.zeros(seq.shape[0])
    for t in range(NEW):  # beam search's running sum, in its order and dtype
        full = full + steps[:, t]
    return (res.sequences_scores.double() - full.double()).abs().max().item()


@pytest.mark.parametrize("kind", ["favor", "plash"])
def test_beam_scores_equal_the_full_forward(kind):
    assert _beam_score_error(kind) < 1e-10


def test_beam_search_sees_a_select_that_skips_a_tensor(monkeypatch):
    """Negative controls: FAVOR+'s select without c, PLASH's without the block rows kv."""

    def favor_select(self, index):
        if self.kvs is not None:
            self.kvs = self.kvs.index_select(0, index.to(self.kvs.device))

    monkeypatch.setattr(FavorState, "select", favor_select)
    monkeypatch.setattr(PlashState, "_FIELDS", tuple(f for f in PlashState._FIELDS if f != "kv"))
    assert _beam_score_error("favor") > 1e-6
    assert _beam_score_error("plash") > 1e-6
