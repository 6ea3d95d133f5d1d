#!/bin/bash
# interleaved rounds of reproduce teleport --quick: local, ray, submitit
cd /work/wt-prec
export PYTHONPATH=/work/wt-prec/src SYMFORMER_SUBMITIT_CLUSTER=local
for round in 1 2 3; do
  for ex in local ray submitit; do
    out=/tmp/prec_bench/out-$ex-$round
    rm -rf $out
    t0=$(date +%s.%N)
    nice -n 5 /work/main/.venv/bin/python -m symformer.cli reproduce teleport --quick --jobs 2 --executor $ex --out $out > $out.log 2>&1
    rc=$?
    t1=$(date +%s.%N)
    st=$(grep -o "started in [0-9.]*" $out.log | awk '{print $3}')
    echo "$round $ex rc=$rc wall=$(echo "$t1 - $t0" | bc) startup=${st:-0} at $(date +%T)" >> /tmp/prec_bench/times.txt
  done
done
echo finished >> /tmp/prec_bench/times.txt
