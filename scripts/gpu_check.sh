#!/usr/bin/env bash
# Everything the CUDA backend owes a lent GPU machine, in three stages that each fit one call of
# the device tool (10 minutes), run in this order on the same warm machine:
#   scripts/gpu_check.sh build   # build-gpu/ by scripts/build_cuda_ops.sh (toolkit, Eigen, Catch2)
#   scripts/gpu_check.sh test    # every CUDA op vs the CPU, compute-sanitizer, 50 steps vs the CPU
#   scripts/gpu_check.sh bench   # per-op times vs PyTorch; GPT-2 124M tokens/s and MFU vs PyTorch
# Each command's output goes to $OUT/<stage>-<name>.log (OUT: the device tool's folder that comes
# back; ./gpu-logs elsewhere) and one line per command, with its exit status and seconds, to
# $OUT/summary.txt. A stage runs all its commands even when one fails, then exits 1 if any did.
# With `--deps DIR` the build uses a prefix made by `scripts/build_cuda_ops.sh --make-deps DIR`
# (default .devcarry/prefix when it exists; the device tool must be told to carry it). ROUNDS
# (default 2) sets how many times the GPT-2 runs alternate between Loom and PyTorch; PRECISIONS
# (default "bf16"; "fp32 bf16" for both) which precisions they use.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: scripts/gpu_check.sh build|test|bench [--deps DIR]}
shift
deps=
[ -d .devcarry/prefix ] && deps=.devcarry/prefix
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=${2:?--deps DIR}; shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PATH="$PATH:/usr/local/cuda/bin"  # nvcc and compute-sanitizer
out=${OUT:-gpu-logs}
mkdir -p "$out"
bin=${LOOM_BUILD_DIR:-build-gpu}/tests
failed=0 saved_failed=0

# step NAME COMMAND...: runs the command, its output into $out/$stage-NAME.log (and the tail on
# the terminal), and records the exit status and the time. info NAME COMMAND...: the same, but its
# failure does not fail the stage (what the machine has).
summary() { echo "== summary ($out/summary.txt)"; cat "$out/summary.txt"; }
info() { step "$@" || true; failed=$saved_failed; }
step() {
  saved_failed=$failed
  local name=$1; shift
  local log="$out/$stage-$name.log" t0=$SECONDS rc
  echo "== $stage/$name: $*"
  { echo "# $(date -u +%FT%TZ) $*"; "$@"; } >"$log" 2>&1
  rc=$?
  tail -n 25 "$log"
  printf '%-8s %-34s rc %-3s %5ss  %s\n' "$stage" "$name" "$rc" "$((SECONDS - t0))" "$*" >>"$out/summary.txt"
  [ $rc = 0 ] || failed=1
  return $rc
}

case $stage in
  build)
    info machine bash -c 'nvidia-smi; nvcc --version; compute-sanitizer --version | head -2; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"'
    step build scripts/build_cuda_ops.sh ${deps:+--deps "$deps"} || { summary; exit 1; }
    ;;
  test)
    step test_cuda_ops "$bin/test_cuda_ops"
    step test_cuda_flash_attention "$bin/test_cuda_flash_attention"
    step debug_sync_check env LOOM_CUDA_SYNC_CHECK=1 "$bin/test_cuda_ops"
    step memcheck compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$bin/test_cuda_ops"
    # Catch2 test specs: one argument, comma = or (the kernels with shared memory or device-built
    # buckets; the flash-attention kernels last, the slowest under racecheck).
    step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_cuda_ops" \
      "CUDA encoder*,CUDA layernorm*,CUDA reductions*,CUDA fused softmax*,CUDA dequantize*,CUDA KV-cache*"
    step initcheck compute-sanitizer --tool initcheck --error-exitcode 9 "$bin/test_cuda_ops" "CUDA encoder*"
    step memcheck_flash compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_cuda_flash_attention"
    step train_vs_cpu_50 "$bin/compare_cuda_training" README.md 50
    step train_vs_cpu_50_flash "$bin/compare_cuda_training" README.md 50 full 2
    step racecheck_flash compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_cuda_flash_attention"
    ;;
  bench)
    step ops_loom "$bin/bench_cuda_ops"
    step ops_torch python3 scripts/torch_ops_bench.py
    # GPT-2 124M at configs/gpt2-124m.yaml's micro-batch (16 x 1024), alternated with PyTorch on
    # the same shape; PyTorch's MFU uses the peak Loom reports, so both divide by the same figure.
    for p in ${PRECISIONS:-bf16}; do
      for r in $(seq 1 "${ROUNDS:-2}"); do
        step "gpt2_loom_${p}_$r" "$bin/bench_gpt_training" --precision "$p"
        peak=$(sed -n 's/.*peak \([0-9.]*\) TFLOP\/s.*/\1/p' "$out/bench-gpt2_loom_${p}_$r.log")
        step "gpt2_torch_${p}_$r" python3 scripts/torch_gpt_cuda_bench.py --precision "$p" ${peak:+--peak_tflops "$peak"}
        step "gpt2_torch_compile_${p}_$r" python3 scripts/torch_gpt_cuda_bench.py --precision "$p" --compile \
          ${peak:+--peak_tflops "$peak"}
      done
    done
    grep -h '^loom \|^torch ' "$out"/bench-gpt2_*.log >"$out/gpt2_report_lines.txt" 2>/dev/null
    ;;
  *) echo "gpu_check.sh: stage must be build, test or bench, not '$stage'" >&2; exit 2 ;;
esac
summary
exit $failed
