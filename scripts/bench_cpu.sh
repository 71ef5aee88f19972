#!/usr/bin/env bash
# CPU training throughput, Loom against PyTorch on the same model shape and the same threads,
# next to the machine's sgemm rate (the ceiling for model FLOP/s).
#   scripts/bench_cpu.sh [THREADS]     (default: all cores)
# Needs scripts/setup.sh --dev (PyTorch) and a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
loom=${LOOM:-build/loom}
scripts/prepare_fortunes.sh data/fortunes "$loom" >/dev/null
shape="--n_layer 6 --n_head 6 --d_model 384 --seq_len 256 --batch 8 --vocab 257"

gemm=$("$loom" bench gemm -n 2048 --reps 5 | sed -E 's/.*: ([0-9.]+) GFLOP.*/\1/')
out=$("$loom" train configs/bench-cpu.yaml --set log.dir=runs/bench-cpu)
loom_tps=$(sed -nE 's/^loom: trained .*, ([0-9.]+) tokens\/s,.*/\1/p' <<<"$out")
torch_line=$(/usr/bin/python3 scripts/torch_gpt_bench.py $shape --steps 10 --warmup 2 --threads "$threads" | tail -1)
torch_tps=$(sed -nE 's/.*tokens_per_s=([0-9.]+).*/\1/p' <<<"$torch_line")
# Model FLOPs per token, 6N + 12 L C T (docs/model.md): N = 12 L C^2 + V C.
python3 - "$gemm" "$loom_tps" "$torch_tps" "$threads" <<'PY'
import sys
gemm, loom, torch, threads = float(sys.argv[1]) * 1e9, float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
L, C, T, V = 6, 384, 256, 257
flops_tok = 6 * (12 * L * C * C + V * C) + 12 * L * C * T
print(f"model L6 H6 D384 T256 B8 V257, {threads} threads, {flops_tok / 1e6:.1f} MFLOP/token")
print(f"{'':8s} {'tokens/s':>10s} {'GFLOP/s':>9s} {'of sgemm':>9s}")
for name, tps in (("loom", loom), ("pytorch", torch)):
    print(f"{name:8s} {tps:10.0f} {tps * flops_tok / 1e9:9.1f} {100 * tps * flops_tok / gemm:8.1f}%")
print(f"sgemm    {'':10s} {gemm / 1e9:9.1f}   (n=2048, best of 5)")
print(f"loom / pytorch = {loom / torch:.2f}x")
PY
