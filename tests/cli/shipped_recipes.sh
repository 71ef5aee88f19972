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
echo PASS
