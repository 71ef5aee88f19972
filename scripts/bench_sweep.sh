#!/usr/bin/env bash
# Steps and wall time an early-stopping sweep saves against the full grid of the same trials:
# the spec (default configs/sweeps/tiny-lr-asha.yaml) as written, and as the grid (the same
# trials, scheduler.min_steps = max_steps: every trial to the end), alternately, N rounds.
#   scripts/bench_sweep.sh [--slurm] [--rounds N] [--spec SPEC] [--out DIR]
# --slurm: both through the one-node Slurm the tests bring up (tests/slurm/cluster.sh; root),
# every segment a batch job; otherwise local mpirun processes. Prints one line per run and the
# min/median; DIR (default /tmp/loom_bench_sweep) keeps the last round's sweep directories
# (curves.png, results.tsv) and a bench.tsv.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
spec=configs/sweeps/tiny-lr-asha.yaml rounds=2 slurm=0 out=/tmp/loom_bench_sweep
while [ $# -gt 0 ]; do
  case $1 in
    --slurm) slurm=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --spec) spec=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bash scripts/prepare_fortunes.sh data/fortunes build/loom > /dev/null
[ -e "$out" ] && { echo "bench_sweep: $out exists; give another --out or remove it" >&2; exit 2; }
mkdir -p "$out"
executor=()
if [ "$slurm" = 1 ]; then
  source tests/slurm/cluster.sh
  trap 'slurm_down' EXIT
  slurm_up
  executor=(--executor slurm --sbatch "--ntasks-per-node=1 --cpus-per-task=1 --time=30")
fi
/usr/bin/python3 - "$spec" "$out/grid.yaml" <<'PY'
import sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))
spec["scheduler"] = {"kind": spec.get("scheduler", {}).get("kind", "asha"), "min_steps": spec["max_steps"]}
yaml.safe_dump(spec, open(sys.argv[2], "w"), sort_keys=False)
PY
printf 'round\tkind\tsteps\twall_s\tbest\n' > "$out/bench.tsv"
for r in $(seq "$rounds"); do
  for kind in sweep grid; do
    s=$spec; [ "$kind" = grid ] && s=$out/grid.yaml
    rm -rf "$out/$kind"
    t0=$(date +%s.%N)
    scripts/sweep run "$s" --out "$out/$kind" "${executor[@]}" > "$out/$kind.log" 2>&1 ||
      { tail -20 "$out/$kind.log"; exit 1; }
    t1=$(date +%s.%N)
    /usr/bin/python3 - "$out/$kind/state.json" "$r" "$kind" "$t0" "$t1" >> "$out/bench.tsv" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["trials"]
done = [x["metrics"][-1][1] for x in t if x["status"] == "done"]
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sum(x['steps'] for x in t)}\t{float(sys.argv[5]) - float(sys.argv[4]):.1f}\t{min(done):.5f}")
PY
    tail -1 "$out/bench.tsv"
  done
done
/usr/bin/python3 - "$out/bench.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
for kind in ("sweep", "grid"):
    w = [float(r[3]) for r in rows if r[1] == kind]
    s = [int(r[2]) for r in rows if r[1] == kind]
    b = [float(r[4]) for r in rows if r[1] == kind]
    print(f"{kind}: steps {s[0]}, wall min {min(w):.1f} s, median {statistics.median(w):.1f} s, best val_loss {min(b):.5f}")
PY
