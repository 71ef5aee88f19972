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
echo PASS
