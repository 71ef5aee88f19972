# Stopping a run with a signal saves what it promises (docs/runs.md, "Stopping a run"). Two ranks
# of the tiny model; rank 0 sleeps 4 s inside step 3 (a slow step), and the signal arrives
# during it:
#  1. SIGUSR1 to mpirun (forwarded, never escalated): the step finishes, step 3 is saved, every
#     rank and mpirun exit 75;
#  2. SIGTERM to mpirun (what Ctrl-C in its terminal amounts to): Open MPI 4.1 kills the ranks
#     (odls_base_sigkill_timeout, 1 s), mid-step, as Loom warned at start; the last checkpoint
#     saved before (step 2) is intact and resumes. (With a longer odls_base_sigkill_timeout,
#     mpirun 4.1 still did not reliably forward the SIGTERM here: SIGUSR1 is the way.)
#  3. one process without a launcher: Ctrl-C (SIGINT) saves and exits 75; a second Ctrl-C ends it
#     at once.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
args=(--set train.steps=50 --set log.every=1 --set log.eval_every=0 --set checkpoint.every=1 --set checkpoint.keep_last=5)
# Starts the job in the background (pid in $job), output in $WORK/$1.out.
start() {
  local name=$1; shift
  LOOM_FAULT=sleep@0:3:4 "$MPIEXEC" --oversubscribe --bind-to none -x LOOM_FAULT "$@" -np 2 "$LOOM" train \
    configs/tiny.yaml "${args[@]}" --set checkpoint.dir="$WORK/$name.ck" --set log.dir="$WORK/$name.run" \
    > "$WORK/$name.out" 2>&1 &
  job=$!
}
# Waits until rank 0 is asleep in step 3 (it says so), then sends signal $2 to the job.
signal_in_step3() {
  for _ in $(seq 600); do grep -q "LOOM_FAULT: sleeping" "$WORK/$1.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "LOOM_FAULT: sleeping" "$WORK/$1.out" || { cat "$WORK/$1.out"; fail "$1: the slow step never came"; }
  sleep 0.5
  kill "-$2" "$job"
  set +e; wait "$job"; rc=$?; set -e
}
session_status() { python3 -c "import json; print(json.load(open('$WORK/$1.run/run.json'))['sessions'][-1]['exit_status'])"; }

# 1. SIGUSR1.
start usr1
signal_in_step3 usr1 USR1
[ "$rc" = 75 ] || { cat "$WORK/usr1.out"; fail "1: mpirun exit status $rc, expected 75"; }
grep -q "loom: stop requested (SIGUSR1" "$WORK/usr1.out" || fail "1: the stop was not announced"
[ -f "$WORK/usr1.ck/step_00000003/manifest.json" ] || fail "1: step 3 was not saved: $(ls "$WORK/usr1.ck")"
[ ! -e "$WORK/usr1.ck/step_00000004" ] || fail "1: it trained past the stop"
echo "1. SIGUSR1 during a 4 s step: step 3 saved, exit 75"

# 2. SIGTERM with mpirun's default grace of 1 s: warned at start; step 2 survives and resumes.
start term1
signal_in_step3 term1 TERM
grep -q "loom: note: SIGTERM or Ctrl-C to mpirun gives the ranks 1 s" "$WORK/term1.out" || fail "2: no warning at start"
[ "$rc" != 0 ] || fail "2: the killed job exited 0"
"$LOOM" ckpt inspect "$WORK/term1.ck/step_00000002" > /dev/null || fail "2: the step 2 checkpoint is damaged"
mpi -np 2 "$LOOM" train configs/tiny.yaml "${args[@]}" --set train.steps=4 --set checkpoint.dir="$WORK/term1.ck" \
  --set log.dir="$WORK/term1.run2" > "$WORK/term1b.out" 2>&1 || { cat "$WORK/term1b.out"; fail "2: no resume"; }
grep -q "resumed from .*step_0000000[23]" "$WORK/term1b.out" || fail "2: did not resume from the last checkpoint"
echo "2. SIGTERM with the default 1 s grace: killed mid-step (status $rc) as warned; $(grep -o "resumed from [^ ]*" "$WORK/term1b.out")"

# 3. Ctrl-C without a launcher: saved, 75; twice: at once.
"$LOOM" train configs/tiny.yaml "${args[@]}" --set checkpoint.dir="$WORK/int.ck" --set log.dir="$WORK/int.run" \
  > "$WORK/int.out" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "^step .* 2/50" "$WORK/int.out" 2>/dev/null && break; sleep 0.1; done
kill -INT "$job"
set +e; wait "$job"; rc=$?; set -e
[ "$rc" = 75 ] || { cat "$WORK/int.out"; fail "3: Ctrl-C: exit status $rc, expected 75"; }
grep -q "stop requested (SIGINT: Ctrl-C)" "$WORK/int.out" || fail "3: the stop was not announced"
LOOM_FAULT=sleep@0:2:30 "$LOOM" train configs/tiny.yaml "${args[@]}" --set log.dir="$WORK/int2.run" > "$WORK/int2.out" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "LOOM_FAULT: sleeping" "$WORK/int2.out" 2>/dev/null && break; sleep 0.1; done
t0=$(date +%s)
kill -INT "$job"; sleep 0.3; kill -INT "$job"
set +e; wait "$job"; rc=$?; set -e
[ "$rc" = 130 ] || { cat "$WORK/int2.out"; fail "3: Ctrl-C twice: exit status $rc, expected 130 (SIGINT)"; }
[ $(( $(date +%s) - t0 )) -le 5 ] || fail "3: Ctrl-C twice did not end the process at once"
echo "3. Ctrl-C: saved and 75; twice: ended at once (130)"
echo PASS
