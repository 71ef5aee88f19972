#!/usr/bin/env bash
# Rewrites the key table in docs/recipes.md from `loom config --keys` (the test
# docs_recipe_key_table_current fails until this is run after a key changes).
set -euo pipefail
cd "$(dirname "$0")/.."
table=$("${LOOM:-build/loom}" config --keys)
python3 - "$table" <<'PY'
import re, sys
p = "docs/recipes.md"
s = open(p).read()
start = s.index("## Every key\n\n") + len("## Every key\n\n")
end = s.index("\n\n", start)
open(p, "w").write(s[:start] + sys.argv[1] + s[end:])
PY
