# Data parallelism changes nothing but the speed: dp=2 and dp=4, with and without ZeRO-1, and
# with overlap off, give the single-rank losses and grad norms of the tiny recipe over 50 steps
# within 1e-5 relative (the same global batch: only how it is split changes). ZeRO-1 divides the
# optimizer state per rank by dp.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1  # several ranks share 2 cores
run() {  # name np extra-args...
  local name=$1 np=$2; shift 2
  mpi -np "$np" "$LOOM" train configs/tiny.yaml --set train.steps=50 --set log.every=1 --set log.eval_every=0 \
    --set parallel.bucket_mb=0.25 --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" || fail "$name failed"
  grep -o "optimizer state [0-9.]* MB" "$WORK/$name.out" | head -1 | sed "s/^/$name: /"
}
run single 1
run dp2 2
run dp4 4
run dp2_zero1 2 --set parallel.zero=1
run dp4_zero1 4 --set parallel.zero=1
run dp4_no_overlap 4 --set parallel.overlap_grad_reduce=false
python3 - "$WORK" <<'PY'
import json, sys, re
work = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
ref = load("single")
assert len(ref) == 50
for name in ("dp2", "dp4", "dp2_zero1", "dp4_zero1", "dp4_no_overlap"):
    rows = load(name)
    assert len(rows) == 50, name
    worst = 0.0
    for a, b in zip(ref, rows):
        for k in ("loss", "grad_norm"):
            rel = abs(a[k] - b[k]) / abs(a[k])
            worst = max(worst, rel)
            assert rel <= 1e-5, f"{name} step {a['step']} {k}: {b[k]} vs single-rank {a[k]} (rel {rel:.2e})"
    print(f"{name}: 50 steps match the single rank, worst relative difference {worst:.1e}")
def state(name):
    return float(re.search(r"optimizer state ([0-9.]+) MB", open(f"{work}/{name}.out").read()).group(1))
full, z4 = state("dp4"), state("dp4_zero1")
print(f"optimizer state per rank: zero=0 {full} MB, zero=1 dp=4 {z4} MB")
assert abs(z4 * 4 - full) / full < 0.01, "ZeRO-1 at dp=4 should hold a quarter of the optimizer state"
PY
echo PASS
