"""Packing rows of the `attention` suite (issue 61): long-tailed document lengths of 8192 tokens, the two ratio names
(no timing asserts: the timed calls are replaced here)."""

from symformer.benchmarks import attention_packing as ap
from symformer.benchmarks._attention_common import CONTRIBUTIONS
from symformer.benchmarks.base import BenchContext


def test_documents_are_long_tailed_and_sum_to_8192():
    lengths = ap.document_lengths()
    assert sum(lengths) == ap.DOC_TOKENS and len(lengths) > 10
    assert max(lengths) > 4 * sorted(lengths)[len(lengths) // 2]  # the longest several times the median
    assert ap.document_lengths() == lengths  # fixed seed


def test_ratio_names(monkeypatch, tmp_path):
    assert ap.packing_rows in CONTRIBUTIONS

    def packed():
        return None

    def padded():
        return None

    monkeypatch.setattr(ap, "_calls", lambda core, lengths, device: (packed, padded, 100))
    monkeypatch.setattr(ap, "one_call_seconds", lambda fn, device: {packed: 1.0, padded: 4.0}[fn])
    monkeypatch.setattr(ap, "_cores", lambda device: {"favor": None, "plash": None})
    rows, ratios = ap.packing_rows(BenchContext(out_dir=tmp_path))
    assert ratios == {"packed_vs_padded_train_step[favor]": 0.25, "packed_vs_padded_train_step[plash]": 0.25}
    assert {r["method"] for r in rows} == {"favor_packed", "favor_padded", "plash_packed", "plash_padded"}
