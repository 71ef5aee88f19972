#!/usr/bin/env bash
# Issue 23's measurements on a GPT-2 124M-shaped model (random weights in Hugging Face's layout,
# written by tests/pretrained/gpt2_numpy.py: no real weights can be fetched on the build machine;
# the figures depend on the shapes, not the values):
#   1. loom import (HF -> Loom checkpoint) and loom export (-> HF) time and peak memory;
#   2. loom sample tokens/s with and without the KV cache (greedy, 16-token prompt), alternated;
#   3. LoRA (rank 8, all four targets) against full fine-tuning: step time, tokens/s and memory,
#      on the same model, data and batch, alternated.
# Needs the build (build/loom), numpy, and the GPT-2 tokenizer (scripts/fetch_gpt2_tokenizer.sh).
#   scripts/bench_pretrained.sh [WORK_DIR]     (default /tmp/loom_bench_pretrained; removed first)
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM=${LOOM:-$PWD/build/loom}
W=${1:-/tmp/loom_bench_pretrained}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$W" && mkdir -p "$W"
peak() { grep -oE "Maximum resident set size \(kbytes\): [0-9]+" "$1" | awk '{printf "%.0f MB", $NF / 1024}'; }
secs() { grep -oE "Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): [0-9:.]+" "$1" | awk '{print $NF}'; }

echo "== GPT-2 124M-shaped HF directory (fp32 safetensors)"
$PY tests/pretrained/gpt2_numpy.py make-hf "$W/gpt2" --layers 12 --heads 12 --embd 768 --vocab 50257 --positions 1024
ls -l "$W/gpt2/model.safetensors" | awk '{printf "model.safetensors: %.1f MB\n", $5 / 1e6}'

echo "== import / export"
/usr/bin/time -v "$LOOM" import "$W/gpt2" --out "$W/ck" 2> "$W/import.time" | tail -1
echo "import: wall $(secs "$W/import.time"), peak RSS $(peak "$W/import.time")"
/usr/bin/time -v "$LOOM" export "$W/ck" --out "$W/exported" 2> "$W/export.time" | tail -1
echo "export: wall $(secs "$W/export.time"), peak RSS $(peak "$W/export.time")"

echo "== sampling: 16-token prompt, 128 tokens, greedy (alternated, 2 rounds each)"
prompt=$(seq -s, 100 115)
for round in 1 2; do
  for mode in kv no-kv; do
    flag=""
    [ "$mode" = no-kv ] && flag=--no-kv-cache
    "$LOOM" sample "$W/gpt2" --prompt-tokens "$prompt" --max-tokens 128 --temperature 0 $flag 2>&1 >/dev/null |
      grep -oE "[0-9.]+ tokens/s" | sed "s/^/$mode round $round: /"
  done
done

echo "== LoRA vs full fine-tuning (seq 256, micro batch 4, 5 steps; tokens/s over steps 2-5)"
bash scripts/fetch_gpt2_tokenizer.sh > /dev/null
files=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | head -20)
"$LOOM" prep --tokenizer gpt2 --vocab data/gpt2-tokenizer/vocab.json --merges data/gpt2-tokenizer/merges.txt \
  --doc-separator % --val-fraction 0.05 --out "$W/data" $files > /dev/null
run() {  # run NAME SETS...
  local name=$1
  shift
  mpirun -np 1 --bind-to none "$LOOM" train configs/finetune-gpt2-lora.yaml --set model.init_from="$W/gpt2" \
    --set data.train="$W/data" --set data.val="$W/data" --set train.steps=5 --set train.global_batch=4 \
    --set log.every=1 --set log.eval_every=0 --set checkpoint.dir="" --set log.dir="$W/run_$name" "$@" > "$W/$name.out"
  local rate rss state
  rate=$(grep -oE "[0-9]+ tokens/s" "$W/$name.out" | tail -1)
  rss=$(grep -A1 "peak RSS" "$W/$name.out" | tail -1 | awk '{print $NF}')
  state=$(grep -A1 "peak RSS" "$W/$name.out" | tail -1 | awk '{print $(NF-1)}')
  local step_ms
  step_ms=$(grep -E "^step +[2-5]/" "$W/$name.out" | grep -oE "\| [0-9]+ ms \|" | grep -oE "[0-9]+" | sort -n | sed -n 2p)
  echo "$name: $rate, median step $step_ms ms, model state (params + grads + optimizer) $state MB, peak RSS $rss MB"
  grep -oE "model.init_from: .* loaded in [0-9.]+ s" "$W/$name.out" | sed 's/^/  /'
}
for round in 1 2; do
  run lora_$round
  run full_$round --set lora.rank=0 --set optim.weight_decay=0.1
done
run qlora_nf4 --set lora.quantize=nf4
grep "LoRA rank" "$W/lora_1.out" | cut -c1-400
grep "LoRA rank" "$W/qlora_nf4.out" | grep -o "frozen base.*"
