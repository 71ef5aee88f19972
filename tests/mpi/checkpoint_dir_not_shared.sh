# checkpoint.dir must be one directory that every rank sees. Two ranks started by one mpirun in
# different working directories (MPMD, `-wdir`), each with its own relative `ck`, stand for node-
# local disks. Each case ends the job promptly with an error naming rank 1 (no rank waits in a
# collective that another left):
#   1. at start: rank 1 does not see rank 0's probe file in checkpoint.dir: exit 2, no run
#      directory, checkpoint.dir left empty;
#   2. at a save: checkpoint.dir shared at start (both `ck` are links to one directory), then
#      rank 1's link turned away during step 2 (a lost mount): the save at step 2 fails on every
#      rank (exit 1, MPI_Abort as any failed save), and its partial directory is removed; with
#      checkpoint.async too;
#   3. at a resume: checkpoint.resume=PATH (relative) that only rank 0 sees: exit 2, no run directory.
source "$(dirname "$0")/../cli/common.sh"
WORK=$(cd "$WORK" && pwd -P)  # as the ranks' working directories print it (TMPDIR may be a link)
corpus
export OMP_NUM_THREADS=1
for node in a b; do mkdir -p "$WORK/$node/ck"; ln -s "$SRC/data" "$WORK/$node/data"; done
two_nodes() {  # OUT ARGS...: rank 0 in $WORK/a, rank 1 in $WORK/b, the same arguments
  local out=$1; shift
  set +e
  timeout 90 "$MPIEXEC" --oversubscribe --bind-to none -x LOOM_FAULT -np 1 -wdir "$WORK/a" "$LOOM" "$@" : \
    -np 1 -wdir "$WORK/b" "$LOOM" "$@" > "$WORK/$out" 2>&1
  rc=$?
  set -e
  echo "$rc" > "$WORK/$out.rc"
  [ "$rc" != 124 ] || { cat "$WORK/$out"; fail "$out: the job hung (killed after 90 s)"; }
}
says_once() {  # OUT PATTERN WHAT
  local n
  n=$(grep -c -- "$2" "$WORK/$1" || true)
  [ "$n" = 1 ] || { cat "$WORK/$1"; fail "$3: expected the error once, found $n times: $2"; }
}
train=(train "$SRC/configs/tiny.yaml" --set train.steps=4 --set log.every=1 --set log.eval_every=0)
export LOOM_FAULT=

# 1. Not shared from the start.
two_nodes start.out "${train[@]}" --set checkpoint.dir=ck --set checkpoint.every=2 --set log.dir="$WORK/start.run"
[ "$rc" = 2 ] || { cat "$WORK/start.out"; fail "start: exit $rc, expected 2"; }
says_once start.out "rank 1: checkpoint.dir=ck: rank 0 made ck/.loom_shared_probe.* and this rank does not see it (working directory $WORK/b)" start
[ ! -e "$WORK/start.run" ] || fail "start: a run directory was made"
[ -z "$(ls -A "$WORK/a/ck")$(ls -A "$WORK/b/ck")" ] || { ls -la "$WORK/a/ck" "$WORK/b/ck"; fail "start: checkpoint.dir not left empty"; }

# 2. Shared at start, not at the first save; the save written in the step (checkpoint.async
# false) and by the background writer (true: its error comes out at the next save's wait).
mkdir -p "$WORK/shared" "$WORK/lost"
for node in a b; do rmdir "$WORK/$node/ck"; done
for async in false true; do
  ln -sfn "$WORK/shared" "$WORK/a/ck"
  ln -sfn "$WORK/shared" "$WORK/b/ck"
  out=save_$async.out
  export LOOM_FAULT=sleep@0:2:4
  two_nodes "$out" "${train[@]}" --set checkpoint.dir=ck --set checkpoint.every=2 --set checkpoint.async=$async \
    --set log.dir="$WORK/save_$async.run" &
  job=$!
  for _ in $(seq 600); do grep -q "LOOM_FAULT: sleeping" "$WORK/$out" 2>/dev/null && break; sleep 0.1; done
  grep -q "LOOM_FAULT: sleeping" "$WORK/$out" || { cat "$WORK/$out"; fail "save ($async): the slow step never came"; }
  ln -sfn "$WORK/lost" "$WORK/b/ck"
  wait "$job" || fail "save ($async): see above"
  export LOOM_FAULT=
  rc=$(cat "$WORK/$out.rc")
  [ "$rc" = 1 ] || { cat "$WORK/$out"; fail "save ($async): exit $rc, expected 1"; }
  grep -q "^step      2/4" "$WORK/$out" || { cat "$WORK/$out"; fail "save ($async): step 2 did not finish"; }
  if [ "$async" = false ] && grep -q "^step      3/4" "$WORK/$out"; then
    cat "$WORK/$out"; fail "save: training went on past the failed save"
  fi
  # (A failed save ends in MPI_Abort on every rank that reaches it: one or more copies.)
  grep -q "saving checkpoint ck/step_00000002 failed: rank 1: checkpoint.dir=ck: rank 0 made ck/step_00000002.partial and this rank does not see it" "$WORK/$out" ||
    { cat "$WORK/$out"; fail "save ($async): the error does not name rank 1 and the partial directory"; }
  [ -z "$(ls "$WORK/shared")" ] || { ls -la "$WORK/shared"; fail "save ($async): the failed save left something behind"; }
  [ -z "$(ls -A "$WORK/lost")" ] || fail "save ($async): rank 1 wrote into its own directory"
done

# 3. A checkpoint to resume from that only rank 0 sees.
ln -sfn "$WORK/shared" "$WORK/b/ck"
(cd "$WORK/a" && "$LOOM" train "$SRC/configs/tiny.yaml" --set train.steps=2 --set log.eval_every=0 \
  --set checkpoint.dir=own --set checkpoint.every=2 --set log.dir="$WORK/own.run" > "$WORK/own.out" 2>&1) ||
  { cat "$WORK/own.out"; fail "resume: making the checkpoint failed"; }
two_nodes resume.out "${train[@]}" --set checkpoint.resume=own/step_00000002 --set log.dir="$WORK/resume.run"
[ "$rc" = 2 ] || { cat "$WORK/resume.out"; fail "resume: exit $rc, expected 2"; }
says_once resume.out "rank 1: rank 0 resumes from own/step_00000002/manifest.json and this rank does not see it (working directory $WORK/b)" resume
[ ! -e "$WORK/resume.run" ] || fail "resume: a run directory was made"
echo PASS
