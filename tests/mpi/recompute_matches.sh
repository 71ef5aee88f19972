# Activation recomputation changes memory, never results: train.recompute selective and full give
# bitwise the same losses, gradient norms and learning rates as none, on one rank and at
# tp 2 x pp 2 (where the recomputed blocks redo their tensor-parallel all-reduces and several
# micro-batches are in flight), while the activation memory shrinks.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
args=(--set train.steps=5 --set log.every=1 --set log.eval_every=0)
strip() { sed -E 's/, "tokens_per_s".*//' "$1"; }  # timing and memory fields differ run to run
acts() {  # rank 0's allocated activations, from the memory report in LOG_DIR/run.json
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sessions"][-1]["memory_end"][0]["activations_mb"])' "$1/run.json"
}
for mode in none selective full; do
  OMP_NUM_THREADS=2 mpi -np 1 "$LOOM" train configs/tiny.yaml "${args[@]}" --set train.recompute=$mode \
    --set log.dir="$WORK/one_$mode" > "$WORK/one_$mode.out"
done
for mode in selective full; do
  diff <(strip "$WORK/one_none/metrics.jsonl") <(strip "$WORK/one_$mode/metrics.jsonl") > /dev/null ||
    fail "1 rank: recompute=$mode changes the results"
done
a_none=$(acts "$WORK/one_none") a_sel=$(acts "$WORK/one_selective") a_full=$(acts "$WORK/one_full")
echo "1 rank: activations none $a_none MB, selective $a_sel MB, full $a_full MB; results identical"
python3 -c "import sys; sys.exit(0 if $a_full < $a_sel < $a_none else 1)" || fail "activation memory did not shrink"
export OMP_NUM_THREADS=1
for mode in none full; do
  mpi -np 4 "$LOOM" train configs/tiny.yaml "${args[@]}" --set parallel.tp=2 --set parallel.pp=2 \
    --set train.recompute=$mode --set log.dir="$WORK/tp_$mode" > "$WORK/tp_$mode.out"
done
diff <(strip "$WORK/tp_none/metrics.jsonl") <(strip "$WORK/tp_full/metrics.jsonl") > /dev/null ||
  fail "tp 2 x pp 2: recompute=full changes the results"
echo "tp 2 x pp 2: activations none $(acts "$WORK/tp_none") MB, full $(acts "$WORK/tp_full") MB; results identical"
echo PASS
