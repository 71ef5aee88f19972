# The Slurm templates on a real (one-node) Slurm cluster, CPU backend, the tiny recipe at the tests'
# small shape (SMALL in tests/cli/common.sh):
#  1. sbatch of slurm/train-single-node.sbatch (srun --mpi=pmix, 2 ranks, the tensor-parallel
#     default from the 2 GPUs per node) completes and leaves a run directory and a checkpoint;
#     the same with LAUNCHER=mpirun;
#  2. a job signalled mid-run (SIGUSR1 to the batch shell, what --signal=B:USR1@N does before
#     the time limit) checkpoints, exits 75, requeues itself, resumes, and finishes with the
#     same losses as an uninterrupted run, bit for bit;
#  3. a 3-trial sweep runs as a job array (at most 2 at once) and `scripts/sweep summary` ranks it;
#  4. elastic: a 2-task job (slurm/loom_job.sh, --ntasks=2) is signalled, and while it waits to be
#     requeued it is shrunk to 1 task (scontrol update NumTasks=1): it restarts as one rank,
#     resumes the dp-2 checkpoint with the global batch kept (4 micro-batches instead of 2) and
#     finishes; run.json records both sessions and the resize.
#   slurm_jobs.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: the test cluster's daemons need root"; exit 77; }
source "$(dirname "$0")/cluster.sh"
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
trap 'slurm_down; rm -rf "$WORK"' EXIT
slurm_up || fail "the test cluster did not start"
export OMP_NUM_THREADS=1 LOOM
small=(--ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 --time=10)
tiny="${SMALL[*]} --set log.eval_every=0 --set log.every=1 --set checkpoint.every=20"
submit() { sbatch --parsable "$@" | cut -d';' -f1; }

# 1. The single-node template, srun and mpirun.
for launcher in srun mpirun; do
  job=$(submit "${small[@]}" --output="$WORK/t1-$launcher.out" \
          --export=ALL,RECIPE=configs/tiny.yaml,LAUNCHER=$launcher,RUN_DIR="$WORK/t1-$launcher",OVERRIDES="--set train.steps=30 $tiny" \
          slurm/train-single-node.sbatch)
  slurm_wait "$job" 180 || fail "1 ($launcher): job $job did not finish"
  grep -q "loom: trained 30 steps this session, to step 30" "$WORK/t1-$launcher.out" || { cat "$WORK/t1-$launcher.out"; fail "1 ($launcher): training did not complete"; }
  grep -q "tp=2" "$WORK/t1-$launcher/checkpoints/step_00000030/manifest.json" 2>/dev/null ||
    grep -q '"tp": 2' "$WORK/t1-$launcher/checkpoints/step_00000030/manifest.json" || fail "1 ($launcher): no checkpoint at step 30 saved under tp 2"
  [ -f "$WORK/t1-$launcher/run.json" ] && [ -f "$WORK/t1-$launcher/metrics.jsonl" ] || fail "1 ($launcher): no run directory"
  grep -q "nodes: localhost" "$WORK/t1-$launcher/slurm_allocation.log" || fail "1 ($launcher): the allocation was not logged"
  echo "1. $launcher: $(grep "loom: trained" "$WORK/t1-$launcher.out")"
done

# 2. Signalled mid-run: checkpoint, exit 75, requeue, resume, same result as uninterrupted.
# 120 steps of the small model (~25 ms a step on 2 ranks here): the signal, sent once 30 steps are
# logged, must reach the ranks before the run ends by itself (it took 2-3 steps).
steps=120
job=$(submit "${small[@]}" --output="$WORK/t2.out" \
        --export=ALL,RECIPE=configs/tiny.yaml,RUN_DIR="$WORK/t2",OVERRIDES="--set train.steps=$steps $tiny" \
        slurm/train-single-node.sbatch)
for _ in $(seq 600); do
  [ -f "$WORK/t2/metrics.jsonl" ] && [ "$(wc -l < "$WORK/t2/metrics.jsonl")" -ge 30 ] && break; sleep 0.1
done
[ "$(wc -l < "$WORK/t2/metrics.jsonl")" -ge 30 ] || { cat "$WORK/t2.out"; fail "2: training did not get going"; }
scancel --batch --signal=USR1 "$job"
slurm_wait "$job" 240 || { cat "$WORK/t2.out"; fail "2: job $job did not finish after the requeue"; }
grep -q "loom: stopped at step [0-9]* of $steps on a stop signal" "$WORK/t2.out" || { cat "$WORK/t2.out"; fail "2: no early stop"; }
grep -q "requeueing job $job" "$WORK/t2.out" || fail "2: the job did not requeue itself"
grep -q "loom: resumed from .*t2/checkpoints/step_" "$WORK/t2.out" || fail "2: the requeued job did not resume"
grep -q "loom: trained [0-9]* steps this session, to step $steps " "$WORK/t2.out" || fail "2: the resumed job did not finish"
# The uninterrupted run, same layout (tp 2), directly under mpirun.
mpi -np 2 "$LOOM" train configs/tiny.yaml --set parallel.tp=2 --set train.steps=$steps $tiny \
  --set log.dir="$WORK/t2ref" > /dev/null
python3 - "$WORK/t2" "$WORK/t2ref" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:])
assert [r["step"] for r in a] == list(range(len(b))), "steps missing or duplicated after the requeue"
for x, y in zip(a, b):
    assert (x["loss"], x["grad_norm"], x["lr"]) == (y["loss"], y["grad_norm"], y["lr"]), (x, y)
s = json.load(open(f"{sys.argv[1]}/run.json"))["sessions"]
assert len(s) == 2 and s[0]["exit_status"] == 75 and s[1]["exit_status"] == 0, s
print(f"2. requeued run: {len(a)} steps, final loss {a[-1]['loss']} == uninterrupted {b[-1]['loss']}")
PY

# 3. A sweep as a job array.
scripts/sweep make --recipe configs/tiny.yaml --out "$WORK/sweep" --grid optim.lr=3e-4,1e-3,3e-3 \
  "${SMALL_SHAPE[@]}" --set train.steps=25 --set log.eval_every=25 --set log.eval_batches=2 --max-concurrent 2 --submit \
  --sbatch-args "--ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 --time=10 --output=$WORK/sweep-%A_%a.out" \
  > "$WORK/sweep.out"
cat "$WORK/sweep.out"
job=$(tail -1 "$WORK/sweep.out" | tr -dc '0-9')
[ -n "$job" ] || fail "3: no job id from sbatch"
slurm_wait "$job" 300 || fail "3: the sweep did not finish"
scripts/sweep summary "$WORK/sweep" | tee "$WORK/summary.txt"
[ "$(grep -c ' done ' "$WORK/summary.txt")" = 3 ] || fail "3: not every trial is done"
python3 - "$WORK/summary.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
vals = [float(r[2]) for r in rows]
assert len(vals) == 3 and vals == sorted(vals), f"not ranked by val_loss: {vals}"
PY

# 4. Elastic: requeued onto fewer tasks. (The templates ask for --ntasks-per-node, which a pending
# job's NumTasks update cannot go below; a job sized by --ntasks can be shrunk.)
printf '#!/bin/bash\n#SBATCH --requeue\n#SBATCH --open-mode=append\nsource "${SLURM_SUBMIT_DIR:-.}/slurm/loom_job.sh"\nloom_setup\nloom_train\n' \
  > "$WORK/elastic.sbatch"
job=$(submit --ntasks=2 --cpus-per-task=1 --time=10 --output="$WORK/t4.out" \
        --export=ALL,RECIPE=configs/tiny.yaml,TP=1,RUN_DIR="$WORK/t4",OVERRIDES="--set train.steps=100 $tiny" \
        "$WORK/elastic.sbatch")
for _ in $(seq 600); do
  [ -f "$WORK/t4/metrics.jsonl" ] && [ "$(wc -l < "$WORK/t4/metrics.jsonl")" -ge 20 ] && break; sleep 0.1
done
scancel --batch --signal=USR1 "$job"
for _ in $(seq 300); do [ "$(squeue -h -j "$job" -o %T)" = PENDING ] && break; sleep 0.1; done
[ "$(squeue -h -j "$job" -o %T)" = PENDING ] || { cat "$WORK/t4.out"; fail "4: the job did not requeue"; }
scontrol update JobId="$job" NumTasks=1 || fail "4: scontrol update NumTasks=1 failed"
slurm_wait "$job" 120 || { cat "$WORK/t4.out"; fail "4: job $job did not finish after the requeue"; }
grep "elastic resume" "$WORK/t4.out" || { cat "$WORK/t4.out"; fail "4: the requeued job did not resume on one rank"; }
python3 - "$WORK/t4" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl") if '"step"' in l]
assert [r["step"] for r in rows] == list(range(100)), "steps missing or duplicated"
s = json.load(open(f"{sys.argv[1]}/run.json"))["sessions"]
assert [len(x["ranks"]) for x in s] == [2, 1] and [x["exit_status"] for x in s] == [75, 0], s
rz = s[1]["resized"]
assert rz["from"]["dp"] == 2 and rz["to"]["dp"] == 1 and rz["to"]["grad_accum"] == 4 and rz["global_batch"] == 32, rz
print(f"4. requeued from 2 ranks onto 1 at step {rz['at_step']}: accumulation 2 -> 4, global batch 32, "
      f"final loss {rows[-1]['loss']:.4f}")
PY
echo PASS
