# The start-of-run note on OpenMP threads oversubscribing the cores (engine/train/cpu_threads.hpp):
# 2 ranks (--bind-to none) of as many threads each as this process may use CPUs oversubscribe any
# machine: rank 0 says so once, with the thread count that fits (or, on 1 CPU, that there are more
# ranks than cores); 2 ranks of 1 thread each (on 2 CPUs or more) get no note. Without
# OMP_NUM_THREADS, each of the 2 ranks runs half the CPUs (said once, recorded in run.json) instead
# of OpenMP's default of all of them; with OpenMP's binding on, one rank keeps them all.
#   cpu_threads_note.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
# The CPUs this process may run on (its affinity: what the unbound ranks inherit; nproc would
# answer OMP_NUM_THREADS instead, if the environment sets it).
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
unset OMP_THREAD_LIMIT
run() {  # threads
  OMP_NUM_THREADS=$1 mpi -np 2 -x OMP_NUM_THREADS "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=1 \
    --set log.eval_every=0 --set log.dir="$WORK/t$1" > "$WORK/t$1.out" 2>&1 || { cat "$WORK/t$1.out"; fail "$1 threads: the run failed"; }
}
run "$cores"
out=$WORK/t$cores.out
n=$(grep -cE "^loom: note: 2 ranks on .* run $cores OpenMP threads? each: $(( 2 * cores )) threads on the $cores cores? they may run on\." "$out" || true)
[ "$n" = 1 ] || { cat "$out"; fail "2 ranks x $cores threads on $cores CPUs: the note was printed $n times, expected once"; }
if [ "$cores" -ge 2 ]; then
  grep -q "set OMP_NUM_THREADS=$(( cores / 2 )) (the cores each rank gets" "$out" || { cat "$out"; fail "the note does not say OMP_NUM_THREADS=$(( cores / 2 ))"; }
else
  grep -q "more ranks than cores on .*, run at most 1 there" "$out" || { cat "$out"; fail "1 CPU: the note does not say there are more ranks than cores"; }
fi
grep "OpenMP thread" "$out"
threads_record() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sessions"][0]["cpu_threads"])' "$1/run.json"; }
[ "$(threads_record "$WORK/t$cores")" = "{'per_rank': $cores, 'source': 'OMP_NUM_THREADS'}" ] ||
  fail "run.json: $(threads_record "$WORK/t$cores"), expected $cores threads from OMP_NUM_THREADS"
if [ "$cores" -ge 2 ]; then
  run 1
  if grep -q "OpenMP thread" "$WORK/t1.out"; then cat "$WORK/t1.out"; fail "2 ranks x 1 thread on $cores CPUs: a note was printed"; fi
  # Not set: half the CPUs each, and no oversubscription to speak of.
  ( unset OMP_NUM_THREADS
    mpi -np 2 "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=1 --set log.eval_every=0 \
      --set log.dir="$WORK/unset" > "$WORK/unset.out" 2>&1 ) || { cat "$WORK/unset.out"; fail "OMP_NUM_THREADS unset: the run failed"; }
  half=$(( cores / 2 ))
  n=$(grep -c "^loom: note: OMP_NUM_THREADS is not set: $half OpenMP threads\? per rank, not OpenMP's default $cores (2 ranks share the $cores cores on " "$WORK/unset.out" || true)
  [ "$n" = 1 ] || { cat "$WORK/unset.out"; fail "OMP_NUM_THREADS unset: the choice of $half threads was said $n times, expected once"; }
  if grep -q "threads on the" "$WORK/unset.out"; then cat "$WORK/unset.out"; fail "OMP_NUM_THREADS unset: still oversubscribed"; fi
  [ "$(threads_record "$WORK/unset")" = "{'per_rank': $half, 'source': 'cores'}" ] ||
    fail "run.json: $(threads_record "$WORK/unset"), expected $half threads from the cores"
  # OpenMP's binding on: libgomp pins the main thread to one CPU as it loads; the rank's CPUs are
  # its places', so one rank alone keeps every CPU (it was cut to 1 thread).
  ( unset OMP_NUM_THREADS
    OMP_PROC_BIND=true mpi -np 1 -x OMP_PROC_BIND "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=1 \
      --set log.eval_every=0 --set log.dir="$WORK/bound" > "$WORK/bound.out" 2>&1 ) ||
    { cat "$WORK/bound.out"; fail "OMP_PROC_BIND=true: the run failed"; }
  if grep -q "OpenMP thread" "$WORK/bound.out"; then cat "$WORK/bound.out"; fail "OMP_PROC_BIND=true, 1 rank: a note"; fi
  [ "$(threads_record "$WORK/bound")" = "{'per_rank': $cores, 'source': 'OpenMP'}" ] ||
    fail "OMP_PROC_BIND=true, 1 rank: run.json $(threads_record "$WORK/bound"), expected OpenMP's $cores threads"
fi
echo PASS
