#!/usr/bin/env bash
# The gradient noise scale on the tiny recipe (docs/batch_size.md):
#  1. a 300-step run at dp 2 (2 ranks) with the noise scale logged every step: prints B_simple
#     along the run and plots it with the loss (PNG, --png FILE, default /tmp/noise_scale_tiny.png);
#  2. what measuring it costs: runs of STEPS steps with log.noise_scale on and off, alternately,
#     ROUNDS each, at dp 2 and on one rank with accumulation; prints the median step time of each
#     (steps after the first 5) and the difference.
#   scripts/bench_noise_scale.sh [--png FILE] [--rounds N] [--steps N]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
png=/tmp/noise_scale_tiny.png rounds=3 steps=100
while [ $# -gt 0 ]; do
  case $1 in
    --png) png=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
bash scripts/prepare_fortunes.sh data/fortunes build/loom > /dev/null
work=$(mktemp -d /tmp/loom_bench_noise.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpi() { mpirun --oversubscribe --bind-to none "$@"; }
mpi -np 2 build/loom train configs/tiny.yaml --set log.every=1 --set log.eval_every=50 --set log.dir="$work/run300" \
  > "$work/run300.out"
/usr/bin/python3 - "$work/run300" "$png" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"step"' in l]
b = [(r["step"] + 1, r["b_simple"]) for r in rows if "b_simple" in r]
print("B_simple (sequences) at steps " + ", ".join(f"{s}: {v:.0f}" for s, v in b if s in (10, 25, 50, 100, 150, 200, 250, 300)))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot([s for s, _ in b], [v for _, v in b], color="C0", label="B_simple (sequences)")
ax.axhline(32, color="C0", ls=":", lw=1, label="the recipe's global batch (32)")
ax.set_xlabel("step"); ax.set_ylabel("B_simple (sequences)", color="C0"); ax.set_yscale("log")
ax2 = ax.twinx()
ax2.plot([r["step"] + 1 for r in rows], [r["loss"] for r in rows], color="C1", lw=0.8, alpha=0.8, label="loss")
ax2.set_ylabel("training loss (nats)", color="C1")
ax.set_title("Gradient noise scale, configs/tiny.yaml at dp 2 (EMA 0.95)")
fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.88), fontsize=8)
fig.tight_layout(); fig.savefig(sys.argv[2], dpi=110)
print(f"plot: {sys.argv[2]}")
PY
printf 'layout\tnoise\tround\tmedian_step_ms\n' > "$work/cost.tsv"
for r in $(seq "$rounds"); do
  for layout in dp2 accum4; do
    for on in true false; do
      np=2; [ "$layout" = accum4 ] && np=1
      d="$work/$layout-$on-$r"
      mpi -np $np build/loom train configs/tiny.yaml --set train.steps="$steps" --set log.every=1 --set log.eval_every=0 \
        --set log.noise_scale=$on --set log.tensorboard=false --set log.dir="$d" > /dev/null
      /usr/bin/python3 -c "
import json, statistics, sys
ms = [json.loads(l)['step_ms'] for l in open('$d/metrics.jsonl') if '\"step\"' in l][5:]
print('$layout\t$on\t$r\t%.3f' % statistics.median(ms))" >> "$work/cost.tsv"
      tail -1 "$work/cost.tsv"
    done
  done
done
/usr/bin/python3 - "$work/cost.tsv" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
for layout in ("dp2", "accum4"):
    on = [float(r[3]) for r in rows if r[0] == layout and r[1] == "true"]
    off = [float(r[3]) for r in rows if r[0] == layout and r[1] == "false"]
    print(f"{layout}: step time with the noise scale min {min(on):.2f} / median {statistics.median(on):.2f} ms, "
          f"without min {min(off):.2f} / median {statistics.median(off):.2f} ms "
          f"({100 * (statistics.median(on) / statistics.median(off) - 1):+.1f}% median)")
PY
