"""Speed of facts.gd_batch.train_mlps against train_mlp one model at a time: the 10 models of a GD search's first round
at d = 32, F = 256, 300 epochs, both protocols, interleaved in one process (PROVENANCE.md quotes its output)."""
import time, torch
from symformer.facts.embeddings import make_fact_set
from symformer.facts import baselines
from symformer.facts.gd_batch import train_mlps
fss = [make_fact_set(256, 32, seed=s) for s in range(2)]
ws = [6, 8, 11, 16, 22] * 2
seeds = [i // 5 for i in range(10)]
E = 300
for rep in range(2):
  for act, bias, cut in (("silu", True, None), ("linear", False, 1e-7)):
    t = time.perf_counter()
    for h, s in zip(ws, seeds):
        baselines.train_mlp(fss[s].keys.double(), fss[s].values.double(), fss[s].facts, h, act, E, seed=s, bias=bias, loss_cutoff=cut)
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    train_mlps([fss[s] for s in seeds], ws, act, E, seeds=seeds, bias=bias, loss_cutoff=cut)
    t2 = time.perf_counter() - t
    print(f"rep {rep} {act}: 10 x train_mlp {t1:.2f} s, train_mlps {t2:.2f} s, ratio {t1/t2:.2f}")
