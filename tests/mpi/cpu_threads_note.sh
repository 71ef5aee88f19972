# The start-of-run note on OpenMP threads oversubscribing the cores (engine/train/cpu_threads.hpp):
# 2 ranks of nproc threads each (--bind-to none) oversubscribe any machine: rank 0 says so once,
# with the thread count that fits; 2 ranks of 1 thread each (on 2 cores or more) get no note.
#   cpu_threads_note.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
cores=$(nproc)
run() {  # threads
  OMP_NUM_THREADS=$1 mpi -np 2 -x OMP_NUM_THREADS "$LOOM" train configs/tiny.yaml "${SMALL[@]}" --set train.steps=1 \
    --set log.eval_every=0 --set log.dir="$WORK/t$1" > "$WORK/t$1.out" 2>&1 || { cat "$WORK/t$1.out"; fail "$1 threads: the run failed"; }
}
run "$cores"
n=$(grep -c "^loom: note: 2 ranks on .* run $cores OpenMP threads each: $(( 2 * cores )) threads on $cores cores" "$WORK/t$cores.out" || true)
[ "$n" = 1 ] || { cat "$WORK/t$cores.out"; fail "2 ranks x $cores threads on $cores cores: the note was printed $n times, expected once"; }
fit=$(( cores / 2 > 0 ? cores / 2 : 1 ))
grep -q "set OMP_NUM_THREADS=$fit (the cores / the ranks per node" "$WORK/t$cores.out" || { cat "$WORK/t$cores.out"; fail "the note does not say OMP_NUM_THREADS=$fit"; }
grep "OpenMP threads each" "$WORK/t$cores.out"
if [ "$cores" -ge 2 ]; then
  run 1
  if grep -q "OpenMP thread" "$WORK/t1.out"; then cat "$WORK/t1.out"; fail "2 ranks x 1 thread on $cores cores: a note was printed"; fi
fi
echo PASS
