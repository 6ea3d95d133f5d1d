#!/usr/bin/env bash
# Packed vs padded training of shakespeare-char (issue 61): FAVOR+ and PLASH, seeds 0 and 1, 3 epochs on the first
# 120k characters; four runs at a time, niced, one thread each. OUT defaults to results/packing/runs.
set -euo pipefail
OUT=${OUT:-results/packing/runs}
mkdir -p "$OUT"
run() {  # attention layout seed
  local name="$1-$2-s$3" flag="--pack"
  [ "$2" = padded ] && flag="--set data.layout=padded"
  # packed rows are 1687 against 2087 padded ones: batch 26 gives 65 steps per epoch (padded: 66 at batch 32)
  [ "$2" = packedsteps ] && flag="--pack --set train.batch_size=26"
  [ -f "$OUT/$name/results.json" ] && return 0  # resume: a finished run is kept
  OMP_NUM_THREADS=1 nice -n 10 /usr/bin/time -f '{"user_s": %U, "sys_s": %S, "wall_s": %e}' -o "$OUT/$name.time.json" \
    symformer train --preset shakespeare-char $flag --set model.attention="$1" --set train.epochs=3 \
    --set data.max_chars=120000 --seed "$3" --out "$OUT/$name" > "$OUT/$name.log" 2>&1
}
for seed in 0 1; do
  for attn in favor plash; do
    run "$attn" packed "$seed" &
    run "$attn" padded "$seed" &
  done
  wait
done
# the same number of optimizer steps per epoch as padded (added after the first eight runs)
for attn in favor plash; do
  for seed in 0 1; do
    run "$attn" packedsteps "$seed" &
  done
done
wait
