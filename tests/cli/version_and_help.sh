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
echo PASS
