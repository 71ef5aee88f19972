# data.train, data.val and `loom eval --data` must hold the same tokens on every rank. Two ranks
# started by one mpirun in different working directories (MPMD, `-wdir`), each reading its own
# relative train.bin and val.bin, stand for node-local copies of the data:
#   1. identical copies: the job trains (and saves a checkpoint for 4-5);
#   2. rank 1's copy of train.bin has two neighbouring tokens swapped (same size, same samples per
#      epoch): the job is refused before training (exit 2), naming rank 1 and both fingerprints
#      once, with no run directory made;
#   3. the same for rank 1's copy of data.val (val_loss would mix different tokens);
#   4. loom eval over identical copies of --data runs; 5. over differing copies, it is refused
#      (exit 2) naming rank 1.
source "$(dirname "$0")/../cli/common.sh"
WORK=$(cd "$WORK" && pwd -P)
corpus
export OMP_NUM_THREADS=1
for node in a b; do
  mkdir -p "$WORK/$node"
  cp "$SRC/data/fortunes/train_000000.bin" "$WORK/$node/train.bin"
  cp "$SRC/data/fortunes/train_000000.bin" "$WORK/$node/good.bin"
  cp "$SRC/data/fortunes/val_000000.bin" "$WORK/$node/val.bin"
done
two_nodes() {  # OUT ARGS...: rank 0 in $WORK/a, rank 1 in $WORK/b, the same arguments
  local out=$1; shift
  set +e
  timeout 90 "$MPIEXEC" --oversubscribe --bind-to none -np 1 -wdir "$WORK/a" "$LOOM" "$@" : \
    -np 1 -wdir "$WORK/b" "$LOOM" "$@" > "$WORK/$out" 2>&1
  rc=$?
  set -e
  [ "$rc" != 124 ] || { cat "$WORK/$out"; fail "$out: the job hung (killed after 90 s)"; }
}
train=(train "$SRC/configs/tiny.yaml" --set train.steps=2 --set log.every=1 --set log.eval_every=0
       --set data.train=train.bin --set data.val="$SRC/data/fortunes")

two_nodes same.out "${train[@]}" --set log.dir="$WORK/same.run" --set data.val=val.bin --set checkpoint.dir="$WORK/ck"
[ "$rc" = 0 ] || { cat "$WORK/same.out"; fail "identical copies: exit $rc, expected 0"; }

# The job in OUT was refused (exit 2) with rank 1's error about WHAT (`data.train=train.bin`, ...)
# and KIND of data, printed once, and made no run directory RUN (if given): refused OUT WHAT KIND [RUN]
refused() {
  local out=$1 what=$2 kind=$3 run=${4:-} pattern n
  [ "$rc" = 2 ] || { cat "$WORK/$out"; fail "$out: rank 1's copy of $what differs: exit $rc, expected 2"; }
  pattern="rank 1: $what: this rank reads [0-9]* tokens of CRC-32C [0-9a-f]*, rank 0 reads [0-9]* tokens of CRC-32C [0-9a-f]*: every rank must see the same $kind"
  n=$(grep -c -- "$pattern" "$WORK/$out" || true)
  [ "$n" = 1 ] || { cat "$WORK/$out"; fail "$out: expected the error once, found $n times"; }
  [ -z "$run" ] || [ ! -e "$run" ] || fail "$out: a run directory was made"
  grep -- "$pattern" "$WORK/$out" | cut -c1-200
}

# 2. data.train differs on rank 1.
swap_two_tokens "$WORK/b/train.bin"
two_nodes differ.out "${train[@]}" --set log.dir="$WORK/differ.run"
refused differ.out data.train=train.bin "training data" "$WORK/differ.run"

# 3. data.val differs on rank 1; data.train is the same everywhere.
swap_two_tokens "$WORK/b/val.bin"
two_nodes val.out "${train[@]}" --set data.train=good.bin --set data.val=val.bin --set log.dir="$WORK/val.run"
refused val.out data.val=val.bin "validation data" "$WORK/val.run"

# 4-5. loom eval: the same --data everywhere runs; rank 1's differing copy is refused.
ck=$(ls -d "$WORK/ck"/step_* | tail -1)
two_nodes eval_same.out eval "$ck" --data good.bin --batches 2 --seq-len 64
[ "$rc" = 0 ] || { cat "$WORK/eval_same.out"; fail "loom eval over identical copies: exit $rc, expected 0"; }
two_nodes eval_differ.out eval "$ck" --data train.bin --batches 2 --seq-len 64
refused eval_differ.out --data=train.bin "evaluation data"
grep -q "^loom eval: error: rank 1: --data=train.bin" "$WORK/eval_differ.out" || fail "loom eval: the error is not loom eval's"
