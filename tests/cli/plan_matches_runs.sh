# `loom plan` against real runs: for several layouts of a small model on this machine, the
# predicted peak memory per rank must be within 10% of the measured peak RSS (the largest over
# ranks), and the predicted step time is printed next to the measured one (docs/plan.md keeps
# the table; step time is not asserted: 2 cores shared by up to 4 ranks).
#   plan_matches_runs.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
model=(--set model.n_layer=4 --set model.d_model=384 --set model.n_head=6 --set model.seq_len=128
       --set train.micro_batch=4 --set train.global_batch=16 --set train.steps=3 --set log.every=1
       --set log.eval_every=0)
# Each layout term (dp, tp, pp, zero 1/2/3, recompute, 16-bit compute, offload, LoRA with a dense
# or an NF4-quantized frozen base) appears at least
# once; plain variants that another layout already covers are left out (suite time). The last
# layout is QLoRA from pretrained weights with GPT-2's vocabulary, where the peak is not the
# step's but the loading's: the frozen embedding (50257 x 384) goes in through a host buffer, a
# 16-bit staging buffer and the source's copy, 74 MB each (an HF fixture from the independent
# numpy writer; the fortunes bytes as an llm.c shard, which declares no vocabulary). The very last
# saves a checkpoint after every step: its peak is the save's (the slices this rank writes, and
# the larger of the piece passing by and MPI-IO's collective buffer).
/usr/bin/python3 "$SRC/tests/pretrained/gpt2_numpy.py" make-hf "$WORK/gpt2v" --layers 4 --heads 6 --embd 384 \
  --vocab 50257 --positions 128 --seed 5
python3 - "$SRC/data/fortunes" "$WORK/bytes.bin" <<'PY'
import glob, struct, sys
raw = open(sorted(glob.glob(sys.argv[1] + "/train_*.bin"))[0], "rb").read()[64:]  # Loom shard: uint16 tokens
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(raw) // 2, *([0] * 253)) + raw)
PY
pretrained="lora.rank=8,lora.quantize=nf4,model.vocab_size=50257,model.init_from=$WORK/gpt2v,data.train=$WORK/bytes.bin"
pretrained+=",data.val=$WORK/bytes.bin"
layouts=("1 tp=1 pp=1 zero=0 none fp32" "2 tp=1 pp=1 zero=1 none fp32"
         "2 tp=1 pp=2 zero=0 none fp32" "4 tp=2 pp=1 zero=1 none fp32"
         "2 tp=1 pp=2 zero=0 full fp32"
         "1 tp=1 pp=1 zero=0 none bf16" "2 tp=2 pp=1 zero=1 none bf16" "2 tp=1 pp=2 zero=0 selective bf16"
         "1 tp=1 pp=1 zero=0 none fp16"
         "2 tp=1 pp=1 zero=2 none fp32" "2 tp=1 pp=1 zero=3 none bf16"
         "2 tp=1 pp=2 zero=3 none fp32" "2 tp=1 pp=1 zero=3 none fp32 optim.offload=cpu"
         "1 tp=1 pp=1 zero=0 none fp32 lora.rank=8,lora.quantize=nf4"
         "2 tp=2 pp=1 zero=0 none bf16 lora.rank=8" "1 tp=1 pp=1 zero=0 none bf16 $pretrained"
         "4 tp=1 pp=1 zero=1 none fp32 checkpoint.dir=$WORK/ckpt,checkpoint.every=1")
printf "%-34s %12s %12s %8s %12s %12s\n" layout "pred MB" "meas MB" "err %" "pred ms" "meas ms" | tee "$WORK/table"
for l in "${layouts[@]}"; do
  read -r np tp pp zero rc prec extra <<< "$l"  # extra: more key=value settings, comma-separated
  sets=(--set parallel.${tp} --set parallel.${pp} --set parallel.${zero} --set train.recompute=$rc
        --set train.precision=$prec)
  IFS=, read -ra more <<< "$extra"
  for kv in "${more[@]}"; do sets+=(--set "$kv"); done
  n=$(( ${n:-0} + 1 )); tag=layout$n
  plan=$("$LOOM" plan configs/tiny.yaml "${model[@]}" "${sets[@]}" --nodes 1 --gpus-per-node "$np" --gpu cpu)
  pred_mb=$(echo "$plan" | sed -n 's/^  total \([0-9.]*\) MB.*/\1/p')
  pred_ms=$(echo "$plan" | sed -n 's/^predicted: \([0-9.]*\) ms.*/\1/p')
  threads=$(( np == 1 ? 2 : 1 ))
  # The plain 1-rank layouts (fp32, bf16, fp16) measure their MFU peak at start, as a run without
  # LOOM_PEAK_TFLOPS does: its matrices must stay below the peak the plan predicts.
  ( if [ "$np" = 1 ] && [ -z "$extra" ]; then unset LOOM_PEAK_TFLOPS; fi
    OMP_NUM_THREADS=$threads mpi -np "$np" "$LOOM" train configs/tiny.yaml "${model[@]}" "${sets[@]}" \
      --set log.dir="$WORK/run_$tag" > "$WORK/out" 2>&1 ) || { cat "$WORK/out"; fail "$l: training failed"; }
  if [ "$np" = 1 ] && [ -z "$extra" ]; then
    grep -q "GFLOP/s (measured)" "$WORK/out" || { cat "$WORK/out"; fail "$l: the run did not measure its peak"; }
  fi
  read -r meas_mb meas_ms < <(python3 - "$WORK/run_$tag/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(max(r["peak_rss_mb"] for r in rows), statistics.median(r["step_ms"] for r in rows[1:]))
PY
)
  err=$(python3 -c "print(round(100 * abs($pred_mb - $meas_mb) / $meas_mb, 1))")
  printf "%-34s %12.1f %12.1f %8s %12.1f %12.1f\n" "ranks $np $tp $pp $zero $rc $prec ${extra//$WORK\//}" "$pred_mb" "$meas_mb" "$err" "$pred_ms" "$meas_ms" |
    tee -a "$WORK/table"
  python3 -c "import sys; sys.exit(0 if $err <= 10 else 1)" || fail "$l: predicted memory $pred_mb MB is $err% off the measured $meas_mb MB"
done
echo PASS
