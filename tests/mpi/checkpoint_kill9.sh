# kill -9 at random moments, of one rank or of the whole job, including mid-save: every restart
# resumes from the last complete checkpoint, and the run reaches bitwise the same final
# parameters as an uninterrupted one.
#   checkpoint_kill9.sh LOOM SRC MPIEXEC [TRIALS]
# KILL9_SET="--set parallel.zero=3" runs every job (the reference too) with those overrides.
source "$(dirname "$0")/../cli/common.sh"
trials=${4:-4}
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
# The small model, 80 steps (~0.9 s of start-up and ~2.8 s of training on 2 ranks here).
# shellcheck disable=SC2206
args=("${SMALL[@]}" --set train.steps=80 --set log.eval_every=0 --set checkpoint.every=4 --set checkpoint.keep_last=2 ${KILL9_SET:-})
t0=$(date +%s%N)
mpi -np 2 "$LOOM" train configs/tiny.yaml "${args[@]}" --set checkpoint.dir="$WORK/ref" --set log.dir="$WORK/rref" > /dev/null
ref_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
tensors() { "$LOOM" ckpt inspect "$1" | sed -n '/tensors/,/recipe:/p'; }
tensors "$WORK/ref" > "$WORK/ref.tensors"
RANDOM=1234  # reproducible kill times
for trial in $(seq 1 "$trials"); do
  ck="$WORK/ck$trial"
  kills=0
  for attempt in 1 2 3 4 5 6; do
    # mpirun itself in the background (not through a function), so that $! is its pid.
    "$MPIEXEC" --oversubscribe --bind-to none -np 2 "$LOOM" train configs/tiny.yaml "${args[@]}" \
      --set checkpoint.dir="$ck" --set log.dir="$WORK/r$trial" > "$WORK/t$trial.$attempt.out" 2>&1 &
    job=$!
    if [ "$attempt" -le 2 ]; then
      # In proportion to the uninterrupted run's time, whatever this machine's speed: the first
      # launch at 40-95% of it (past the start-up, about a quarter of it, and before the end), the
      # restart, which has fewer steps left, at 15-60% (sometimes while it loads the checkpoint;
      # sometimes after it finished).
      ms=$(( attempt == 1 ? ref_ms * (40 + RANDOM % 56) / 100 : ref_ms * (15 + RANDOM % 46) / 100 ))
      sleep "$(( ms / 1000 )).$(printf %03d $(( ms % 1000 )))"
      pids=$(pgrep -f -- "checkpoint.dir=$ck" | grep -v "^$job$" || true)
      # (if/then, not `[ ] && echo`: a rank that exits between pgrep and ps, as the restart
      # finishes, would make the loop's status 1 and end the script through set -e, silently.)
      pids=$(for p in $pids; do if [ "$(ps -o comm= -p "$p" 2>/dev/null)" = loom ]; then echo "$p"; fi; done)
      if [ -n "$pids" ]; then
        if [ $(( RANDOM % 2 )) = 0 ]; then
          victim=$(echo "$pids" | head -1); kill -9 "$victim" 2>/dev/null || true; what="rank pid $victim"
        else
          kill -9 $pids "$job" 2>/dev/null || true; what="the whole job"
        fi
        kills=$((kills + 1))
      fi
      wait "$job" 2>/dev/null || true
      # No rank may outlive the kill (mpirun takes the others down when one dies).
      for p in $pids; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && { kill -9 "$p"; fail "trial $trial: rank $p survived for 5 s"; }
      done
      last=$(ls "$ck" 2>/dev/null | grep '^step_[0-9]*$' | tail -1 || true)
      partial=$(ls "$ck" 2>/dev/null | grep -c 'partial$' || true)
      [ "$partial" = 0 ] || what="$what, mid-save (a .partial directory was left)"
      echo "trial $trial attempt $attempt: killed ${what:-nothing (finished first)}; newest complete checkpoint: ${last:-none}"
      what=""
      [ -e "$ck/step_00000080/manifest.json" ] && break
    else
      wait "$job" || fail "trial $trial: the uninterrupted restart failed: $(tail -5 "$WORK/t$trial.$attempt.out")"
      break
    fi
  done
  grep -h "resumed from" "$WORK"/t"$trial".*.out | sed "s/^/trial $trial: /" || true
  resumes=$(( ${resumes:-0} + $(cat "$WORK"/t"$trial".*.out | grep -c "resumed from" || true) ))
  diff "$WORK/ref.tensors" <(tensors "$ck") > /dev/null || fail "trial $trial: final parameters differ from the uninterrupted run"
  echo "trial $trial: $kills kills, final parameters bitwise equal to the uninterrupted run"
done
# A kill that always came before the first checkpoint would test nothing of resuming.
[ "${resumes:-0}" -ge 1 ] || fail "no restart resumed from a checkpoint: every kill came before the first save"
echo "$resumes restarts resumed from a checkpoint"
echo PASS
