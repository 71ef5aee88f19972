#!/usr/bin/env bash
# Builds the demo corpus: the ~2.5 MB of English text that Debian's `fortunes` package installs,
# concatenated in a fixed (sorted) order, split 95/5 into train and validation files.
#   scripts/prepare_fortunes.sh [OUT_DIR]    (default: data/)
set -euo pipefail
out=${1:-data}
src=/usr/share/games/fortunes
if [ ! -d "$src" ]; then
  echo "prepare_fortunes.sh: $src not found; run scripts/setup.sh (it installs the 'fortunes' package)" >&2
  exit 2
fi
mkdir -p "$out"
if [ -s "$out/fortunes_train.txt" ] && [ -s "$out/fortunes_val.txt" ]; then
  exit 0
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Skip the index (.dat) files and the .u8 symlinks that duplicate the text files.
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort | xargs cat > "$tmp"
total=$(stat -c %s "$tmp")
train=$(( total * 95 / 100 ))
head -c "$train" "$tmp" > "$out/fortunes_train.txt"
tail -c +"$(( train + 1 ))" "$tmp" > "$out/fortunes_val.txt"
echo "prepare_fortunes.sh: $out/fortunes_train.txt ($train bytes), $out/fortunes_val.txt ($(( total - train )) bytes)"
