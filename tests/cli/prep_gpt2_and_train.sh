# `loom prep --tokenizer gpt2` on real text (the fortunes corpus, with the small BPE vocabulary the
# tests ship), then a short training run on the result: the CLI path end to end.
source "$(dirname "$0")/common.sh"
files=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | head -5)
"$LOOM" prep --tokenizer gpt2 --vocab "$SRC/tests/data/bpe/vocab.json" --merges "$SRC/tests/data/bpe/merges.txt" \
  --doc-separator % --val-fraction 0.1 --out "$WORK/bpe" $files | tee "$WORK/prep.out"
grep -q "documents" "$WORK/prep.out" || fail "no prep summary"
python3 - "$WORK/bpe/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["tokenizer"] == "gpt2" and m["vocab_size"] == 557 and m["eot_id"] == 556, m
assert m["train"]["tokens"] > 100000 and m["val"]["tokens"] > 1000, m
PY
mpi -np 1 "$LOOM" train "$SRC/configs/tiny.yaml" --set model.vocab_size=557 --set data.train="$WORK/bpe" \
  --set data.val="$WORK/bpe" --set train.steps=30 --set log.eval_every=30 --set log.dir="$WORK/run" | tail -2
grep -q '"val_loss"' "$WORK/run/metrics.jsonl" || fail "no val_loss"
# The recipe's vocabulary must match the manifest's.
set +e
"$LOOM" train "$SRC/configs/tiny.yaml" --set data.train="$WORK/bpe" --set data.val="" --set log.eval_every=0 2> "$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] || fail "vocab mismatch exited $rc"
grep -q "declares vocab size 557 but model.vocab_size is 257" "$WORK/err" || fail "vocab mismatch message: $(cat "$WORK/err")"
echo PASS
