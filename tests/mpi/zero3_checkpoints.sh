# ZeRO-3 checkpoints are ordinary checkpoints (global tensors; docs/checkpoints.md): a run saved
# under zero 3 at dp 4 resumes under zero 1 at dp 2, whose checkpoint resumes on one rank, and
# back again (that rank's checkpoint under zero 3 at tp 2 x dp 2), on the tests' small model
# (SMALL in tests/cli/common.sh). Every segment's losses match an uninterrupted zero-0 run at dp 4
# within 1e-6 relative (the layouts differ in summation order only, as in checkpoint_reshard.sh;
# measured 5e-9).
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
common=("${SMALL[@]}" --set train.steps=40 --set log.every=1 --set log.eval_every=0 --set checkpoint.every=10)
seg() {  # name np stop_at resume_from overrides...
  local name=$1 np=$2 stop=$3 from=$4; shift 4
  mpi -np "$np" "$LOOM" train configs/tiny.yaml "${common[@]}" --set train.stop_at_step="$stop" \
    --set checkpoint.dir="$WORK/ck_$name" --set checkpoint.resume="$from" --set log.dir="$WORK/$name" "$@" \
    > "$WORK/$name.out" 2>&1 || { [ $? = 75 ] || { cat "$WORK/$name.out"; fail "$name failed"; }; }
  [ "$from" = auto ] || grep -q "resumed from" "$WORK/$name.out" || fail "$name did not resume"
}
seg ref 4 40 auto
seg zero3_dp4 4 10 auto --set parallel.zero=3
seg zero1_dp2 2 20 "$WORK/ck_zero3_dp4/step_00000010" --set parallel.zero=1
seg single 1 30 "$WORK/ck_zero1_dp2/step_00000020"
seg zero3_tp2_dp2 4 40 "$WORK/ck_single/step_00000030" --set parallel.zero=3 --set parallel.tp=2
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
load = lambda n: [json.loads(l) for l in open(f"{work}/{n}/metrics.jsonl") if '"loss"' in l]
ref = {r["step"]: r for r in load("ref")}
assert len(ref) == 40
for name, steps in (("zero3_dp4", range(0, 10)), ("zero1_dp2", range(10, 20)), ("single", range(20, 30)),
                    ("zero3_tp2_dp2", range(30, 40))):
    rows = load(name)
    assert [r["step"] for r in rows] == list(steps), (name, [r["step"] for r in rows])
    worst = max(abs(ref[r["step"]]["loss"] - r["loss"]) / ref[r["step"]]["loss"] for r in rows)
    assert worst <= 1e-6, f"{name}: loss differs from the uninterrupted run by {worst:.2e} relative"
    print(f"{name}: steps {steps.start + 1}-{steps.stop} match the uninterrupted zero-0 run, worst relative loss difference {worst:.1e}")
PY
echo PASS
