#!/usr/bin/env bash
# ZeRO's memory and step time at dp 4 (issue 21): model state per rank (parameters, gradients and
# optimizer state, ZeRO-2/3's per-unit buffers at their peak; run.json's memory_end) for zero 0,
# 1, 2, 3, zero 3 without prefetch and zero 3 with the optimizer offloaded to the CPU, on two
# models of over 100M parameters:
#   gpt2: GPT-2 124M's shape (12 layers, 12 heads, d_model 768, vocab 50257: the tied wte is
#         38.6M of the 124M parameters, and ZeRO-3 gathers it whole for the lookup and the head
#         and holds its gradient whole through backward);
#   byte: 16 layers of d_model 768 with the byte-level vocabulary 257 (~113M parameters, almost
#         all in the blocks);
#   deep: 32 layers of d_model 512, vocabulary 257 (~101M parameters in smaller blocks: ZeRO-3's
#         per-unit buffers, a few blocks' worth, are a smaller share of the model).
# Then step time and the communication wait per step (gradient reduction, and at zero 3 the
# parameter gathers, not hidden behind compute) of zero 0, zero 3 and zero 3 without prefetch on
# the gpt2 shape, the three alternating ROUNDS times (the machine is shared and noisy: min and
# median over the rounds).
#   [ROUNDS=3] [STEPS=6] [MICRO=1] [SEQ=64] [PRECISION=fp32] [NP=4] [SHAPES="gpt2 byte"]
#   [TIMING_SHAPES=gpt2] [OFFLOAD=1] [LOOM=build/loom] [RUN_TIMEOUT=600] scripts/bench_zero.sh
# ROUNDS=0: memory only, every variant of every shape once (~9 minutes). PRECISION=bf16 measures
# bf16 compute (gathered weights in bf16; fp32 master, gradients and moments).
# The data are the fortunes corpus at the byte level (scripts/prepare_fortunes.sh). For the gpt2
# shape the same token ids go into an llm.c shard (that format records no vocabulary, so
# model.vocab_size 50257 accepts it): ids below 257 are valid ids of the 50257 vocabulary, and
# neither memory nor step time depends on which ids the tokens are (the head computes every
# logit; the embedding's backward scatters one row per token whatever the id).
# Each invocation writes a new directory runs/bench-zero/STAMP/ (nothing earlier is touched):
# every run's log.dir in runs/, its output in logs/, the figures in results.tsv, the tables in
# table.md (scripts/bench_zero_table.py makes them). ~16 minutes with the defaults on 2 shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
micro=${MICRO:-1}
seq=${SEQ:-64}
precision=${PRECISION:-fp32}
np=${NP:-4}
shapes=${SHAPES-gpt2 byte}            # set but empty: no memory-only runs
timing_shapes=${TIMING_SHAPES-gpt2}    # set but empty: no timing rounds
offload=${OFFLOAD:-1}
run_timeout=${RUN_TIMEOUT:-600}
loom=${LOOM:-build/loom}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
threads=${OMP_NUM_THREADS:-1}  # per rank
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
# The gemm rate each run measures at start is recorded (how much CPU the run had): a fixed
# LOOM_PEAK_TFLOPS from the caller's environment would replace it with a constant.
unset LOOM_PEAK_TFLOPS
scripts/prepare_fortunes.sh data/fortunes "$loom" >/dev/null

# The fortunes tokens as an llm.c shard (int32 header[256]: magic 20240520, version 1, token
# count; then the uint16 tokens), made once, written aside and renamed into place.
llmc=data/fortunes-llmc/fortunes_train_000000.bin
if [ ! -s "$llmc" ]; then
  mkdir -p "$(dirname "$llmc")"
  python3 - data/fortunes/train_000000.bin "$llmc.tmp.$$" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
magic, version, width, count = struct.unpack_from("<8sIIQ", b, 0)
assert magic == b"LOOMTOKS" and version == 1 and width == 2, (magic, version, width)
header = [0] * 256
header[:3] = [20240520, 1, count]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", *header) + b[64:64 + 2 * count])
PY
  mv "$llmc.tmp.$$" "$llmc"
fi

out=runs/bench-zero/$(date -u +%Y%m%dT%H%M%SZ)
results=$out/results.tsv
mkdir -p runs/bench-zero
mkdir "$out" && mkdir "$out/logs" "$out/runs"  # fails rather than reuse a directory started the same second
: >"$results"

shape_args() {  # SHAPE -> --set arguments on top of configs/gpt2-124m.yaml
  case $1 in
    gpt2) echo "--set model.n_layer=12 --set model.vocab_size=50257 --set data.train=$llmc" ;;
    byte) echo "--set model.n_layer=16 --set model.vocab_size=257 --set data.train=data/fortunes" ;;
    deep) echo "--set model.n_layer=32 --set model.d_model=512 --set model.n_head=8 --set model.vocab_size=257 --set data.train=data/fortunes" ;;
    *) echo "bench_zero: unknown shape $1 (gpt2, byte, deep)" >&2; exit 2 ;;
  esac
}
variant_args() {  # VARIANT -> --set arguments
  case $1 in
    z0|z1|z2|z3) echo "--set parallel.zero=${1#z}" ;;
    z3np) echo "--set parallel.zero=3 --set parallel.prefetch=false" ;;
    z3off) echo "--set parallel.zero=3 --set optim.offload=cpu" ;;
  esac
}
record() { (IFS=$'\t'; echo "$*") >>"$results"; }
why() {  # LOG STATUS -> the run's last error-looking line and the status, on one line
  local line
  line=$(grep -iE 'error|not supported|unsupported|exception|abort|killed' "$1" | head -1 || true)
  [ -n "$line" ] || line=$(tail -1 "$1")
  [ "$2" = 124 ] && line="timed out after ${run_timeout} s"
  printf '%s (exit %s)' "$line" "$2" | tr '\t\n' '  '
}

run() {  # SHAPE VARIANT ROUND: one training run at dp $np, its figures appended to results.tsv
  local name=$1-$2-r$3 rc=0 fields params
  local log=$out/logs/$name.log dir=$out/runs/$name
  # shellcheck disable=SC2046  # the --set arguments split on purpose
  timeout "$run_timeout" mpirun -np "$np" --oversubscribe --bind-to none "$loom" train configs/gpt2-124m.yaml \
    --set train.backend=cpu --set train.precision="$precision" --set model.seq_len="$seq" \
    --set train.micro_batch="$micro" --set train.global_batch=$((micro * np)) --set train.steps="$steps" \
    --set data.val= --set log.eval_every=0 --set log.every=1 --set log.tensorboard=false \
    --set checkpoint.dir= --set log.dir="$dir" $(shape_args "$1") $(variant_args "$2") >"$log" 2>&1 || rc=$?
  params=$(sed -nE 's/.* ([0-9.]+)M params on rank 0.*/\1/p' "$log" | head -1)
  # The gemm rate Loom measures at start (its MFU's peak): how much CPU the run had, on a shared
  # machine the first thing to compare between runs.
  gemm=$(sed -nE 's/.*, peak ([0-9.]+) GFLOP\/s.*/\1/p' "$log" | head -1)
  if [ "$rc" = 0 ] && fields=$(python3 scripts/bench_zero_table.py --record "$dir" 2>>"$log"); then
    record "shape=$1" "variant=$2" "round=$3" "status=ok" "params_m=$params" "gemm_gflops=$gemm" "$fields"
  else
    record "shape=$1" "variant=$2" "round=$3" "status=fail" "note=$(why "$log" "$rc")"
  fi
  echo "bench_zero:   $(tail -1 "$results" | tr '\t' ' ' | cut -c1-220)" >&2
}

free_gb=$(awk '/MemAvailable/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
echo "bench_zero: $out: $np ranks, $steps steps, micro $micro x seq $seq, $precision; ${free_gb} GB available" >&2
record "load=start" "avg1=$(cut -d' ' -f1 /proc/loadavg)" "cores=$(getconf _NPROCESSORS_ONLN)"
# Step time first (its rounds also give the timed shapes' memory of zero 0, 3 and 3 without
# prefetch), alternating the variants and reversing their order every other round.
for r in $(seq "$rounds"); do
  for shape in $timing_shapes; do
    echo "bench_zero: $shape, timing round $r of $rounds" >&2
    order="z0 z3 z3np"
    [ $((r % 2)) = 0 ] && order="z3np z3 z0"
    for v in $order; do run "$shape" "$v" "$r"; done
  done
done
# Memory: every other variant once per shape.
for shape in $shapes; do
  echo "bench_zero: $shape, memory" >&2
  variants="z0 z1 z2 z3 z3np"
  [ "$offload" = 1 ] && variants="$variants z3off"
  for v in $variants; do
    case " $timing_shapes " in *" $shape "*) case $v in z0|z3|z3np) [ "$rounds" -gt 0 ] && continue ;; esac ;; esac
    run "$shape" "$v" 1
  done
done
record "load=end" "avg1=$(cut -d' ' -f1 /proc/loadavg)" "cores=$(getconf _NPROCESSORS_ONLN)"
python3 scripts/bench_zero_table.py "$results" --dp "$np" --timed "$(if [ "$rounds" -gt 0 ]; then echo "$timing_shapes"; fi)" \
  --describe "gpt2=GPT-2 124M shape (L12 C768 V50257, $precision, T$seq B$micro)" \
  --describe "byte=L16 C768 V257 ($precision, T$seq B$micro)" | tee "$out/table.md"
echo "bench_zero: results in $out (table.md, results.tsv, logs/, runs/)" >&2
