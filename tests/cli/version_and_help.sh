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
echo PASS
