# Asking for the CUDA backend where it cannot run is a clear error with status 2, never a crash.
# (On a machine with a GPU and a CUDA build the message differs but the status is the same
# until the CUDA training path lands.)
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
set +e
"$LOOM" train "$SRC/configs/tiny.yaml" --set train.backend=cuda --set log.dir="$WORK/run" 2> "$WORK/err"; rc=$?
set -e
cat "$WORK/err"
[ "$rc" = 2 ] || fail "exit status $rc, expected 2"
grep -q "train.backend=cuda" "$WORK/err" || fail "the message does not name train.backend"
echo PASS
