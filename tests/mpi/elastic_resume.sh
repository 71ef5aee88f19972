# Elastic resume: a checkpoint saved by 4 ranks (dp 4, 3 micro-batches of 4 per rank: global batch
# 48) resumes on 2 ranks (dp 2, 6 micro-batches) and on 3 (dp 3, 4 micro-batches): the global batch
# and the data stream stay the same, so the loss of the tests' small model (SMALL in
# tests/cli/common.sh) goes on as in the uninterrupted 4-rank run, within 1e-6 relative at every
# step (the dp split changes only the order of the sums: measured 5e-9); each resumed
# session says so and records the resize in run.json. With train.global_batch auto (micro_batch x
# dp) the batch does change, and the message says so. A world the global batch cannot be split
# over (5 ranks) is refused, naming the keys.
#   elastic_resume.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
common=("${SMALL[@]}" --set train.micro_batch=4 --set train.global_batch=48 --set train.steps=30 --set log.every=1
        --set log.eval_every=0 --set checkpoint.every=0)
mpi -np 4 "$LOOM" train configs/tiny.yaml "${common[@]}" --set log.dir="$WORK/ref" > "$WORK/ref.out" 2>&1 ||
  { cat "$WORK/ref.out"; fail "the uninterrupted run failed"; }
mpi -np 4 "$LOOM" train configs/tiny.yaml "${common[@]}" --set log.dir="$WORK/first" --set checkpoint.dir="$WORK/ck4" \
  --set train.stop_at_step=15 > "$WORK/first.out" 2>&1 || { cat "$WORK/first.out"; fail "the 4-rank part failed"; }
for np in 2 3; do
  cp -r "$WORK/ck4" "$WORK/ck_on$np"
  cp -r "$WORK/first" "$WORK/run$np"
  mpi -np $np "$LOOM" train configs/tiny.yaml "${common[@]}" --set log.dir="$WORK/run$np" \
    --set checkpoint.dir="$WORK/ck_on$np" > "$WORK/resume$np.out" 2>&1 || { cat "$WORK/resume$np.out"; fail "resume on $np ranks failed"; }
  grep "elastic resume" "$WORK/resume$np.out" || { cat "$WORK/resume$np.out"; fail "no elastic resume message on $np ranks"; }
done
# train.global_batch auto (micro_batch x dp) is not kept: the message says it changes.
for np in 2 1; do
  mpi -np $np "$LOOM" train configs/tiny.yaml --set train.global_batch=auto --set train.steps=8 --set log.eval_every=0 \
    --set log.dir="$WORK/auto" --set checkpoint.dir="$WORK/ck_auto" --set train.stop_at_step=$(( np == 2 ? 4 : 0 )) \
    > "$WORK/auto$np.out" 2>&1 || { cat "$WORK/auto$np.out"; fail "global batch auto on $np ranks failed"; }
done
grep "elastic resume" "$WORK/auto1.out" | grep -q "the global batch changes from 16 to 8" ||
  { cat "$WORK/auto1.out"; fail "an automatic global batch that changed with dp is not said to change"; }
if mpi -np 5 "$LOOM" train configs/tiny.yaml "${common[@]}" --set log.dir="$WORK/run5" --set checkpoint.dir="$WORK/ck4" \
  > "$WORK/resume5.out" 2>&1; then fail "5 ranks (global batch 48 over dp 5) were accepted"; fi
grep -q "train.global_batch" "$WORK/resume5.out" || { cat "$WORK/resume5.out"; fail "the refusal does not name train.global_batch"; }
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
rows = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl") if '"step"' in l]
ref = rows("ref")
for np, accum in ((2, 6), (3, 4)):
    got = rows(f"run{np}")
    assert [r["step"] for r in got] == list(range(30)), f"{np} ranks: steps {[r['step'] for r in got]}"
    worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(ref, got))
    print(f"resumed on {np} ranks at step 15: worst relative loss difference to the 4-rank run {worst:.1e}")
    assert worst <= 1e-6, f"{np} ranks drift from the uninterrupted run"
    s = json.load(open(f"{w}/run{np}/run.json"))["sessions"]
    assert len(s) == 2 and "resized" not in s[0], s
    rz = s[1]["resized"]
    assert rz["from"]["dp"] == 4 and rz["to"]["dp"] == np and rz["to"]["grad_accum"] == accum and rz["global_batch"] == 48 \
        and rz["at_step"] == 15, rz
print("run.json records each resize")
PY
echo PASS
