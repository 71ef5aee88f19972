# No rank may hang when another fails. Four ranks (tp 2 x dp 2) of the tiny model:
#  1. one rank killed with SIGKILL mid-training: every rank exits, non-zero, within
#     parallel.timeout_s + 30 s, and the dead rank is named;
#  2. one rank stuck (asleep) inside a step: the others' watchdogs fire after parallel.timeout_s,
#     name the rank, call and group they were waiting in and the step, and the stuck rank (1) as
#     the one that has not reached the call (or, for a rank waiting on another waiting rank, as
#     the root of the wait); the job aborts;
#  3. one rank's whole process stopped (SIGSTOP: its watchdog cannot answer either): the others
#     name it as not answering, within a bounded wait, and the job aborts;
#  4. SIGTERM to a rank blocked in a collective that a stopped rank will never complete: it asks
#     the others, names the stopped rank and aborts within seconds, long before
#     parallel.timeout_s (the save the signal asks for cannot happen).
#  5. MPI_Abort itself hanging (Open MPI's mpi_abort_delay = -1, what a PMIx abort that cannot
#     reach srun looks like): the aborting rank ends itself after its deadline (bounded_abort.hpp).
# Every rank is named with its host: "1 on HOST".
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
timeout_s=10
args=(--set parallel.tp=2 --set train.steps=2000 --set log.every=1 --set log.eval_every=0 --set parallel.timeout_s=$timeout_s)
ranks_of() {  # (status 0 always: a pid that exits between pgrep and ps must not end the script)
  for p in $(pgrep -f -- "log.dir=$1" || true); do [ "$(ps -o comm= -p "$p" 2>/dev/null)" = loom ] && echo "$p"; done
  return 0
}
# No rank of log.dir $1 may be left 2 s after its job ended (checked every 0.1 s; the ones left
# then are killed and named): gone_within_2s DIR WHAT
gone_within_2s() {
  local left
  for _ in $(seq 20); do left=$(ranks_of "$1"); [ -z "$left" ] && return 0; sleep 0.1; done
  left=$(ranks_of "$1")
  [ -z "$left" ] || { kill -9 $left; fail "$2: ranks (pids $(echo $left)) still running 2 s after the job ended"; }
}

# Starts 4 ranks in the background with log.dir $WORK/TAG (output in $WORK/TAG.out, mpirun's pid
# in $job) and waits for the first step; WHAT names the case in a failure.
start_job() {  # TAG WHAT
  "$MPIEXEC" --oversubscribe --bind-to none -np 4 "$LOOM" train configs/tiny.yaml "${args[@]}" --set log.dir="$WORK/$1" \
    > "$WORK/$1.out" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^step .*/2000" "$WORK/$1.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "^step" "$WORK/$1.out" || { cat "$WORK/$1.out"; fail "$2: training never started"; }
}

# 1. kill -9 of one rank.
start_job k kill
pids=$(ranks_of "$WORK/k")
[ "$(echo "$pids" | wc -l)" = 4 ] || fail "kill: expected 4 rank processes, found: $pids"
victim=$(echo "$pids" | sed -n 3p)
t0=$(date +%s)
kill -9 "$victim"
set +e; wait "$job"; rc=$?; set -e
elapsed=$(( $(date +%s) - t0 ))
# Every rank gone (mpirun takes the others down when one dies).
for p in $pids; do
  while kill -0 "$p" 2>/dev/null && [ $(( $(date +%s) - t0 )) -le $(( timeout_s + 30 )) ]; do sleep 0.2; done
  kill -0 "$p" 2>/dev/null && { kill -9 $pids; fail "kill: rank pid $p still running after $(( timeout_s + 30 ))s"; }
done
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || fail "kill: mpirun exited 0 after a rank was killed"
grep -qi "rank [0-9]* .*\(exited on signal 9\|killed\)" "$WORK/k.out" || { cat "$WORK/k.out"; fail "kill: the dead rank was not named"; }
echo "kill -9: job ended in ${elapsed}s, status $rc: $(grep -i "exited on signal" "$WORK/k.out" | head -1)"

# 2. one rank asleep inside step 3.
t0=$(date +%s)
set +e
LOOM_FAULT=sleep@1:3:600 "$MPIEXEC" --oversubscribe --bind-to none -x LOOM_FAULT -np 4 "$LOOM" train configs/tiny.yaml \
  "${args[@]}" --set log.dir="$WORK/s" > "$WORK/s.out" 2>&1; rc=$?
set -e
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || fail "sleep: the job exited 0"
[ "$elapsed" -le $(( timeout_s + 45 )) ] || fail "sleep: the job took ${elapsed}s to end"
grep -q "rank 1: LOOM_FAULT: sleeping" "$WORK/s.out" || { cat "$WORK/s.out"; fail "sleep: the fault did not happen"; }
grep -q "loom: error: rank [0-9]* on [^ ]*: .* on the [a-z-]* group has not completed after [0-9]* s (training step 3)" "$WORK/s.out" ||
  { cat "$WORK/s.out"; fail "sleep: no watchdog message naming the rank, call, group and step"; }
# Every watchdog message names rank 1 (asleep, outside any communication call) as the rank that
# has not reached the call or as the root of the wait.
grep "has not completed after" "$WORK/s.out" > "$WORK/s.msgs" || true
while read -r line; do
  echo "$line" | grep -q "\(ranks that have not reached it\|at the root of the wait\): \(.*, \)\?1 on [^ ]* (in no communication call, training step 3)" ||
    { cat "$WORK/s.out"; fail "sleep: a watchdog message does not name the stuck rank 1: $line"; }
done < "$WORK/s.msgs"
[ -s "$WORK/s.msgs" ] || { cat "$WORK/s.out"; fail "sleep: no watchdog message"; }
gone_within_2s "$WORK/s" sleep
echo "stuck rank: job ended in ${elapsed}s, status $rc: $(head -1 "$WORK/s.msgs")"

# 3. one rank's process stopped: it answers nothing, and is named as such.
start_job t stop
pids=$(ranks_of "$WORK/t")
# The rank with OMPI_COMM_WORLD_RANK=1.
victim=""
for p in $pids; do
  tr '\0' '\n' < "/proc/$p/environ" > "$WORK/env" 2>/dev/null || continue
  if grep -qx OMPI_COMM_WORLD_RANK=1 "$WORK/env"; then victim=$p; fi
done
[ -n "$victim" ] || { kill -9 $pids; fail "stop: rank 1 not found among $pids"; }
t0=$(date +%s)
kill -STOP "$victim"
set +e; wait "$job"; rc=$?; set -e
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || fail "stop: the job exited 0"
[ "$elapsed" -le $(( timeout_s + 45 )) ] || fail "stop: the job took ${elapsed}s to end"
grep -q "has not completed after [0-9]* s (training step [0-9]*);.* ranks that did not answer within [0-9.]* s (dead, or the whole process stuck): \(.*, \)\?1 on [^ ]*\. Aborting" "$WORK/t.out" ||
  { cat "$WORK/t.out"; fail "stop: no watchdog message names rank 1 as not answering"; }
gone_within_2s "$WORK/t" stop
echo "stopped rank: job ended in ${elapsed}s, status $rc: $(grep "has not completed" "$WORK/t.out" | head -1)"

# 4. SIGTERM while blocked behind a stopped rank.
rank_pid() {  # PIDS RANK -> the pid with OMPI_COMM_WORLD_RANK=RANK
  for p in $1; do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; fi
  done
}
start_job g signal
pids=$(ranks_of "$WORK/g")
stopped=$(rank_pid "$pids" 1)
signalled=$(rank_pid "$pids" 0)
[ -n "$stopped" ] && [ -n "$signalled" ] || { kill -9 $pids; fail "signal: ranks 0 and 1 not found among $pids"; }
kill -STOP "$stopped"
sleep 1
t0=$(date +%s)
kill -TERM "$signalled"
set +e; wait "$job"; rc=$?; set -e
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || fail "signal: the job exited 0"
[ "$elapsed" -lt "$timeout_s" ] || { cat "$WORK/g.out"; fail "signal: the job took ${elapsed}s to end (parallel.timeout_s = $timeout_s): the signal did not cut the wait short"; }
grep -q "loom: error: rank 0 on [^ ]*: SIGTERM arrived while this rank was blocked in .* ranks that did not answer within [0-9.]* s (dead, or the whole process stuck): \(.*, \)\?1 on [^ ]*\. The step cannot complete" "$WORK/g.out" ||
  { cat "$WORK/g.out"; fail "signal: no message from rank 0 naming the stopped rank 1"; }
gone_within_2s "$WORK/g" signal
echo "SIGTERM behind a stopped rank: job ended in ${elapsed}s, status $rc"

# 5. A hanging MPI_Abort: watchdog after 5 s, its question (<= 2 s), the abort deadline (5 s).
t0=$(date +%s)
set +e
LOOM_FAULT=sleep@1:3:600 "$MPIEXEC" --oversubscribe --bind-to none --mca mpi_abort_delay -1 -x LOOM_FAULT -np 2 "$LOOM" \
  train configs/tiny.yaml "${args[@]}" --set parallel.tp=1 --set parallel.timeout_s=5 --set log.dir="$WORK/a" \
  > "$WORK/a.out" 2>&1; rc=$?
set -e
elapsed=$(( $(date +%s) - t0 ))
[ "$rc" = 3 ] || { cat "$WORK/a.out"; fail "abort: status $rc, expected 3"; }
grep -q "MPI_Abort did not end this rank in time; exiting" "$WORK/a.out" || { cat "$WORK/a.out"; fail "abort: the deadline did not end the rank"; }
[ "$elapsed" -le 20 ] || fail "abort: the job took ${elapsed}s to end (5 s timeout + 2 s question + 5 s deadline)"
echo "hanging MPI_Abort: job ended in ${elapsed}s, status $rc"
echo PASS
