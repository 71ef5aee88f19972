# A real two-node Slurm cluster (two slurmd, one per network namespace, 10 Gbit links):
# sbatch of slurm/train.sbatch with --nodes=2 (one rank per node, srun --mpi=pmix, dp 2 across
# the nodes) trains the tests' small model (SMALL in tests/cli/common.sh); signalled mid-run
# (SIGUSR1 to the batch shell, what --signal=B:USR1@N does before the time limit) it checkpoints,
# exits 75, requeues itself, resumes on both nodes and finishes with the same losses and grad
# norms, bit for bit, as the same layout uninterrupted under plain mpirun on one host. Both sessions' run.json list the two nodes.
#   slurm_two_nodes.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/netns_cluster.sh"
cluster_check
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
export OMP_NUM_THREADS=1
cluster_up 2 10gbit 1
cluster_slurm_up
# 120 steps of the small model: the signal, sent once 25 steps are logged, must reach the ranks
# before the run ends by itself (it took 2 steps).
steps=120
overrides="${SMALL[*]} --set train.steps=$steps --set log.eval_every=0 --set log.every=1 --set checkpoint.every=20"
t0=$(date +%s)
job=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 --time=30 \
        --output="$WORK/job.out" \
        --export=ALL,RECIPE=configs/tiny.yaml,LOOM="$LOOM",TP=1,RUN_DIR="$WORK/run",OVERRIDES="$overrides" \
        slurm/train.sbatch | cut -d';' -f1)
for _ in $(seq 600); do
  [ -f "$WORK/run/metrics.jsonl" ] && [ "$(wc -l < "$WORK/run/metrics.jsonl")" -ge 25 ] && break; sleep 0.1
done
[ "$(wc -l < "$WORK/run/metrics.jsonl" 2> /dev/null)" -ge 25 ] || { cat "$WORK/job.out"; fail "training did not get going"; }
scancel --batch --signal=USR1 "$job"
slurm_wait "$job" 90 || { cat "$WORK/job.out"; fail "job $job did not finish after the requeue"; }
echo "job $job: done in $(( $(date +%s) - t0 )) s, requeue included"
grep -q "loom: stopped at step [0-9]* of $steps on a stop signal" "$WORK/job.out" || { cat "$WORK/job.out"; fail "no early stop"; }
grep -q "requeueing job $job" "$WORK/job.out" || { cat "$WORK/job.out"; fail "the job did not requeue itself"; }
grep -q "loom: resumed from .*run/checkpoints/step_" "$WORK/job.out" || { cat "$WORK/job.out"; fail "the requeued job did not resume"; }
grep -q "loom: trained [0-9]* steps this session, to step $steps " "$WORK/job.out" || { cat "$WORK/job.out"; fail "the resumed job did not finish"; }
grep -E "^nodes: " "$WORK/run/slurm_allocation.log" | sed 's/^/allocation: /'
# The same layout (dp 2), uninterrupted, under plain mpirun on this host.
# shellcheck disable=SC2086
mpi -np 2 "$LOOM" train configs/tiny.yaml --set parallel.tp=1 $overrides --set log.dir="$WORK/ref" > "$WORK/ref.out" 2>&1 ||
  { cat "$WORK/ref.out"; fail "the one-host run failed"; }
python3 - "$WORK/run" "$WORK/ref" "${CLUSTER_NODES[@]}" <<'PY'
import json, sys
run, ref, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
a, b = ([json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in (run, ref))
assert [r["step"] for r in a] == [r["step"] for r in b], "steps missing or duplicated after the requeue"
for x, y in zip(a, b):
    assert (x["loss"], x["grad_norm"], x["lr"]) == (y["loss"], y["grad_norm"], y["lr"]), (x, y)
s = json.load(open(f"{run}/run.json"))["sessions"]
assert len(s) == 2 and s[0]["exit_status"] == 75 and s[1]["exit_status"] == 0, [x["exit_status"] for x in s]
for i, x in enumerate(s):
    hosts = [r["host"] for r in x["ranks"]]
    assert hosts == nodes, f"session {i}: ranks on {hosts}, expected {nodes}"
print(f"requeued two-node run: {len(a)} steps (stopped at {s[1]['start_step']}, resumed on {' '.join(nodes)}), "
      f"final loss {a[-1]['loss']!r} == one host {b[-1]['loss']!r}")
PY
echo PASS
