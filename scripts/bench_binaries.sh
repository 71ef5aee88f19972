#!/usr/bin/env bash
# Training throughput of two loom binaries side by side (e.g. before and after a change), on the
# same recipe, the same threads and the same data, alternating runs so that a noisy, shared
# machine penalises both alike. Prints every run and min/median/max tokens/s per binary.
#   scripts/bench_binaries.sh OLD_LOOM NEW_LOOM [ROUNDS] [RECIPE]
# (defaults: 5 rounds of configs/bench-cpu.yaml). Needs data/fortunes (scripts/prepare_fortunes.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench_binaries.sh OLD_LOOM NEW_LOOM [ROUNDS] [RECIPE]}
new=${2:?usage: bench_binaries.sh OLD_LOOM NEW_LOOM [ROUNDS] [RECIPE]}
rounds=${3:-5}
recipe=${4:-configs/bench-cpu.yaml}
threads=${OMP_NUM_THREADS:-$(nproc)}
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
scripts/prepare_fortunes.sh data/fortunes "$new" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # binary label round
  local out
  out=$("$1" train "$recipe" --set log.dir="$tmp/$2-$3" --set log.tensorboard=false)
  sed -nE 's/^loom: trained .*, ([0-9.]+) tokens\/s,.*/\1/p' <<<"$out"
}
for i in $(seq 1 "$rounds"); do
  # Alternate which goes first, so neither always runs on a machine the other just warmed.
  if (( i % 2 )); then a=old; b=new; else a=new; b=old; fi
  for who in $a $b; do
    bin=$old; [[ $who == new ]] && bin=$new
    tps=$(run "$bin" "$who" "$i")
    echo "round $i $who $tps" | tee -a "$tmp/results"
  done
done
python3 - "$tmp/results" "$recipe" "$threads" <<'PY'
import statistics, sys
runs = {"old": [], "new": []}
for line in open(sys.argv[1]):
    _, _, who, tps = line.split()
    runs[who].append(float(tps))
print(f"{sys.argv[2]}, {sys.argv[3]} threads, {len(runs['old'])} alternating rounds (tokens/s)")
print(f"{'':5s} {'min':>9s} {'median':>9s} {'max':>9s}")
for who in ("old", "new"):
    v = runs[who]
    print(f"{who:5s} {min(v):9.0f} {statistics.median(v):9.0f} {max(v):9.0f}")
print(f"new / old (median) = {statistics.median(runs['new']) / statistics.median(runs['old']):.3f}")
PY
