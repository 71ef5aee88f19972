# The ASHA sweep of tests/sweep/local_asha_vs_grid.sh (8 tiny trials, lr loguniform 1e-4..3e-2,
# rungs 30, 90, 180) through a real one-node Slurm: every segment a batch job (slurm/
# sweep_trial.sbatch, srun, 2 at a time). Mid-sweep the controller gets SIGTERM while a promoted
# trial is between rungs: it stops that job with `scancel --batch --signal=USR1` (loom saves a
# checkpoint and exits 75, no requeue) and exits; started again, it resumes that trial from the
# checkpoint the scancel left, promotes paused trials from theirs, and finishes with no step
# trained twice and at most 45% of the grid's steps.
#   sweep_asha.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: the test cluster's daemons need root"; exit 77; }
source "$(dirname "$0")/cluster.sh"
source "$(dirname "$0")/../sweep/tiny_lr_sweep.sh"
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
trap 'slurm_down; rm -rf "$WORK"' EXIT
slurm_up || fail "the test cluster did not start"
# A job submitted just before the controller was killed, whose id state.json never got: the
# restart adopts the live job of the trial's name that writes to the trial's log, and not one
# of the same name writing elsewhere (another sweep's).
mkdir -p "$WORK/adopt/trial_3" "$WORK/other"
for log in "$WORK/other/segments.log" "$WORK/adopt/trial_3/segments.log"; do
  want=$(sbatch --parsable --job-name=loom-sweep-3 --output="$log" --time=2 --wrap "sleep 60") ||
    fail "sbatch of a stand-in segment failed"
done
/usr/bin/python3 - "$SRC/scripts" "$WORK" "${want%%;*}" <<'PY' || fail "the Slurm executor did not adopt the stand-in segment by its log"
import sys
sys.path.insert(0, sys.argv[1])
from sweeplib.executors import SlurmExecutor
w, want = sys.argv[2], sys.argv[3]
ex = SlurmExecutor("loom", sys.argv[1])
assert ex.adopt(3, None, f"{w}/adopt/trial_3/run", f"{w}/adopt/trial_3/segments.log"), "not adopted"
assert ex.running[3] == want, (ex.running, want)
assert not ex.adopt(4, None, f"{w}/adopt/trial_4/run", f"{w}/adopt/trial_4/segments.log"), "adopted another trial's job"
assert not SlurmExecutor("loom", sys.argv[1], name="other").adopt(3, None, f"{w}/adopt/trial_3/run",
                                                                  f"{w}/adopt/trial_3/segments.log"), "adopted another sweep's"
print(f"adopted job {want} by its log")
PY
scancel --name=loom-sweep-3
tiny_lr_sweep "$WORK/asha.yaml" "{kind: asha, min_steps: 30, eta: 3}" \
  "{kind: slurm, parallel: 2, threads: 1, sbatch: '--ntasks-per-node=1 --cpus-per-task=1 --time=10'}"
out=$WORK/sweep
scripts/sweep run "$WORK/asha.yaml" --out "$out" --loom "$LOOM" > "$WORK/run1.log" 2>&1 &
pid=$!
# SIGTERM once a promoted trial is at least 5 steps past its last rung and 40 short of its next
# one (a first-rung segment of 30 steps is over in about a second, before the controller's poll,
# squeue and scancel have gone round; 40 steps leave it 1.5 s or more).
between_rungs() {
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
try:
    trials = json.load(open(f"{out}/state.json"))["trials"]
except (OSError, ValueError):
    sys.exit(1)
for t in trials:
    if t["status"] != "running":
        continue
    try:
        last = [json.loads(l) for l in open(f"{out}/trial_{t['id']}/run/metrics.jsonl")][-1]["step"] + 1
    except (OSError, ValueError, IndexError, KeyError):
        continue
    if t["steps"] + 5 <= last <= t["target"] - 40:
        sys.exit(0)
sys.exit(1)
PY
}
for _ in $(seq 900); do
  between_rungs && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -TERM $pid 2>/dev/null || { cat "$WORK/run1.log"; fail "the sweep ended before it could be stopped"; }
set +e; wait $pid; rc=$?; set -e
[ "$rc" != 0 ] || fail "the stopped controller exited 0"
grep -q "stopped by signal 15; run the same command again" "$WORK/run1.log" || { cat "$WORK/run1.log"; fail "no stop message"; }
[ -z "$(squeue -h)" ] || { squeue; fail "jobs left in the queue after the controller stopped"; }
# The scancelled segment: a session that ended 75 between two rungs.
stopped=$(/usr/bin/python3 - "$out" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(f"{sys.argv[1]}/trial_*/run/run.json")):
    s = json.load(open(p))["sessions"][-1]
    if s["exit_status"] == 75 and s["end_step"] not in (30, 90, 180):
        print(p.split("/")[-3], s["end_step"])
PY
)
[ -n "$stopped" ] || { cat "$WORK/run1.log"; fail "no trial was stopped with a checkpoint between rungs"; }
echo "stopped by scancel with a checkpoint: $stopped"
grep -q "SIGUSR1" "$out/$(echo "$stopped" | head -1 | cut -d' ' -f1)/segments.log" || fail "the job did not get SIGUSR1"

scripts/sweep run "$WORK/asha.yaml" --out "$out" --loom "$LOOM" > "$WORK/run2.log" 2>&1 ||
  { cat "$WORK/run2.log"; fail "the restarted sweep failed"; }
grep "sweep: resumed" "$WORK/run2.log"
sed -n '/^trial/,$p' "$WORK/run2.log"
check_no_step_trained_twice "$out"
while read -r trial step; do
  grep -q "resumed at step $step" "$out/$trial/segments.log" || fail "$trial did not resume from its step-$step checkpoint"
done <<< "$stopped"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
t = json.load(open(f"{sys.argv[1]}/state.json"))["trials"]
steps = sum(x["steps"] for x in t)
done = [x for x in t if x["status"] == "done"]
assert done and steps <= 0.45 * 8 * 180, (steps, [x["status"] for x in t])
# Promotions resumed from the rung's checkpoint: the trials trained past 30 steps resumed at 30.
for x in t:
    if x["steps"] > 30:
        log = open(f"{sys.argv[1]}/trial_{x['id']}/segments.log").read()
        assert "resumed at step 30" in log, f"trial {x['id']} was promoted but did not resume at step 30"
print(f"Slurm ASHA: {steps} steps ({100 * steps / 1440:.0f}% of the grid's 1440), best val_loss "
      f"{min(x['metrics'][-1][1] for x in done):.5f}")
PY
[ -z "$(squeue -h)" ] || fail "jobs left in the queue"
echo PASS
