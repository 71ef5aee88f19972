#!/usr/bin/env bash
# Everything the CUDA backend owes a lent GPU machine, in priority order, in one call of the
# device tool (as 2026-11-26's two calls ran it: build ~70 s, the whole list ~5 minutes):
#   scripts/gpu_check.sh all [SECONDS]     # build, then tests, benchmarks, sanitizers
#   scripts/gpu_check.sh build|test|bench  # one stage of the list
# Each step's output goes to build-gpu/gpu-logs/<step>.log and one line per step (exit status,
# seconds) to summary.txt there; after every step the folder is packed into $OUT/gpu-logs.tgz and
# summary.txt copied to $OUT (the device tool brings back at most 8 files: one log per step would
# not fit). Without $OUT (not under the device tool) only build-gpu/gpu-logs is written.
# SECONDS (default 540) is a deadline: a step that would need more than what is left is skipped
# (and says so in the summary), and every step has its own time limit, so a hung command cannot
# eat the call. A step already run on this machine for the same sources (its exit status in
# build-gpu/gpu-logs/<hash of the sources>/done/<step>) is not run again, so a second call on the
# same warm machine carries on where the first stopped; changed sources start afresh. A step cut
# short by the deadline is not counted as run. The exit status is 1 if any step of the stages
# asked for failed, in this call or an earlier one on the same sources, or has not run yet.
# With `--deps DIR` the build uses a prefix made by `scripts/build_cuda_ops.sh --make-deps DIR`
# (default .devcarry/prefix when it exists; the device tool must be told to carry it).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: scripts/gpu_check.sh all|build|test|bench [SECONDS] [--deps DIR]}
shift
deadline=540
deps=
[ -d .devcarry/prefix ] && deps=.devcarry/prefix
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=${2:?--deps DIR}; shift 2 ;;
    [0-9]|[1-9][0-9]*) deadline=$1; shift ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $stage in all|build|test|bench) ;; *) echo "gpu_check.sh: stage must be all, build, test or bench, not '$stage'" >&2; exit 2 ;; esac
export PATH="$PATH:/usr/local/cuda/bin"  # nvcc and compute-sanitizer
build=${LOOM_BUILD_DIR:-build-gpu}
# The sources this call checks (the device tool copies the working tree without .git).
key=$(find CMakeLists.txt kernels engine parallel tests scripts -type f -print0 2>/dev/null | sort -z |
  xargs -0 cat | sha1sum | cut -c1-12)
logs=$build/gpu-logs/$key bin=$build/tests
mkdir -p "$logs/done"
t_start=$SECONDS

pack() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu-logs.tgz.tmp" -C "$build" "gpu-logs/$key" && mv "$OUT/gpu-logs.tgz.tmp" "$OUT/gpu-logs.tgz"
  cp "$logs/summary.txt" "$OUT/summary.txt" 2>/dev/null || true
}
# step STAGE NAME LIMIT NEED COMMAND...: runs COMMAND under a LIMIT-second timeout when this call
# runs STAGE and at least NEED seconds are left; its output to the step's log, the tail shown, its
# exit status to done/NAME. Returns that status (0 when not run).
asked=()  # the steps of the stages this call runs
step() {
  local st=$1 name=$2 limit=$3 need=$4; shift 4
  [ "$stage" = all ] || [ "$stage" = "$st" ] || return 0
  asked+=("$name")
  [ -e "$logs/done/$name" ] && return 0
  local left=$((deadline - (SECONDS - t_start))) cut=0
  if [ $left -lt "$need" ]; then
    printf '%-30s skipped: %ss left\n' "$name" "$left" >>"$logs/summary.txt"
    return 0
  fi
  [ "$limit" -gt $left ] && limit=$left cut=1
  local t0=$SECONDS rc
  echo "== $name ($limit s): $*"
  { echo "# $(date -u +%FT%TZ) $*"; timeout -k 5 "$limit" "$@"; } >"$logs/$name.log" 2>&1
  rc=$?
  tail -n 8 "$logs/$name.log"
  printf '%-30s rc %-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$*" >>"$logs/summary.txt"
  if [ $cut = 1 ] && { [ $rc = 124 ] || [ $rc = 137 ]; }; then
    echo "(cut short by the deadline: not counted as run)" >>"$logs/summary.txt"
  else
    echo $rc >"$logs/done/$name"
  fi
  pack
  return $rc
}
peak() { sed -n 's/.*peak \([0-9.]*\) TFLOP\/s.*/\1/p' "$logs/gpt2_loom_bf16.log" 2>/dev/null | head -1; }

# What the machine has: its failure fails nothing (informational).
step build machine 30 10 bash -c 'nvidia-smi; nvcc --version; compute-sanitizer --version | head -2; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"' || true
[ -e "$logs/done/machine" ] && echo 0 >"$logs/done/machine"
if ! step build build 400 60 scripts/build_cuda_ops.sh ${deps:+--deps "$deps"} ||
  { [ "$stage" != build ] && [ "$(cat "$logs/done/build" 2>/dev/null)" != 0 ]; }; then
  echo "gpu_check.sh: the build of these sources failed or has not run (build-gpu/gpu-logs/$key/build.log)"
  pack
  exit 1
fi
# Correctness first: every op vs the CPU, then 50 training steps vs the CPU (row attention at 4
# heads; flash attention at 2 heads, head size 64), exit 1 past 1e-4 (fp32) or 1e-2 (bf16).
step test test_cuda_ops 90 20 "$bin/test_cuda_ops"
step test test_cuda_flash_attention 90 20 "$bin/test_cuda_flash_attention"
step test train_vs_cpu_50 120 40 "$bin/compare_cuda_training" README.md 50
step test train_vs_cpu_50_flash 120 40 "$bin/compare_cuda_training" README.md 50 full 2
# LayerNorm's `vector` backward kernels (written without a GPU; test_cuda_ops covers both kernel
# sets op by op): the same 50 steps on them.
step test train_vs_cpu_50_ln_vector 120 40 env LOOM_CUDA_LAYERNORM_BACKWARD=vector "$bin/compare_cuda_training" README.md 50
# Speed: per-op times vs PyTorch; GPT-2 124M at configs/gpt2-124m.yaml's micro-batch (16 x 1024),
# Loom alternated with PyTorch (eager, then torch.compile), PyTorch's MFU against Loom's peak;
# one run without the GELU epilogues (their effect on the same machine), one on LayerNorm's
# `vector` backward kernels; a per-op profile of each.
step bench ops_loom 60 20 "$bin/bench_cuda_ops"
step bench ops_torch 60 20 python3 scripts/torch_ops_bench.py
step bench gpt2_loom_bf16 90 20 "$bin/bench_gpt_training" --precision bf16
p=$(peak)
step bench gpt2_loom_bf16_ln_vector 90 20 env LOOM_CUDA_LAYERNORM_BACKWARD=vector "$bin/bench_gpt_training" --precision bf16
step bench gpt2_torch_bf16 90 30 python3 scripts/torch_gpt_cuda_bench.py --precision bf16 ${p:+--peak_tflops "$p"}
step bench gpt2_loom_bf16_no_gelu_epilogue 90 20 env LOOM_CUDA_GELU_EPILOGUE=0 "$bin/bench_gpt_training" --precision bf16
step bench gpt2_loom_bf16_2 90 20 "$bin/bench_gpt_training" --precision bf16
step bench gpt2_torch_compile_bf16 150 60 python3 scripts/torch_gpt_cuda_bench.py --precision bf16 --compile \
  ${p:+--peak_tflops "$p"}
step bench gpt2_loom_bf16_profile 90 20 "$bin/bench_gpt_training" --precision bf16 --profile 1 --steps 10
step bench gpt2_loom_bf16_profile_ln_vector 90 20 env LOOM_CUDA_LAYERNORM_BACKWARD=vector \
  "$bin/bench_gpt_training" --precision bf16 --profile 1 --steps 10
# Sanitizers and the debugging mode (racecheck on the kernels with shared memory or device-built
# buckets; the flash-attention kernels last, the slowest under racecheck).
step test memcheck 150 30 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$bin/test_cuda_ops"
step test debug_sync_check 60 15 env LOOM_CUDA_SYNC_CHECK=1 "$bin/test_cuda_ops"
step test racecheck 200 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_cuda_ops" \
  "CUDA encoder*,CUDA layernorm*,CUDA reductions*,CUDA fused softmax*,CUDA 16-bit: softmax*,CUDA 16-bit: matmul + GELU*,CUDA dequantize*,CUDA KV-cache*"
step test initcheck 100 30 compute-sanitizer --tool initcheck --error-exitcode 9 "$bin/test_cuda_ops" "CUDA encoder*"
step test memcheck_flash 120 20 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_cuda_flash_attention"
step bench gpt2_loom_fp32 60 20 "$bin/bench_gpt_training" --precision fp32
step bench gpt2_loom_bf16_3 60 15 "$bin/bench_gpt_training" --precision bf16
step test racecheck_flash 200 70 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_cuda_flash_attention"
grep -h '^loom \|^torch ' "$logs"/gpt2_*.log >"$logs/gpt2_report_lines.txt" 2>/dev/null
# The verdict over every step asked for, this call's and earlier calls' on the same sources.
failed=0 missing=()
for name in "${asked[@]}"; do
  if [ ! -e "$logs/done/$name" ]; then missing+=("$name")
  elif [ "$(cat "$logs/done/$name")" != 0 ]; then failed=1; fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "not run yet (call again on the warm machine): ${missing[*]}" >>"$logs/summary.txt"
  failed=1
fi
pack
echo "== summary ($logs/summary.txt)"
cat "$logs/summary.txt" 2>/dev/null
exit $failed
