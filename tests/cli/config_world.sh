# `loom config --world N` with N < 1: a clear error and exit status 2 (it used to die of SIGFPE
# at 0, and print negative products at -3).
source "$(dirname "$0")/common.sh"
for w in 0 -3; do
  set +e
  "$LOOM" config "$SRC/configs/tiny.yaml" --world "$w" > "$WORK/out" 2> "$WORK/err"; rc=$?
  set -e
  [ "$rc" = 2 ] || fail "--world $w: exit status $rc, expected 2 (stderr: $(cat "$WORK/err"))"
  grep -q "loom: error: --world $w: the number of ranks must be at least 1" "$WORK/err" ||
    fail "--world $w: message: $(cat "$WORK/err")"
  [ ! -s "$WORK/out" ] || fail "--world $w: printed a recipe: $(head -3 "$WORK/out")"
  echo "ok --world $w: $(cat "$WORK/err")"
done
"$LOOM" config "$SRC/configs/tiny.yaml" --world 2 --set parallel.dp=auto | grep -q "^  dp: 2$" || fail "--world 2 no longer resolves dp"
echo PASS
