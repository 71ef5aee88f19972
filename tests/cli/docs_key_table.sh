# docs/recipes.md carries the key table exactly as `loom config --keys` prints it, so the docs
# cannot drift from the code.
source "$(dirname "$0")/common.sh"
"$LOOM" config --keys > "$WORK/keys.md"
while IFS= read -r line; do
  grep -qxF -- "$line" "$SRC/docs/recipes.md" || fail "docs/recipes.md lacks: $line (run scripts/update_recipe_docs.sh)"
done < "$WORK/keys.md"
echo PASS
