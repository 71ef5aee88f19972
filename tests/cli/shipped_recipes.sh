# Every recipe in configs/ resolves (for the world size it is meant for), and `loom config`
# output reads back as the same recipe.
source "$(dirname "$0")/common.sh"
for r in "$SRC"/configs/*.yaml; do
  world=$(sed -n 's/^# world: *\([0-9]*\).*/\1/p' "$r" | head -1)
  "$LOOM" config "$r" --world "${world:-1}" > "$WORK/resolved.yaml" || fail "$r does not resolve"
  "$LOOM" config "$WORK/resolved.yaml" --world "${world:-1}" > "$WORK/again.yaml" || fail "resolved $r does not load"
  diff <(tail -n +2 "$WORK/resolved.yaml") <(tail -n +2 "$WORK/again.yaml") || fail "$r does not round-trip"
  echo "ok $r (world ${world:-1})"
done
# `loom plan --search` chooses the layout itself: a recipe written for 8 GPUs per node searched on
# a node of 3 (tp and dp of the recipe do not divide 3) still finds layouts, best first.
for r in gpt2-124m gpt2-1558m; do
  "$LOOM" plan "$SRC/configs/$r.yaml" --nodes 1 --gpus-per-node 3 --gpu h100-80g --search > "$WORK/search.txt" ||
    fail "plan --search $r on 3 GPUs: exit $?: $(head -3 "$WORK/search.txt")"
  grep -q "^plan --search: [1-9][0-9]* layouts for 1 node(s) x 3 h100-80g" "$WORK/search.txt" || fail "$(head -2 "$WORK/search.txt")"
  sed -n 3p "$WORK/search.txt" | grep -q " yes$" || fail "plan --search $r: the best layout does not fit: $(sed -n 2,3p "$WORK/search.txt")"
  echo "ok plan --search $r on 3 GPUs: $(sed -n 3p "$WORK/search.txt" | tr -s ' ')"
done
# The recipe's own micro_batch (16) need not divide the global batch searched (8): the search
# picks the micro-batch.
"$LOOM" plan "$SRC/configs/gpt2-124m.yaml" --nodes 1 --gpus-per-node 8 --gpu h100-80g --search \
  --set train.global_batch=8 > "$WORK/small.txt" 2>&1 || fail "plan --search at global batch 8: $(head -3 "$WORK/small.txt")"
grep -q "^plan --search: [1-9][0-9]* layouts for 1 node(s) x 8 h100-80g, global batch 8 " "$WORK/small.txt" ||
  fail "plan --search at global batch 8: $(head -2 "$WORK/small.txt")"
# No layout at all: an error (exit 2), not an empty table and exit 0.
set +e
"$LOOM" plan "$SRC/configs/tiny.yaml" --set train.global_batch=7 --set train.micro_batch=1 --gpus-per-node 3 --gpu cpu \
  --search > "$WORK/none.txt" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || fail "plan --search with no layout: exit $rc, expected 2"
grep -q "^loom plan: error: no layout: train.global_batch=7" "$WORK/none.txt" || fail "no layout: $(cat "$WORK/none.txt")"
echo PASS
