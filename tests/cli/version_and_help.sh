# `loom --version` names the version, the commit and the backends; `--help` lists subcommands.
source "$(dirname "$0")/common.sh"
out=$("$LOOM" --version)
echo "$out"
grep -qE '^loom [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]+(-dirty)?|unknown\)' <<<"$out" || fail "version line: $out"
grep -q '^backends: cpu' <<<"$out" || fail "backends line: $out"
help=$("$LOOM" --help)
for sub in train config bench; do grep -qE "^  $sub " <<<"$help" || fail "--help does not list $sub"; done
set +e
"$LOOM" frobnicate >/dev/null 2>&1; rc=$?
set -e
[ "$rc" = 2 ] || fail "an unknown subcommand exited $rc, expected 2"
# `loom bench` arguments out of range: exit 2 with the option named, never a std::bad_alloc
# (-n 100000), an endless loop of empty sizes (--min-bytes 0) or a crash (--max-bytes -1).
for args in "gemm -n -5" "gemm -n 0" "gemm -n 100000" "gemm --reps 0" "comm --min-bytes 0" "comm --max-bytes -1" \
            "comm --min-bytes 4096 --max-bytes 1024"; do
  set +e
  # shellcheck disable=SC2086
  out=$(timeout 20 "$LOOM" bench $args 2>&1); rc=$?
  set -e
  [ "$rc" = 2 ] || fail "loom bench $args exited $rc, expected 2: $out"
  grep -qE -- "-n|--reps|-bytes" <<<"$out" || fail "loom bench $args: no option named: $out"
  grep -q "terminate\|bad_alloc" <<<"$out" && fail "loom bench $args: $out"
done
# An unknown word under a subcommand group is named (it was "A subcommand is required"), the
# group alone says which subcommands it has; seeds out of 0..2^64-1 are refused (-1 wrapped).
for args in "bench foo:was not expected: foo" "ckpt foo:was not expected: foo" \
            "bench:loom bench: a subcommand is required: gemm or comm" "ckpt:loom ckpt: a subcommand is required: inspect" \
            "prep --out $WORK/p --seed -1 $SRC/README.md:--seed: expected an integer from 0 to 18446744073709551615, got '-1'" \
            "sample x --seed 18446744073709551616:--seed: expected an integer from 0 to 18446744073709551615"; do
  set +e
  # shellcheck disable=SC2086
  out=$("$LOOM" ${args%%:*} 2>&1); rc=$?
  set -e
  [ "$rc" = 2 ] || fail "loom ${args%%:*} exited $rc, expected 2: $out"
  grep -qF -- "${args#*:}" <<<"$out" || fail "loom ${args%%:*}: $out"
done
[ ! -e "$WORK/p" ] || fail "loom prep --seed -1 made its output"
echo PASS
