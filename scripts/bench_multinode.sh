#!/usr/bin/env bash
# The multi-node measurements of docs/multinode.md, on the simulated cluster of network
# namespaces (scripts/with_test_cluster.sh; root only):
#   comm:    `loom bench comm` all-reduce, MPI's own vs the ring vs hierarchical (and auto), at
#            1 and 10 Gbit on 2 and 4 nodes x 1 rank, and 2 nodes x 2 ranks (hierarchical's case)
#   buckets: dp 2 over 2 nodes, the d_model-256 tiny model (13.1 MB of fp32 gradients): the
#            gradient reduction's time, the backward's, the exposed wait and the fraction hidden,
#            for 25 MiB buckets, 1 MiB and parallel.bucket_mb auto, runs alternated
#   scripts/bench_multinode.sh [comm|buckets|all] [ROUNDS]      (default: all 3)
# The machine is shared and noisy: each figure is printed per round; report min/median.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all} rounds=${2:-3}
loom=$(readlink -f "${LOOM:-build/loom}")
export OMP_NUM_THREADS=1 LOOM=$loom
cluster=scripts/with_test_cluster.sh

bench_comm() {  # NODES RANKS_PER_NODE RATE
  local gbps=${3%gbit}
  $cluster --nodes "$1" --rate "$3" --ranks-per-node "$2" -- sh -c \
    "\$CLUSTER_MPIRUN -np $(( $1 * $2 )) --map-by ppr:$2:node \"\$LOOM\" bench comm --ops all_reduce \
       --min-bytes 1048576 --max-bytes 67108864 --iters 5 --link-gbps $gbps"
}

if [ "$what" = comm ] || [ "$what" = all ]; then
  for round in $(seq "$rounds"); do
    for rate in 1gbit 10gbit; do
      for shape in "2 1" "4 1" "2 2"; do
        set -- $shape
        echo "== comm round $round: $1 nodes x $2 ranks, $rate"
        bench_comm "$1" "$2" "$rate"
      done
    done
  done
fi

if [ "$what" = buckets ] || [ "$what" = all ]; then
  bash scripts/prepare_fortunes.sh data/fortunes "$loom" > /dev/null
  for rate in 1gbit 10gbit; do
    for round in $(seq "$rounds"); do
      for bucket in 25 1 auto; do
        echo "== buckets round $round: $rate, parallel.bucket_mb=$bucket"
        $cluster --nodes 2 --rate "$rate" -- sh -c \
          "\$CLUSTER_MPIRUN -np 2 --map-by ppr:1:node \"\$LOOM\" train configs/tiny.yaml --set model.d_model=256 \
             --set train.micro_batch=8 --set train.global_batch=16 --set train.steps=14 --set log.every=1 \
             --set log.eval_every=0 --set log.dir=runs/bench-multinode --set parallel.bucket_mb=$bucket" |
          grep -E "gradient buckets:|not hidden" || true
        python3 - runs/bench-multinode/metrics.jsonl <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]  # steps 4..: after auto's re-plan
med = lambda k: st.median(r[k] for r in rows if k in r)
print(f"   reduction {med('grad_reduce_ms'):.0f} ms, backward {med('backward_ms'):.0f} ms, "
      f"exposed {med('comm_wait_ms'):.0f} ms, hidden {med('grad_reduce_hidden'):.2f}, {med('tokens_per_s'):.0f} tokens/s")
PY
        rm -rf runs/bench-multinode
      done
    done
  done
fi
