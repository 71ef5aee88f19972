# parallel.bucket_mb: auto (docs/parallelism.md "Bucket size"): at dp 2 the tiny recipe trains
# with auto and with the explicit size auto picked (read from its log line) and must give the
# same losses and gradient norms bitwise at every step (auto switches at step 3; a dp 2 sum is
# one addition, the same whatever the buckets). At zero 1 the re-plan moves the moments to their
# new owners: LOOM_BUCKET_LINK stands in for a link that backward can hide (0.5 GB/s: 7 ms for the
# 3.4 MB, where one 25 MiB bucket would wait for the end of backward) so that auto picks a small
# size and the plan really changes; the run must match the explicit size within the zero tests' tolerance
# (steps 1-2 run at 25 MiB: another ownership, so the norm's partial sums are added in other
# pieces). Every logged step carries grad_reduce_hidden in [0, 1] and grad_reduce_ms > 0.
#   bucket_auto.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
run() {  # name overrides...
  local name=$1; shift
  mpi -np 2 "$LOOM" train configs/tiny.yaml --set train.steps=8 --set log.every=1 --set log.eval_every=0 \
    --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" 2>&1 || { cat "$WORK/$name.out"; fail "$name failed"; }
}
picked() {  # name -> the MiB auto chose
  sed -nE 's/^loom: gradient buckets: ([0-9.]+) MiB \(auto: dp bandwidth.*/\1/p' "$WORK/$1.out" | head -1
}
run auto --set parallel.bucket_mb=auto
mb=$(picked auto)
[ -n "$mb" ] || { cat "$WORK/auto.out"; fail "no 'gradient buckets: X MiB (auto: ...)' line"; }
grep -q '"grad_buckets_auto"' "$WORK/auto/run.json" || fail "run.json lacks grad_buckets_auto"
run fixed --set parallel.bucket_mb="$mb"
LOOM_BUCKET_LINK=0:0.5 run auto_zero1 --set parallel.bucket_mb=auto --set parallel.zero=1
mb1=$(picked auto_zero1)
[ -n "$mb1" ] || { cat "$WORK/auto_zero1.out"; fail "zero 1: no auto line"; }
run fixed_zero1 --set parallel.bucket_mb="$mb1" --set parallel.zero=1
grep -h "gradient buckets" "$WORK/auto.out" "$WORK/auto_zero1.out"
python3 - "$WORK" "$mb" "$mb1" <<'PY'
import json, sys
work, mb, mb1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
load = lambda n: [json.loads(l) for l in open(f"{work}/{n}/metrics.jsonl")]
assert mb1 < 3.4 / 1.048576, f"zero 1 with a slow link picked {mb1} MiB: the plan did not change (3.4 MB of gradients)"
for auto, fixed, exact in (("auto", "fixed", True), ("auto_zero1", "fixed_zero1", False)):
    a, b = load(auto), load(fixed)
    assert len(a) == len(b) == 8, (auto, len(a), len(b))
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm"):
            if exact:
                assert x[k] == y[k], f"{auto} step {x['step']}: {k} {x[k]!r} != {fixed}'s {y[k]!r}"
            else:  # the zero tests' tolerances (zero_matches_zero0.sh)
                tol = {"loss": 1e-5, "grad_norm": 1e-4}[k]
                assert abs(x[k] - y[k]) <= tol * abs(y[k]), f"{auto} step {x['step']}: {k} {x[k]!r} vs {y[k]!r}"
    for x in a + b:
        h = x.get("grad_reduce_hidden")
        assert h is not None and 0 <= h <= 1, f"{auto} step {x['step']}: grad_reduce_hidden {h!r}"
        assert x["grad_reduce_ms"] > 0 and x["backward_ms"] > 0, x
    print(f"{auto} ({mb if exact else mb1} MiB) matches {fixed} over 8 steps; hidden per step:",
          " ".join(f"{x['grad_reduce_hidden']:.2f}" for x in a))
PY
echo "PASS: bucket_mb auto"
