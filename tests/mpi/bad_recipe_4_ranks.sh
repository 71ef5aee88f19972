# Under mpirun, a bad recipe makes every rank exit 2 promptly, with the error printed once.
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
echo PASS
