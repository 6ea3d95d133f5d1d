"""Training on packed text (issue 61): paragraphs as documents, packed rows with their segment ids or padded rows
with the same targets; the packed loss equals the loss of the documents alone (no leak); `train --pack`."""

import torch
import torch.nn.functional as F

from symformer import cli
from symformer.data.text import document_starts, packed_rows, padded_rows
from symformer.models import CausalLM, TransformerConfig
from symformer.train.tasks import LanguageModeling

NL = 0
# paragraphs of 5, 9, 3 and 12 characters (the blank line, two newlines, ends each but the last)
TEXT = torch.tensor([3, 4, 5, NL, NL, 6, 7, 8, 9, 1, 2, 3, NL, NL, 5, NL, NL, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3])


def test_documents_start_after_blank_lines():
    starts = document_starts(TEXT, NL)
    assert torch.nonzero(starts).flatten().tolist() == [0, 5, 14, 17]
    assert torch.nonzero(document_starts(TEXT, None)).flatten().tolist() == [0]


def test_packed_and_padded_rows_hold_the_same_targets():
    starts = document_starts(TEXT, NL)
    packed, padded = packed_rows(TEXT, starts, 9), padded_rows(TEXT, starts, 9)
    assert packed.x.shape == (3, 9) and packed.segments.shape == (3, 9)
    pairs = {(int(x), int(y)) for x, y in zip(packed.x.flatten(), packed.y.flatten()) if y != -100}
    pairs_padded = {(int(x), int(y)) for x, y in zip(padded.x.flatten(), padded.y.flatten()) if y != -100}
    assert pairs <= pairs_padded
    # no target across a document boundary: the last character of a paragraph predicts nothing
    assert packed.y[0, 4] == -100 and (packed.segments[0, 4] != packed.segments[0, 5])


def test_packed_loss_equals_the_loss_of_the_documents_alone():
    starts = document_starts(TEXT, NL)
    data = packed_rows(TEXT, starts, 27)  # one row of all four paragraphs
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=2, attention="plash", attention_kwargs={"causal_block": 4})
    lm = CausalLM(cfg, vocab_size=10).double().eval()
    with torch.no_grad():
        packed = LanguageModeling().loss(lm, data, torch.tensor([0]))
        seg, tot, n = data.segments[0], 0.0, 0
        for d in seg.unique():
            keep = seg == d
            logits = lm(data.x[0, keep][None])
            y = data.y[0, keep]
            tot += float(F.cross_entropy(logits[0], y, ignore_index=-100, reduction="sum"))
            n += int((y != -100).sum())
        unpacked = LanguageModeling().loss(lm, type(data)(data.x, data.y), torch.tensor([0]))  # negative control
    assert abs(float(packed) - tot / n) <= 1e-6  # the task's cross-entropy runs in float32
    assert abs(float(unpacked) - tot / n) > 1e-3


def test_train_pack_is_for_text_presets(capsys, tmp_path):
    code = cli.main(["train", "--preset", "digits-vit", "--pack", "--out", str(tmp_path / "o")])
    assert code == 2 and "--pack" in capsys.readouterr().err
