# The data guards from the CLI (docs/data.md): `loom prep` never overwrites a dataset in place
# (refuses without --force; --force swaps the finished one in), `loom prep --check` finds a
# flipped byte, training refuses a damaged shard, a FIFO (never blocking on it) and a prep
# directory whose manifest.json was deleted. Each refusal exits 2 and names the file.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=2
cd "$WORK"
python3 - <<'PY'
with open("in.txt", "w") as f:
    for i in range(400):
        f.write(f"document {i}: " + "the quick brown fox jumps over the lazy dog. " * (1 + i % 5) + "\n%\n")
PY
# Runs a command that must fail with exit 2 and a message matching $1, within 20 s (no hang).
refused() {
  local want=$1; shift
  set +e
  timeout 20 "$@" > out.txt 2> err.txt; local rc=$?
  set -e
  [ "$rc" != 124 ] || fail "hung: $*"
  [ "$rc" = 2 ] || fail "exited $rc, expected 2: $* ($(cat err.txt))"
  grep -qF -- "$want" err.txt || fail "message lacks '$want': $(cat err.txt)"
}
prep=("$LOOM" prep --tokenizer byte --doc-separator % --val-fraction 0.1 --shard-tokens 20000)
train=("$LOOM" train "$SRC/configs/tiny.yaml" --set train.steps=2 --set log.eval_every=0 --set log.dir="$WORK/run")

# Issue 3: an existing dataset is kept unless --force; --force replaces it whole.
"${prep[@]}" --out ds in.txt > /dev/null
[ "$(ls -d ds* | tr '\n' ' ')" = "ds " ] || fail "prep left other directories: $(ls -d ds*)"
sum_before=$(cat ds/* | md5sum)
refused "already holds a prepared dataset (manifest.json, " "${prep[@]}" --out ds in.txt
grep -qF -- "pass --force to replace it" err.txt || fail "no --force hint: $(cat err.txt)"
[ "$(cat ds/* | md5sum)" = "$sum_before" ] || fail "a refused prep changed the dataset"
# The --out directory the user made keeps its mode, group and setgid bit (it was replaced by one
# with the default 755 and the user's own group), also through --force; its files take the group.
if [ "$(id -u)" = 0 ]; then
  mkdir -m 2770 shared && chgrp daemon shared  # Debian's base-passwd always has the daemon group
  "${prep[@]}" --out shared in.txt > /dev/null
  [ "$(stat -c '%a %G' shared)" = "2770 daemon" ] || fail "prep changed --out's mode or group: $(stat -c '%a %G' shared)"
  [ "$(stat -c '%G' shared/manifest.json)" = daemon ] || fail "the dataset's files did not take the setgid group"
  "${prep[@]}" --out shared --force in.txt > /dev/null
  [ "$(stat -c '%a %G' shared)" = "2770 daemon" ] || fail "prep --force changed --out's mode or group"
  # A write-protected --out gets its exact mode back only once the dataset is written.
  mkdir -m 0555 sealed && "${prep[@]}" --out sealed in.txt > /dev/null
  [ "$(stat -c '%a' sealed)" = 555 ] && [ -f sealed/manifest.json ] || fail "prep into a 0555 --out: $(stat -c '%a' sealed)"
fi
# --out the working directory: refused (its rename would leave the shell in a deleted directory).
mkdir here && refused "is the working directory" env -C here "${prep[@]}" --out . ../in.txt
[ -d here ] && [ -z "$(ls here)" ] || fail "prep --out . changed the working directory"
mkdir notes && echo keep > notes/todo.txt
refused "--out notes is not empty (1 entry, e.g. 'todo.txt')" "${prep[@]}" --out notes in.txt
[ "$(cat notes/todo.txt)" = keep ] || fail "a refused prep touched notes/"
# --force replaces only a directory that holds nothing but a dataset: never a user's directory.
refused "it holds files that are not a prepared dataset, and --force replaces only" "${prep[@]}" --out notes --force in.txt
[ "$(cat notes/todo.txt)" = keep ] || fail "prep --force touched notes/"
cp -r ds mixed && echo mine > mixed/README
refused "it holds files that are not a prepared dataset" "${prep[@]}" --out mixed --force in.txt
[ "$(cat mixed/README)" = mine ] || fail "prep --force replaced a dataset directory holding a user's file"
# .bin files that are not Loom shards (llm.c weights and token shards) are a user's files too, and
# so is a manifest.json of another tool: recognised by their contents, never by their names.
mkdir weights && head -c 5000 /dev/urandom > weights/gpt2_124M.bin && echo '{"name": "x"}' > weights/manifest.json
sum_w=$(cat weights/* | md5sum)
refused "it holds files that are not a prepared dataset" "${prep[@]}" --out weights --force in.txt
[ "$(cat weights/* | md5sum)" = "$sum_w" ] || fail "prep --force replaced .bin files that are not Loom shards"
cp -r ds llmc && head -c 3000 /dev/urandom > llmc/fineweb_train_000001.bin
refused "other entries, e.g. 'fineweb_train_000001.bin'" "${prep[@]}" --out llmc --force in.txt
[ -e llmc/fineweb_train_000001.bin ] || fail "prep --force removed an llm.c shard beside a dataset"
# A mount point as --out: refused up front (the dataset is renamed in from beside it).
if mkdir -p mnt && mount -t tmpfs -o size=4m tmpfs mnt 2>/dev/null; then
  refused "is a mount point" "${prep[@]}" --out mnt in.txt
  umount mnt
else
  echo "mount point case skipped: cannot mount a tmpfs here"
fi
"${prep[@]}" --out ds --force --seed 7 in.txt > force.out
grep -qF "replaced the previous contents of ds" force.out || fail "--force did not say it replaced: $(cat force.out)"
[ "$(ls -d ds* | tr '\n' ' ')" = "ds " ] || fail "--force left other directories: $(ls -d ds*)"
grep -q '"seed": 7' ds/manifest.json || fail "--force did not write the new dataset"
# A FIFO as input is refused, not read (CLI11's ExistingFile accepts it).
mkfifo pipe.txt
refused "pipe.txt is a FIFO (named pipe), not a regular file" "${prep[@]}" --out fifo_out pipe.txt
[ ! -e fifo_out ] || fail "a refused prep created its output directory"

# JSON lines (Megatron's preprocess_data.py input): --json-key takes each line's document.
printf '{"text": "one\\ntwo"}\n{"text": "three", "id": 3}\n' > docs.jsonl
"$LOOM" prep --tokenizer byte --json-key text --out jsonl_ds docs.jsonl > jsonl.out || fail "prep --json-key: $(cat jsonl.out)"
grep -q "2 documents" jsonl.out || fail "prep --json-key did not read 2 documents: $(cat jsonl.out)"
refused "docs.jsonl looks like JSON lines: give --json-key KEY" "$LOOM" prep --tokenizer byte --out jsonl_ds2 docs.jsonl

# Issue 9: loom prep --check, and verification when training opens the directory.
"$LOOM" prep --check ds > check.out || fail "--check of a fresh dataset failed: $(cat check.out)"
grep -q "^OK       train train_000000.bin: " check.out || fail "no OK line: $(cat check.out)"
grep -q "all [0-9]* shards OK" check.out || fail "no summary: $(cat check.out)"
refused "--check DIR verifies an existing prepared directory: it takes no input files, --out or --force" \
  "$LOOM" prep --check ds in.txt
refused "manifest.json not found" "$LOOM" prep --check notes
printf '\x7f' | dd of=ds/train_000001.bin bs=1 seek=200 conv=notrunc status=none
set +e
"$LOOM" prep --check ds > check.out; rc=$?
set -e
[ "$rc" = 1 ] || fail "--check of a damaged dataset exited $rc, expected 1"
grep -q "^DAMAGED  train train_000001.bin: CRC-32C 0x[0-9a-f]*, the manifest records 0x" check.out ||
  fail "no DAMAGED line: $(cat check.out)"
grep -q "1 of [0-9]* shards damaged" check.out || fail "no damage summary: $(cat check.out)"
refused "train_000001.bin: CRC-32C mismatch: the file's is 0x" \
  "${train[@]}" --set data.train="$WORK/ds" --set data.val=""

# Issue 7: data.train / data.val naming a FIFO fail at once.
mkfifo pipe.bin
refused "data.train=$WORK/pipe.bin: $WORK/pipe.bin is a FIFO (named pipe), not a regular file" \
  "${train[@]}" --set data.train="$WORK/pipe.bin" --set data.val=""
"${prep[@]}" --out ok in.txt > /dev/null
refused "data.val=$WORK/pipe.bin" "${train[@]}" --set data.train="$WORK/ok" --set data.val="$WORK/pipe.bin"

# Issue 10: a prep directory without manifest.json is not read as one split.
rm ok/manifest.json
refused "manifest.json is missing" "${train[@]}" --set data.train="$WORK/ok" --set data.val=""
# Named explicitly, it trains.
"${train[@]}" --set data.train="$WORK/ok/train_*.bin" --set data.val="$WORK/ok/val_*.bin" > /dev/null ||
  fail "explicit globs of a manifest-less prep directory did not train"
# A glob over both splits is refused as the directory is (it trained on the validation split too).
refused "the pattern matches train_*.bin and val_*.bin shards (a loom prep output): reading them all would train on" \
  "${train[@]}" --set data.train="$WORK/ok/*.bin" --set data.val=""
# So is one whose directories hold the splits: data/*/shard.bin over data/train/ and data/val/.
mkdir -p split/train split/val
cp ok/train_000000.bin split/train/shard.bin
cp ok/val_000000.bin split/val/shard.bin
refused "the pattern matches both training and validation files (train/shard.bin, val/shard.bin)" \
  "${train[@]}" --set data.train="$WORK/split/*/shard.bin" --set data.val=""
# An evaluation asking for more sequences than data.val holds repeats some (validation_batches
# wraps around): said at the start, with the most log.eval_batches that fits, as loom eval says it.
# (sequences of tiny's 64 tokens and their next-token targets; a shard's header is 64 bytes)
vals=$(python3 -c "import os; print(((os.path.getsize('$WORK/ok/val_000000.bin') - 64) // 2 - 1) // 64)")
"${train[@]}" --set data.train="$WORK/ok/train_*.bin" --set data.val="$WORK/ok/val_*.bin" --set log.eval_every=2 --set log.eval_batches=4 \
  --set log.dir="$WORK/evalrep" > evalrep.txt || fail "log.eval_batches=4: training failed"
grep -qF "loom: note: log.eval_batches=4 asks for 128 validation sequences of 64 tokens (global batches of 32); data.val holds $vals distinct ones, so they repeat" evalrep.txt ||
  fail "no note on repeated validation sequences ($vals distinct): $(grep note evalrep.txt)"
"${train[@]}" --set data.train="$WORK/ok/train_*.bin" --set data.val="$WORK/ok/val_*.bin" --set log.eval_every=2 --set log.eval_batches=1 \
  --set log.dir="$WORK/evalone" > evalone.txt || fail "log.eval_batches=1: training failed"
if grep -q "validation sequences" evalone.txt; then fail "a note on repeats where none repeat: $(grep note evalone.txt)"; fi
if grep -q "the same .* tokens as data.train" evalone.txt; then fail "a note on shared tokens for two splits"; fi
# The same file named by both keys: val_loss would be a training loss, which the header says.
"${train[@]}" --set data.train="$WORK/ok/train_*.bin" --set data.val="$WORK/ok/train_*.bin" --set log.eval_every=2 --set log.eval_batches=1 \
  --set log.dir="$WORK/evalsame" > evalsame.txt || fail "data.val = data.train: training failed"
grep -qE "loom: note: data.val holds the same [0-9]+ tokens as data.train: val_loss measures the training data" evalsame.txt ||
  fail "no note on data.val being data.train: $(grep note evalsame.txt)"
echo PASS
