#!/usr/bin/env bash
# How much of the data-parallel gradient reduction hides behind backward: for the tiny and the
# bench-cpu model at dp=2, the reduction time left exposed after backward with overlap on,
# against the same with overlap off (every bucket launched after backward, so all of it is
# exposed). hidden = 1 - exposed(on) / exposed(off).
#   scripts/bench_dp_overlap.sh [STEPS]    (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
loom=${LOOM:-build/loom}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
scripts/prepare_fortunes.sh data/fortunes "$loom" >/dev/null
run() {  # recipe overlap extra... -> "exposed_ms_per_step tokens_per_s"
  mpirun -np 2 --oversubscribe --bind-to none "$loom" train "$1" --set train.steps="$steps" --set log.eval_every=0 \
    --set parallel.overlap_grad_reduce="$2" --set log.dir="runs/bench-overlap" "${@:3}" |
    sed -nE "s/.*, ([0-9.]+) tokens\/s, gradient reduction not hidden: ([0-9.]+) ms in all.*/\2 \1/p" |
    awk -v s="$steps" '{printf "%.2f %.0f\n", $1 / s, $2}'
}
printf "%-10s %9s %9s %14s %14s %8s %12s %12s\n" model "L x C" buckets "exposed off" "exposed on" hidden "tok/s off" "tok/s on"
# bench-cpu at dp=2 keeps micro_batch 8, so its global batch doubles to 16.
for spec in "tiny configs/tiny.yaml 0.25 --set train.global_batch=32" \
            "bench-cpu configs/bench-cpu.yaml 4 --set train.global_batch=16"; do
  set -- $spec
  read -r off off_tps < <(run "$2" false --set parallel.bucket_mb="$3" "${@:4}")
  read -r on on_tps < <(run "$2" true --set parallel.bucket_mb="$3" "${@:4}")
  shape=$("$loom" config "$2" | sed -nE 's/^  (n_layer|d_model): ([0-9]+)/\2/p' | paste -sd'x')
  python3 -c "
off, on = $off, $on
print(f'{\"$1\":10s} {\"$shape\":>9s} {\"$3 MB\":>9s} {off:11.2f} ms {on:11.2f} ms {100*(1-on/off) if off>0 else 0:7.1f}% {$off_tps:12.0f} {$on_tps:12.0f}')"
done
