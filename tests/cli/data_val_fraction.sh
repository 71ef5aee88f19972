# data.val_fraction (Megatron's --split): validation held out as the last fraction of data.train's
# tokens. A run with it equals, loss for loss and val_loss for val_loss, a run given the two
# halves as separate files (written here from the shard's tokens); the header says what was held
# out; a resume under another fraction trains on other data, so it needs consent; data.val beside
# it is refused.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
SHARD=data/fortunes/train_000000.bin
/usr/bin/python3 - "$SHARD" "$WORK" <<'PY'
import numpy as np, sys
shard, w = sys.argv[1], sys.argv[2]
tokens = np.fromfile(shard, dtype="<u2", offset=64)  # a Loom shard: 64-byte header, uint16 tokens
n_val = int(round(len(tokens) * 0.05))
for name, part in (("head", tokens[:len(tokens) - n_val]), ("tail", tokens[len(tokens) - n_val:])):
    h = np.zeros(256, "<i4")
    h[:3] = [20240520, 1, len(part)]  # llm.c's token file
    with open(f"{w}/{name}.bin", "wb") as f:
        f.write(h.tobytes() + part.astype("<u2").tobytes())
print(len(tokens), "tokens:", len(tokens) - n_val, "to train,", n_val, "held out")
PY
BASE=(configs/tiny.yaml "${SMALL[@]}" --set train.global_batch=8 --set train.micro_batch=4 --set train.steps=8
      --set log.every=1 --set log.eval_every=4 --set log.eval_batches=2 --set log.tensorboard=false)
run() {  # name args...
  local name=$1
  shift
  mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 ||
    { rc=$?; cat "$WORK/$name.out"; fail "$name: exit status $rc"; }
}
run split --set data.train=$SHARD --set data.val="" --set data.val_fraction=0.05
run files --set data.train="$WORK/head.bin" --set data.val="$WORK/tail.bin" --set data.format=llmc
grep -qE "^loom: data.val_fraction=0.05: validation is the last [0-9]+ of data.train's tokens, training the other [0-9]+$" "$WORK/split.out" ||
  { grep -n "val_fraction\|validation" "$WORK/split.out"; fail "the header does not say what was held out"; }
/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
rows = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl")]
a, b = rows("split"), rows("files")
assert len(a) == len(b) == 8, (len(a), len(b))
for x, y in zip(a, b):
    assert (x["loss"], x.get("val_loss")) == (y["loss"], y.get("val_loss")), (x, y)
assert [r["step"] for r in a if "val_loss" in r] == [3, 7]
print("data.val_fraction=0.05 = the two halves as files: the same", len(a), "losses and 2 val_losses")
PY
# Another fraction on resume: other training tokens, so other samples at the saved positions.
run ck --set data.train=$SHARD --set data.val="" --set data.val_fraction=0.05 --set checkpoint.dir="$WORK/ck" \
  --set train.stop_at_step=4
set +e
mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/ck" --set data.train=$SHARD --set data.val="" \
  --set data.val_fraction=0.1 --set checkpoint.dir="$WORK/ck" > "$WORK/refrac.out" 2>&1
rc=$?
mpi -np 1 "$LOOM" train "${BASE[@]}" --set log.dir="$WORK/both" --set data.val_fraction=0.05 > "$WORK/both.out" 2>&1
rc2=$?
set -e
[ "$rc" = 2 ] || { cat "$WORK/refrac.out"; fail "a resume under another data.val_fraction: exit $rc, expected 2"; }
grep -q "resuming: the training data" "$WORK/refrac.out" || { cat "$WORK/refrac.out"; fail "the refusal does not name the training data's change"; }
[ "$rc2" = 2 ] || { cat "$WORK/both.out"; fail "data.val beside data.val_fraction: exit $rc2, expected 2"; }
grep -q "data.val_fraction=0.05 .*holds validation out of data.train, and data.val=.* names other validation data" "$WORK/both.out" ||
  { cat "$WORK/both.out"; fail "data.val beside data.val_fraction is not named"; }
echo PASS
