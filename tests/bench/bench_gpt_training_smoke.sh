#!/usr/bin/env bash
# bench_gpt_training on a tiny shape on the CPU, fp32 and bf16: every step's loss is finite and
# near ln V (the tokens are random and fresh each step, so there is nothing to learn), the report
# line is complete and consistent (tokens/s = tokens per step / step time, 0 < MFU < 1, the
# parameter count of the shape), and bad flags are refused with a message naming them.
# `--backend cuda` runs where a device is usable and exits 77 (a skip) with the reason elsewhere.
set -euo pipefail
bench=${1:?usage: bench_gpt_training_smoke.sh BENCH_BINARY}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

for p in fp32 bf16; do
  "$bench" --backend cpu --precision $p --layers 2 --heads 2 --d_model 64 --vocab 300 --seq 32 --batch 2 \
    --accum 2 --steps 3 --warmup 1 >"$out" 2>&1 || fail "$p run exited $?"
  line=$(grep '^loom ' "$out") || fail "$p: no report line"
  python3 - "$line" "$p" <<'PY' || fail "$p: report line out of range"
import math, sys
line, p = sys.argv[1], sys.argv[2]
kv = dict(f.split("=", 1) for f in line.split()[1:])
need = ["tokens_per_s", "tokens_per_s_max", "step_ms", "mfu", "device_mem_mb", "precision", "params"]
missing = [k for k in need if k not in kv]
assert not missing, f"missing {missing}"
tps, best, ms, mfu = (float(kv[k]) for k in ["tokens_per_s", "tokens_per_s_max", "step_ms", "mfu"])
assert tps > 0 and best >= tps and ms > 0, (tps, best, ms)
assert abs(tps - 2 * 2 * 32 / (ms / 1e3)) / tps < 1e-3, "tokens/s is not tokens per step / step time"
assert 0 < mfu < 1, mfu
assert kv["precision"] == p and float(kv["device_mem_mb"]) == -1.0
# 2 layers of C 64, V 300 padded to 384, T 32: wte 384*64 + wpe 32*64 + 2 blocks + ln_f.
C, L = 64, 2
block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
assert int(kv["params"]) == 384 * C + 32 * C + L * block + 2 * C, kv["params"]
PY
  steps=$(grep -c '^step ' "$out")
  [ "$steps" = 3 ] || fail "$p: $steps timed steps printed, expected 3"
  python3 - "$out" <<'PY' || fail "$p: a loss is not near ln 300 = 5.70 for random tokens"
import math, re, sys
losses = [float(m) for m in re.findall(r"^step +\d+ +loss ([0-9.]+)", open(sys.argv[1]).read(), re.M)]
assert losses and all(abs(x - math.log(300)) < 0.5 for x in losses), losses
PY
done

# --profile 1: the per-op table over the timed steps (every op a row, a total), and no figures
# line, since a synchronised run's step times are not the benchmark's.
"$bench" --backend cpu --precision fp32 --layers 2 --heads 2 --d_model 64 --vocab 300 --seq 32 --batch 2 \
  --steps 2 --warmup 1 --profile 1 >"$out" 2>&1 || fail "--profile 1 run exited $?"
grep -q '^ops over the 2 timed steps' "$out" || fail "--profile 1: no op table"
# 2 layers: qkv, attention proj and MLP proj per layer, and the lm head: 7 plain forward matmuls
# a step; the fc layer and its GELU are one op (matmul_gelu_forward), once per layer.
grep -Eq '^matmul_forward +14 ' "$out" || fail "--profile 1: matmul_forward not counted 14 times over 2 steps"
grep -Eq '^matmul_gelu_forward +4 ' "$out" || fail "--profile 1: matmul_gelu_forward not counted 4 times over 2 steps"
grep -Eq '^total +[0-9.]+$' "$out" || fail "--profile 1: no total"
! grep -q '^loom ' "$out" || fail "--profile 1 printed the figures line"
set +e
"$bench" --backend cpu --batch 0 >"$out" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--batch expects a positive integer, got '0'" "$out" || fail "--batch 0: rc $rc"
set +e
"$bench" --backend cpu --warmup abc >"$out" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--warmup expects a non-negative integer, got 'abc'" "$out" || fail "--warmup abc: rc $rc"
set +e
"$bench" --backend tpu >"$out" 2>&1; rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--backend expects cuda or cpu, got 'tpu'" "$out" || fail "--backend tpu: rc $rc"
set +e
"$bench" --backend cuda --layers 1 --heads 1 --d_model 32 --vocab 64 --seq 16 --batch 1 --steps 1 --warmup 0 \
  >"$out" 2>&1; rc=$?
set -e
case $rc in
  0) grep -q '^loom .*device_mem_mb=[0-9]' "$out" || fail "cuda run: no device memory figure" ;;
  77) grep -q "no usable CUDA device\|no CUDA backend" "$out" || fail "cuda skip without a reason" ;;
  2) grep -q "this build has no CUDA backend" "$out" || fail "cuda: rc 2 without the reason" ;;
  *) fail "cuda run exited $rc" ;;
esac
# The yardstick, scripts/torch_gpt_cuda_bench.py, on the same tiny shape on the CPU: it runs (so
# a lent GPU's time is not spent on a broken script), and counts the same parameters. PyTorch is
# a development dependency (scripts/setup.sh --dev), not the suite's: without it this part is
# said to be skipped, and the rest of the test still counts.
here=$(cd "$(dirname "$0")/../.." && pwd)
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$here/scripts/torch_gpt_cuda_bench.py" --device cpu --precision fp32 --layers 2 --heads 2 \
    --d_model 64 --vocab 300 --seq 32 --batch 2 --steps 2 --warmup 1 --peak_tflops 1 >"$out" 2>&1 \
    || fail "torch_gpt_cuda_bench.py exited $?"
  grep -q '^torch tokens_per_s=[0-9.]* tokens_per_s_max=[0-9.]* step_ms=[0-9.]* mfu=0\.[0-9]* .*device_used_mb=-1.0 .*params=126720$' "$out" \
    || fail "torch_gpt_cuda_bench.py: report line incomplete or another parameter count"
  echo "bench_gpt_training smoke: OK"
else
  echo "bench_gpt_training smoke: OK (scripts/torch_gpt_cuda_bench.py skipped: no PyTorch for /usr/bin/python3; scripts/setup.sh --dev installs it)"
fi
