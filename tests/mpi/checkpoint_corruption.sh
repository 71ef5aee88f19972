# A damaged checkpoint is never loaded: flipped bytes, a truncated or deleted shard, a deleted
# manifest each make resume report the checkpoint by name and fall back to the previous complete
# one; with every checkpoint damaged, the run fails clearly (status 2) instead of starting over.
# A leftover .partial directory (a save that died) is ignored.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
train() { "$LOOM" train configs/tiny.yaml --set train.steps=12 --set log.eval_every=0 --set checkpoint.every=4 \
            --set checkpoint.keep_last=5 --set checkpoint.dir="$WORK/ck" --set log.dir="$WORK/run" "$@"; }
train --set train.stop_at_step=12 > /dev/null
ls "$WORK/ck"
damage() {  # how
  rm -rf "$WORK/damaged" && cp -r "$WORK/ck" "$WORK/damaged"
  local f="$WORK/damaged/step_00000012/model.h5"
  case $1 in
    flip) printf '\xff\xff\xff\xff' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") / 2 )) conv=notrunc status=none ;;
    truncate) truncate -s $(( $(stat -c %s "$f") - 100 )) "$f" ;;
    delete_shard) rm "$f" ;;
    delete_manifest) rm "$WORK/damaged/step_00000012/manifest.json" ;;
  esac
}
for how in flip truncate delete_shard delete_manifest; do
  damage $how
  mkdir -p "$WORK/damaged/step_00000016.partial"  # a save that died half-way: must be ignored
  set +e
  "$LOOM" train configs/tiny.yaml --set train.steps=13 --set log.eval_every=0 --set checkpoint.dir="$WORK/damaged" \
    --set log.dir="$WORK/run_$how" > "$WORK/$how.out" 2> "$WORK/$how.err"; rc=$?
  set -e
  [ "$rc" = 0 ] || { cat "$WORK/$how.err"; fail "$how: the run failed instead of falling back"; }
  grep -q "resumed from .*step_00000008" "$WORK/$how.out" || fail "$how: did not fall back to step 8: $(cat "$WORK/$how.out")"
  if [ "$how" != delete_manifest ]; then  # without a manifest it is simply not a complete checkpoint
    grep -q "step_00000012 is damaged" "$WORK/$how.err" || fail "$how: the damaged checkpoint was not named"
  fi
  if [ "$how" = flip ]; then  # the middle of the file is tensor data: the damaged tensor is named
    grep -q "dataset [a-z_]*/[a-z0-9_.]* fails its CRC-32C check" "$WORK/$how.err" || fail "flip: no dataset named"
  fi
  echo "$how: $(head -1 "$WORK/$how.err")"
done
# Under mpirun (tp=2 x dp=2, saved with tensors split by columns and the datasets dealt out among
# the dp replicas): a flipped byte in tensor data is found by the ranks' checksums of the slices
# they read, the tensor is named, and every rank falls back together.
mtrain() { mpi -np 4 "$LOOM" train configs/tiny.yaml --set parallel.tp=2 --set train.steps=8 --set log.eval_every=0 \
             --set checkpoint.every=4 --set checkpoint.keep_last=5 "$@"; }
mtrain --set checkpoint.dir="$WORK/mck" --set log.dir="$WORK/mrun" > /dev/null
f="$WORK/mck/step_00000008/model.h5"
printf '\x01' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") * 2 / 3 )) conv=notrunc status=none
set +e
mtrain --set train.steps=9 --set checkpoint.dir="$WORK/mck" --set log.dir="$WORK/mrun2" > "$WORK/m.out" 2> "$WORK/m.err"; rc=$?
set -e
[ "$rc" = 0 ] || { cat "$WORK/m.err"; fail "tp=2 dp=2: the run failed instead of falling back"; }
grep -q "resumed from .*step_00000004" "$WORK/m.out" || fail "tp=2 dp=2: did not fall back to step 4: $(cat "$WORK/m.out")"
grep -q "step_00000008 is damaged.*dataset [a-z_]*/[a-z0-9_.]* fails its CRC-32C check" "$WORK/m.err" ||
  fail "tp=2 dp=2: the damaged tensor was not named: $(cat "$WORK/m.err")"
echo "tp=2 dp=2 flip: $(head -1 "$WORK/m.err")"
# Every checkpoint damaged: a clear error, status 2.
rm -rf "$WORK/damaged" && cp -r "$WORK/ck" "$WORK/damaged"
for d in "$WORK"/damaged/step_*; do truncate -s 1000 "$d/model.h5"; done
set +e
"$LOOM" train configs/tiny.yaml --set train.steps=13 --set checkpoint.dir="$WORK/damaged" --set log.dir="$WORK/r" \
  > /dev/null 2> "$WORK/all.err"; rc=$?
set -e
[ "$rc" = 2 ] || fail "all damaged: exit status $rc, expected 2"
grep -q "every checkpoint is damaged" "$WORK/all.err" || fail "all damaged: message: $(cat "$WORK/all.err")"
grep -q "give the run another checkpoint.dir" "$WORK/all.err" || fail "all damaged: no way out named: $(cat "$WORK/all.err")"
# Another model shape than the checkpoint's: refused, naming each key that differs and both values.
set +e
"$LOOM" train configs/tiny.yaml --set train.steps=13 --set checkpoint.dir="$WORK/ck" --set log.dir="$WORK/r2" \
  --set model.n_layer=2 --set model.seq_len=32 > /dev/null 2> "$WORK/shape.err"; rc=$?
set -e
[ "$rc" = 2 ] || fail "another model shape: exit status $rc, expected 2"
grep -q "model.n_layer is 2 in the recipe, 4 in the checkpoint; model.seq_len is 32 in the recipe, 64 in the checkpoint" \
  "$WORK/shape.err" || fail "another model shape: message: $(cat "$WORK/shape.err")"
echo PASS
