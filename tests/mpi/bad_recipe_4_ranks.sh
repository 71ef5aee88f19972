# Under mpirun, a bad recipe, or a failure on some ranks only, makes every rank exit 2 promptly,
# with the error printed once.
source "$(dirname "$0")/../cli/common.sh"
printf 'model:\n  n_layer: 2\n  n_heads: 4\n' > "$WORK/bad.yaml"
start=$(date +%s)
set +e
timeout 60 "$MPIEXEC" --oversubscribe -np 4 "$LOOM" train "$WORK/bad.yaml" > "$WORK/out" 2> "$WORK/err"; rc=$?
set -e
took=$(( $(date +%s) - start ))
cat "$WORK/err"
[ "$rc" != 124 ] || fail "mpirun hung (killed by timeout after 60 s)"
[ "$rc" = 2 ] || fail "mpirun exited $rc, expected 2"
n=$(grep -c "unknown key 'model.n_heads'" "$WORK/err" || true)
[ "$n" = 1 ] || fail "the error was printed $n times, expected once"
grep -q "bad.yaml:3:3" "$WORK/err" || fail "the error does not name the file and line"
[ "$took" -le 30 ] || fail "took $took s to exit"
# A world that the layout does not fit: also exit 2 on every rank, message once.
set +e
timeout 60 "$MPIEXEC" --oversubscribe -np 3 "$LOOM" train "$SRC/configs/tiny.yaml" --set parallel.tp=2 2> "$WORK/err2"; rc=$?
set -e
[ "$rc" = 2 ] || fail "bad world: mpirun exited $rc, expected 2"
n=$(grep -c "the world has 3 ranks" "$WORK/err2" || true)
[ "$n" = 1 ] || fail "bad world: the error was printed $n times"
# Only rank 0 fails (it alone opens the metrics file; here under a regular file): the other
# ranks must neither go on without it nor wait for it forever.
corpus
set +e
timeout 60 "$MPIEXEC" --oversubscribe -np 4 "$LOOM" train "$SRC/configs/tiny.yaml" \
  --set data.train="$SRC/data/fortunes" --set data.val="$SRC/data/fortunes" --set log.dir=/etc/hostname/run 2> "$WORK/err3"; rc=$?
set -e
cat "$WORK/err3"
[ "$rc" = 2 ] || fail "one failing rank: mpirun exited $rc, expected 2"
n=$(grep -c "rank 0: log.dir=/etc/hostname/run" "$WORK/err3" || true)
[ "$n" = 1 ] || fail "one failing rank: the error naming rank 0 was printed $n times"
# Only rank 1 cannot open the data (a node without the file system: its working directory lacks
# the recipe's relative data.train). Every rank opens the data, so the others must not go on into
# the next collective and wait there: all exit 2, the error naming rank 1 once, no run directory.
mkdir -p "$WORK/node_a" "$WORK/node_b"
ln -s "$SRC/data" "$WORK/node_a/data"
set +e
timeout 60 "$MPIEXEC" --oversubscribe --bind-to none \
  -np 1 -wdir "$WORK/node_a" "$LOOM" train "$SRC/configs/tiny.yaml" --set log.dir="$WORK/nodata.run" : \
  -np 1 -wdir "$WORK/node_b" "$LOOM" train "$SRC/configs/tiny.yaml" --set log.dir="$WORK/nodata.run" \
  2> "$WORK/err4"; rc=$?
set -e
cat "$WORK/err4"
[ "$rc" != 124 ] || fail "one rank without the data: mpirun hung (killed by timeout after 60 s)"
[ "$rc" = 2 ] || fail "one rank without the data: mpirun exited $rc, expected 2"
n=$(grep -c "rank 1: data.train=data/fortunes: no such file" "$WORK/err4" || true)
[ "$n" = 1 ] || fail "one rank without the data: the error naming rank 1 was printed $n times, expected once"
[ ! -e "$WORK/nodata.run" ] || fail "one rank without the data: a run directory was made"
# The same for `loom eval` and `loom sample`, whose ranks open the model and the data each: rank 1
# sees neither (its working directory lacks both relative paths).
cd "$WORK/node_a"
"$LOOM" train "$SRC/configs/tiny.yaml" --set train.steps=1 --set log.eval_every=0 --set checkpoint.dir=ck \
  --set log.dir="$WORK/ck.run" > "$WORK/ck.out" 2>&1 || { cat "$WORK/ck.out"; fail "making a checkpoint failed"; }
for cmd in "eval ck --data data/fortunes --batches 2" "sample ck --max-tokens 4" \
           "eval $WORK/node_a/ck --data data/fortunes --batches 2"; do
  set +e
  # shellcheck disable=SC2086
  timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np 1 -wdir "$WORK/node_a" "$LOOM" $cmd : \
    -np 1 -wdir "$WORK/node_b" "$LOOM" $cmd > "$WORK/cmd.out" 2> "$WORK/cmd.err"; rc=$?
  set -e
  [ "$rc" != 124 ] || { cat "$WORK/cmd.err"; fail "loom $cmd, rank 1 without its files: mpirun hung"; }
  [ "$rc" = 2 ] || { cat "$WORK/cmd.err"; fail "loom $cmd, rank 1 without its files: exit $rc, expected 2"; }
  n=$(grep -c "error: rank 1: \(ck\|--data=data/fortunes\): no such file" "$WORK/cmd.err" || true)
  [ "$n" = 1 ] || { cat "$WORK/cmd.err"; fail "loom $cmd: the error naming rank 1 was printed $n times, expected once"; }
done
cd "$SRC"
# One node whose GPU is unusable (here: rank 1 alone asks for CUDA, on a machine without a usable
# one): every rank exits 2, naming rank 1, for train and eval.
if "$LOOM" --version | grep -q "^backends: .*cuda (" && ! "$LOOM" --version | grep -q "no device"; then
  echo "a CUDA device is usable here: the unusable-GPU case does not apply"
else
  for cmd in "train $SRC/configs/tiny.yaml --set log.dir=$WORK/gpu.run" "eval $WORK/node_a/ck --data $SRC/data/fortunes --batches 2"; do
    set +e
    # shellcheck disable=SC2086
    timeout 60 "$MPIEXEC" --oversubscribe --bind-to none -np 1 "$LOOM" $cmd : \
      -np 1 "$LOOM" $cmd $( [ "${cmd%% *}" = train ] && echo --set train.backend=cuda || echo --backend cuda ) \
      > "$WORK/gpu.out" 2> "$WORK/gpu.err"; rc=$?
    set -e
    [ "$rc" != 124 ] || { cat "$WORK/gpu.err"; fail "${cmd%% *}, one rank without a usable GPU: mpirun hung"; }
    [ "$rc" = 2 ] || { cat "$WORK/gpu.err"; fail "${cmd%% *}, one rank without a usable GPU: exit $rc, expected 2"; }
    key=$( [ "${cmd%% *}" = train ] && printf %s train.backend || printf %s --backend )
    n=$(grep -c "error: rank 1: $key=cuda" "$WORK/gpu.err" || true)
    [ "$n" = 1 ] || { cat "$WORK/gpu.err"; fail "${cmd%% *}: the error naming rank 1 was printed $n times, expected once"; }
  done
  [ ! -e "$WORK/gpu.run" ] || fail "one rank without a usable GPU: a run directory was made"
fi
echo PASS
