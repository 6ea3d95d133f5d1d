"""Record the packing rows of the attention suite alone (the contribution, as the suite runs it)."""
import sys, time
from pathlib import Path
import torch
from symformer.benchmarks.attention_packing import packing_rows, document_lengths, DOC_TOKENS
from symformer.benchmarks.base import BenchContext, BenchResult
from symformer.benchmarks.report import write_bench
out = Path(sys.argv[1])
t0 = time.perf_counter()
ctx = BenchContext(out_dir=out, quick=True)
rows, ratios = packing_rows(ctx)
L = document_lengths(DOC_TOKENS, seed=ctx.seed)
res = BenchResult(rows=rows, ratios=ratios, notes=[
    "packing rows of the attention suite (benchmarks/attention_packing.py) run alone: packed_rows(ctx) with the suite's quick context",
    f"{len(L)} documents, lognormal lengths (median 200, sigma 1, 8..1024, seed 0), {DOC_TOKENS} tokens; the padded batch is {len(L)} x {max(L)} = {len(L)*max(L)} tokens"],
    config={"d_model": 256, "heads": 4, "dtype": "float32", "threads": torch.get_num_threads(), "lengths": L, "quick": True})
write_bench(out, "attention", True, res, "cpu", time.perf_counter() - t0)
print(ratios)
