"""Run some of facts-hebbian's planned jobs (the same Job objects `reproduce` runs) into OUT/runs, resumable, in
the order given."""
import sys
from pathlib import Path
from symformer.experiments.facts_hebbian import plan as hp
from symformer.runner.jobs import run_jobs
out, keys = Path(sys.argv[1]), sys.argv[2:]
by = {j.key: j for j, _ in hp.jobs(hp.Plan.for_run(False), False, 0)}
for k in keys:  # one at a time: run_jobs's order is then the order given
    run_jobs([by[k]], out / "runs", 1, True, {}, print)
