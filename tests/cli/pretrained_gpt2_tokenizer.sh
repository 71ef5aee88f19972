# The real GPT-2 tokenizer (OpenAI's files, installed by scripts/fetch_gpt2_tokenizer.sh, not
# committed): text prepared with it trains a model initialised from an HF fixture of GPT-2's
# vocabulary; `loom export` carries the run's vocab.json + merges.txt; `loom sample` encodes and
# decodes text exactly (the prompt echoed back byte for byte, multi-byte characters included).
source "$(dirname "$0")/common.sh"
TOK="$SRC/data/gpt2-tokenizer"
bash "$SRC/scripts/fetch_gpt2_tokenizer.sh" "$TOK" > /dev/null 2>&1 || { echo "SKIPPED: no GPT-2 tokenizer files"; exit 77; }
PY=/usr/bin/python3
files=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | head -3)
"$LOOM" prep --tokenizer gpt2 --vocab "$TOK/vocab.json" --merges "$TOK/merges.txt" --doc-separator % \
  --val-fraction 0.1 --out "$WORK/bpe" $files > /dev/null
$PY "$SRC/tests/pretrained/gpt2_numpy.py" make-hf "$WORK/hf" --layers 1 --heads 4 --embd 64 --vocab 50257 --positions 64
mpi -np 1 "$LOOM" train "$SRC/configs/tiny.yaml" --set model.init_from="$WORK/hf" --set model.n_layer=1 \
  --set model.d_model=64 --set model.vocab_size=50257 --set data.train="$WORK/bpe" --set data.val="" \
  --set train.steps=2 --set train.micro_batch=2 --set train.global_batch=2 --set log.eval_every=0 \
  --set log.dir="$WORK/run" --set checkpoint.dir="$WORK/ck" > "$WORK/train.out" || fail "train: $(tail -3 "$WORK/train.out")"
"$LOOM" export "$WORK/ck" --out "$WORK/exported" | tee "$WORK/export.out"
cmp "$WORK/exported/vocab.json" "$TOK/vocab.json" || fail "vocab.json not carried"
cmp "$WORK/exported/merges.txt" "$TOK/merges.txt" || fail "merges.txt not carried"
grep -q '"vocab_size": 50257' "$WORK/exported/config.json" || fail "config.json vocab_size"
grep -q '"eos_token_id": 50256' "$WORK/exported/config.json" || fail "config.json eos_token_id"
# Encode + decode is the identity on text, through the checkpoint (the run's tokenizer) and the
# exported directory (its own files).
prompt=$'Fortune\'s wheel — naïve café, 10% off!\n\t“Quotes” and emoji 🙂 end.'
for model in "$WORK/ck" "$WORK/exported"; do
  "$LOOM" sample "$model" --prompt "$prompt" --max-tokens 0 > "$WORK/echo" 2> "$WORK/sample.err" || fail "sample: $(cat "$WORK/sample.err")"
  [ "$(cat "$WORK/echo")" = "$prompt" ] || fail "decode(encode(prompt)) != prompt: '$(cat "$WORK/echo")'"
done
grep -q "prompt tokens" "$WORK/sample.err" || fail "no sampling summary"
"$LOOM" sample "$WORK/exported" --prompt "Hello" --max-tokens 8 --temperature 0 > "$WORK/gen" 2> /dev/null
grep -q "^Hello" "$WORK/gen" || fail "generation does not continue the prompt"
# GPT-2's tokenizer given to the export of a byte-level model (257 tokens): refused before anything
# is written, as sampling from the result would be (50257 token ids the model has no rows for).
$PY "$SRC/tests/pretrained/gpt2_numpy.py" make-hf "$WORK/hf257" --layers 1 --heads 4 --embd 64 --vocab 257 --positions 64
set +e
"$LOOM" export "$WORK/hf257" --out "$WORK/mismatch" --vocab "$TOK/vocab.json" --merges "$TOK/merges.txt" \
  > "$WORK/mismatch.out" 2>&1
rc=$?
set -e
[ $rc = 2 ] || fail "export with a 50257-token tokenizer for a 257-token model: exit $rc, expected 2"
grep -q "vocab.json has 50257 tokens, more than the model's 257" "$WORK/mismatch.out" || fail "$(cat "$WORK/mismatch.out")"
[ -e "$WORK/mismatch" ] && fail "the refused export wrote $WORK/mismatch"
echo PASS
