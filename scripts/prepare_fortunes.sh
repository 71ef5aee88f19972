#!/usr/bin/env bash
# Builds the demo corpus: the ~2.5 MB of English text that Debian's `fortunes` package installs
# (each fortune, between lines holding '%', is one document), tokenised by `loom prep` at the
# byte level into OUT_DIR: train/val shards (5% of the documents) and manifest.json.
#   scripts/prepare_fortunes.sh [OUT_DIR] [LOOM_BINARY]    (defaults: data/fortunes, build/loom)
set -euo pipefail
out=${1:-data/fortunes}
loom=${2:-${LOOM:-build/loom}}
src=/usr/share/games/fortunes
if [ ! -d "$src" ]; then
  echo "prepare_fortunes.sh: $src not found; run scripts/setup.sh (it installs the 'fortunes' package)" >&2
  exit 2
fi
[ -s "$out/manifest.json" ] && exit 0
# Skip the index (.dat) files and the .u8 symlinks that duplicate the text files.
mapfile -t files < <(find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort)
# Written aside and renamed into place, so that concurrent callers (parallel tests) never see a
# half-written directory.
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"
"$loom" prep --tokenizer byte --doc-separator % --val-fraction 0.05 --out "$tmp" "${files[@]}"
# Another caller may have won the race (theirs is identical); anything else already at $out is
# left alone, never replaced, but said.
if ! mv -T "$tmp" "$out" 2>/dev/null && [ ! -s "$out/manifest.json" ]; then
  echo "prepare_fortunes.sh: $out exists but holds no manifest.json (not a complete loom prep output); left as it" \
       "is: remove it, or run: $loom prep --force --out $out ..." >&2
  exit 2
fi
