#!/usr/bin/env bash
# Fixed against goodput batch policies on the same budget of sequences (docs/batch_size.md):
# tiny with d_model 256 (3.3M parameters, 13 MB of fp32 gradients), micro_batch 4, dp 2, the
# learning rate's reference batch 8, a budget of 300 x 8 = 2400 sequences, for
#   fixed 8       the reference (300 steps)
#   fixed 32      a 4x larger fixed batch, same budget (75 steps), same learning rate x sqrt(4)
#   goodput       batch in [8, 64], re-decided every 20 steps, measured step time, sqrt rule
# in two places:
#   cluster  2 simulated nodes x 1 rank on a 1 Gbit link (scripts/with_test_cluster.sh, root):
#            the exposed gradient reduction makes the step's fixed cost t0 larger than a round's
#   host     the same 2 ranks on this host (shared memory): t0 is a few ms
# Prints, per run: the steps, the batches used, the training time (sum of step times), the
# sequences and training seconds until the validation loss (8 batches, every 20 steps) first
# reaches 2.85 and 2.76, and the final validation loss. The runs alternate, ROUNDS rounds (default 2).
#   scripts/bench_goodput.sh [cluster|host|all] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
where=${1:-all} rounds=${2:-2}
export LOOM=$(readlink -f "${LOOM:-build/loom}") OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash scripts/prepare_fortunes.sh data/fortunes "$LOOM" > /dev/null
work=$(mktemp -d /tmp/loom_bench_goodput.XXXXXX)
trap 'rm -rf "$work"' EXIT
model=(--set model.d_model=256 --set train.micro_batch=4 --set log.every=1 --set log.eval_every=20
       --set log.eval_batches=8)
policy() {  # name -> recipe overrides
  case $1 in
    fixed8) echo "--set train.global_batch=8 --set train.steps=300" ;;
    fixed32) echo "--set train.global_batch=32 --set train.steps=75 --set optim.lr=6e-3 --set optim.min_lr=6e-4 --set optim.warmup_steps=5" ;;
    goodput) echo "--set train.global_batch=8 --set train.steps=300 --set train.batch_policy=goodput --set train.batch_max=64 --set train.batch_every=20" ;;
  esac
}
run() {  # place name round
  local dir="$work/$1-$2-$3"
  # shellcheck disable=SC2046
  if [ "$1" = cluster ]; then
    scripts/with_test_cluster.sh --nodes 2 --rate 1gbit -- sh -c "\$CLUSTER_MPIRUN -np 2 --map-by ppr:1:node \
      -x OMP_NUM_THREADS \"\$LOOM\" train configs/tiny.yaml ${model[*]} $(policy "$2") --set log.dir=$dir" > "$dir.out" 2>&1
  else
    mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS "$LOOM" train configs/tiny.yaml "${model[@]}" \
      $(policy "$2") --set log.dir="$dir" > "$dir.out" 2>&1
  fi || { tail -20 "$dir.out"; exit 1; }
  /usr/bin/python3 - "$dir" "$1 $2 round $3" <<'PY'
import json, sys
d, name = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"step"' in l]
gb = [r.get("global_batch", None) for r in rows]
fixed = gb[0] is None
# Sequences and training seconds (the sum of step times: evaluations and start-up excluded) at
# each evaluation; a target's crossing is interpolated between the two evaluations around it.
seqs, t, curve = 0, 0.0, [(0, 0.0, 99.0)]
for r in rows:
    seqs += r.get("global_batch", 0) or (8 if "fixed8" in name else 32)
    t += r["step_ms"] / 1e3
    if "val_loss" in r: curve.append((seqs, t, r["val_loss"]))
def reach(target):
    for (s0, t0, v0), (s1, t1, v1) in zip(curve, curve[1:]):
        if v1 <= target:
            f = (v0 - target) / (v0 - v1) if v0 > v1 else 1.0
            return f"to val {target}: {s0 + f * (s1 - s0):.0f} seq, {t0 + f * (t1 - t0):.1f} s"
    return f"to val {target}: not reached"
val = curve[-1][2]
batches = sorted(set(b for b in gb if b)) if not fixed else ["fixed"]
reached = "  ".join(reach(x) for x in (2.85, 2.76))
print(f"{name:24s} {len(rows):4d} steps, batches {batches}, {seqs} seq, {t:.1f} s training | {reached} | val {val:.4f}")
PY
}
places=()
[ "$where" = all ] || [ "$where" = cluster ] && places+=(cluster)
[ "$where" = all ] || [ "$where" = host ] && places+=(host)
for place in "${places[@]}"; do
  for round in $(seq "$rounds"); do
    for name in fixed8 goodput fixed32; do run "$place" "$name" "$round"; done
  done
  grep -h "global batch .* -> " "$work/$place"-goodput-*.out | sed "s/^/$place: /" || echo "$place: goodput kept the batch"
done
