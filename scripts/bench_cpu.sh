#!/usr/bin/env bash
# CPU training throughput at fp32 and at bf16 (bf16 compute, fp32 master weights): Loom against
# PyTorch (bf16 = torch.autocast) on the same model shape and the same threads, next to the
# measured gemm rate of each dtype (the ceiling for model FLOP/s). The machine is shared and noisy,
# so the four variants run alternately, ROUNDS times, and the table gives min and median.
#   [ROUNDS=3] [LOOM=build/loom] [RUN_TIMEOUT=600] scripts/bench_cpu.sh [THREADS]   (default: all cores)
# Needs scripts/setup.sh --dev (PyTorch) and a build (scripts/build.sh). A variant that fails (a
# Loom without bf16 kernels, a binary whose `bench gemm` has no --dtype) is reported in the table
# and the rest still run. Each invocation writes a new directory runs/bench-cpu/STAMP/ (nothing
# earlier is touched): every run's output in logs/, the raw figures in results.tsv;
# scripts/bench_precision_table.py turns those into the table.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
rounds=${ROUNDS:-3}
run_timeout=${RUN_TIMEOUT:-600}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
loom=${LOOM:-build/loom}
scripts/prepare_fortunes.sh data/fortunes "$loom" >/dev/null
out=runs/bench-cpu/$(date -u +%Y%m%dT%H%M%SZ)
results=$out/results.tsv
mkdir -p runs/bench-cpu
mkdir "$out" && mkdir "$out/logs"  # fails rather than reuse a directory started the same second
: >"$results"
# The shape of configs/bench-cpu.yaml, for PyTorch.
shape=(--n_layer 6 --n_head 6 --d_model 384 --seq_len 256 --batch 8 --vocab 257)

# One record per line of results.tsv: tab-separated key=value fields.
record() { (IFS=$'\t'; echo "$*") >>"$results"; }
# Why the run logged in $1 failed with status $2, on one line: its last error-looking line (else
# its last line) and the status.
why() {
  local line
  line=$(grep -iE 'error|not expected|unknown|not supported|unsupported|exception|abort' "$1" | tail -1 || true)
  [ -n "$line" ] || line=$(tail -1 "$1")
  [ "$2" = 124 ] && line="timed out after ${run_timeout} s"
  printf '%s (exit %s)' "$line" "$2" | tr '\t\n' '  '
}
# Runs "$@" with its output in the log $1; sets rc.
run_logged() { local log=$1; shift; rc=0; timeout "$run_timeout" "$@" >"$log" 2>&1 || rc=$?; }

gemm() {  # DTYPE ROUND: loom bench gemm's rate (n=2048, best of 5 repetitions)
  local log=$out/logs/gemm-$1-r$2.log dtype_arg=()
  [ "$1" = fp32 ] || dtype_arg=(--dtype "$1")
  run_logged "$log" "$loom" bench gemm "${dtype_arg[@]}" -n 2048 --reps 5
  local gflops
  gflops=$(sed -nE 's/.*: ([0-9.]+) GFLOP\/s.*/\1/p' "$log" | tail -1)
  if [ "$rc" = 0 ] && [ -n "$gflops" ]; then
    record "gemm=$1" "round=$2" "status=ok" "gflops=$gflops"
  else
    record "gemm=$1" "round=$2" "status=fail" "note=$(why "$log" "$rc")"
  fi
}

loom_train() {  # PRECISION ROUND: tokens/s from the final "loom: trained" line, memory from rank 0's
  local log=$out/logs/loom-$1-r$2.log
  run_logged "$log" "$loom" train configs/bench-cpu.yaml --set train.precision="$1" --set log.dir="$out/loom-$1"
  local tps mem
  tps=$(sed -nE 's/^loom: trained .*, ([0-9.]+) tokens\/s,.*/\1/p' "$log")
  mem=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["sessions"][-1]["memory_end"][0]
print("act_mb=%s\tpeak_rss_mb=%s" % (r["activations_mb"], r["peak_rss_mb"]))' "$out/loom-$1/run.json" 2>/dev/null || true)
  if [ "$rc" = 0 ] && [ -n "$tps" ]; then
    record "variant=loom-$1" "round=$2" "status=ok" "tokens_per_s=$tps" "$mem"
  else
    record "variant=loom-$1" "round=$2" "status=fail" "note=$(why "$log" "$rc")"
  fi
}

torch_train() {  # PRECISION ROUND: tokens/s and peak RSS from torch_gpt_bench.py's final line
  local log=$out/logs/torch-$1-r$2.log
  run_logged "$log" /usr/bin/python3 scripts/torch_gpt_bench.py "${shape[@]}" --steps 10 --warmup 2 \
    --threads "$threads" --precision "$1"
  local last tps rss
  last=$(tail -1 "$log")
  tps=$(sed -nE 's/^torch .*tokens_per_s=([0-9.]+).*/\1/p' <<<"$last")
  rss=$(sed -nE 's/^torch .*peak_rss_mb=([0-9.]+).*/\1/p' <<<"$last")
  if [ "$rc" = 0 ] && [ -n "$tps" ]; then
    record "variant=torch-$1" "round=$2" "status=ok" "tokens_per_s=$tps" "peak_rss_mb=$rss"
  else
    record "variant=torch-$1" "round=$2" "status=fail" "note=$(why "$log" "$rc")"
  fi
}

# The 1-minute load average around the runs: a loaded machine explains slow, scattered figures.
record "load=start" "avg1=$(cut -d' ' -f1 /proc/loadavg)" "cores=$(nproc)"
for r in $(seq "$rounds"); do
  echo "bench_cpu: round $r of $rounds ($threads threads)" >&2
  gemm fp32 "$r"
  gemm bf16 "$r"
  loom_train fp32 "$r"
  loom_train bf16 "$r"
  torch_train fp32 "$r"
  torch_train bf16 "$r"
  tail -n 6 "$results" | sed 's/^/bench_cpu:   /' | tr '\t' ' ' >&2
done
record "load=end" "avg1=$(cut -d' ' -f1 /proc/loadavg)" "cores=$(nproc)"
python3 scripts/bench_precision_table.py "$results" --threads "$threads"
