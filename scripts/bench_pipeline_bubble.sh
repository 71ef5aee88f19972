#!/usr/bin/env bash
# The pipeline bubble: time per step of the bench-cpu model (6 blocks, 1 and 2 ... stages) at
# pp = 4 with m = 4, 8 and 16 micro-batches of the same size, next to the 1F1B model: a step
# takes (m + p - 1) micro-batch slots, so the time per micro-batch relative to m -> infinity is
# 1 + (p - 1)/m, and the bubble fraction is (p - 1)/(m + p - 1).
#   scripts/bench_pipeline_bubble.sh [STEPS]   (default 6; the first step is not timed)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
loom=${LOOM:-build/loom}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
scripts/prepare_fortunes.sh data/fortunes "$loom" >/dev/null
p=4
declare -A per_micro
for m in 4 8 16; do
  # Micro-batch of 2 sequences, so m micro-batches make a global batch of 2m.
  tps=$(mpirun -np $p --oversubscribe --bind-to none "$loom" train configs/tiny.yaml --set parallel.pp=$p \
        --set model.n_layer=8 --set train.micro_batch=2 --set train.global_batch=$((2 * m)) --set train.steps="$steps" \
        --set log.eval_every=0 --set log.dir=runs/bench-bubble |
        sed -nE 's/.*, ([0-9.]+) tokens\/s, gradient.*/\1/p')
  per_micro[$m]=$(python3 -c "print(2 * 64 / $tps * 1e3)")   # ms per micro-batch (2 x 64 tokens)
done
python3 - "${per_micro[4]}" "${per_micro[8]}" "${per_micro[16]}" <<'PY'
import sys
p = 4
t = dict(zip((4, 8, 16), map(float, sys.argv[1:])))
# The ideal (bubble-free) time per micro-batch, fitted from the model t(m) = t0 * (1 + (p-1)/m)
# at the largest m.
t0 = t[16] / (1 + (p - 1) / 16)
print(f"pp = {p}, tiny recipe widened to 8 blocks (2 per stage), micro-batch 2 x 64 tokens, 4 ranks on 2 cores")
print(f"{'m':>4s} {'ms/micro-batch':>15s} {'measured / t0':>14s} {'model 1+(p-1)/m':>16s} {'bubble (p-1)/(m+p-1)':>21s}")
for m in (4, 8, 16):
    print(f"{m:4d} {t[m]:15.2f} {t[m] / t0:14.3f} {1 + (p - 1) / m:16.3f} {(p - 1) / (m + p - 1):21.3f}")
PY
