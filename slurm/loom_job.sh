# Shared by the batch templates (sourced, not run): defaults for the NCCL environment, the
# run directory, the tensor-parallel default, the launch (srun or mpirun) with signal
# forwarding, and the requeue of a run that stopped early with a checkpoint (exit status 75).
#
# Variables the templates (or the user, through `sbatch --export` or the environment) set:
#   RECIPE      the recipe (required)
#   OVERRIDES   extra arguments for `loom train`, e.g. "--set optim.lr=3e-4 --set train.steps=5000"
#   LOOM        the loom binary (default: build/loom under the submit directory)
#   LAUNCHER    srun (default) or mpirun
#   RUN_DIR     log.dir; checkpoints go to RUN_DIR/checkpoints (default runs/<job name>-<job id>,
#               the same after a requeue, so the requeued job resumes and continues the run)
#   TP          parallel.tp (default: the recipe's own if above 1, else the largest number that
#               divides both model.n_head and the GPUs per node, so tensor parallelism stays
#               inside a node's NVLink; 1 without GPUs)
#   REQUEUE     1 (default): requeue the job when loom stopped early with a checkpoint

set -euo pipefail

loom_setup() {
  cd "${SLURM_SUBMIT_DIR:-.}"
  : "${RECIPE:?set RECIPE=path/to/recipe.yaml (sbatch --export=ALL,RECIPE=...)}"
  LOOM=${LOOM:-build/loom}
  LAUNCHER=${LAUNCHER:-srun}
  RUN_DIR=${RUN_DIR:-runs/${SLURM_JOB_NAME:-loom}-${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-local}}${SLURM_ARRAY_TASK_ID:+-$SLURM_ARRAY_TASK_ID}}
  REQUEUE=${REQUEUE:-1}
  mkdir -p "$RUN_DIR"
  [ -x "$LOOM" ] || { echo "loom_job: $LOOM is not an executable (set LOOM=...)" >&2; exit 2; }

  # NCCL over InfiniBand: the defaults are NCCL's own unless set here or by the site. Switches a
  # new cluster may need (uncomment or export before sbatch):
  #   NCCL_IB_HCA=mlx5_0,mlx5_1     the HCAs to use (all by default)
  #   NCCL_IB_GID_INDEX=3           RoCE instead of InfiniBand
  #   NCCL_IB_TIMEOUT=22            longer IB retries on congested fabrics
  #   NCCL_NET_GDR_LEVEL=PHB        GPUDirect RDMA distance
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker0}  # bootstrap: any interface but these
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}        # INFO shows the rings/trees and the transport chosen
  export NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}
  # Open MPI's out-of-band keepalive (mpirun <-> orted): a dead node or link ends the job in
  # seconds, not the ~8 minutes of Open MPI's defaults (scripts/mpi_env.sh, docs/multinode.md).
  source "$(dirname "${BASH_SOURCE[0]}")/../scripts/mpi_env.sh"
  # One OpenMP thread per core the rank owns (the CPU backend; the CUDA one needs few).
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
  export OMP_PROC_BIND=${OMP_PROC_BIND:-close}

  # The allocation, once per (re)start, in the run directory.
  {
    echo "== $(date -u +%FT%TZ) job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0}"
    echo "nodes: ${SLURM_JOB_NODELIST:-$(hostname)} (${SLURM_JOB_NUM_NODES:-1}), tasks: ${SLURM_NTASKS:-1}," \
         "tasks per node: ${SLURM_NTASKS_PER_NODE:-?}, GPUs per node: ${SLURM_GPUS_PER_NODE:-0}," \
         "CPUs per task: ${SLURM_CPUS_PER_TASK:-?}"
    command -v scontrol > /dev/null && [ -n "${SLURM_JOB_NODELIST:-}" ] && scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ' ' && echo
    env | grep -E '^(NCCL|UCX|OMPI_MCA|SLURM_(JOB|STEP|NTASKS|GPUS|CPUS))' | sort
  } >> "$RUN_DIR/slurm_allocation.log"

  TP_ARGS=()
  if [[ " ${OVERRIDES:-} " != *"parallel.tp="* ]]; then
    TP_ARGS=(--set "parallel.tp=${TP:-$(loom_default_tp)}")
  fi
}

# parallel.tp when neither TP nor OVERRIDES sets it: the recipe's own when above 1, else the
# largest number that divides both model.n_head and the GPUs per node (so each tensor-parallel
# group is whole inside one node, and the world, whole nodes of GPUs, divides by it: 12 heads on
# 8 GPUs give 4, 25 heads give 1).
loom_default_tp() {
  local gpus=${SLURM_GPUS_PER_NODE:-0} resolved heads tp t world
  gpus=${gpus##*:}  # "a100:8" -> 8
  [[ "$gpus" =~ ^[0-9]+$ ]] && [ "$gpus" -ge 1 ] || { echo 1; return; }
  # The recipe as loom reads it, for a world of the allocation's tasks (its own tp x pp must
  # divide that; the global batch is left to fit, as it depends on the tp chosen here); where it
  # cannot be read, 1, and loom train itself says what is wrong.
  # shellcheck disable=SC2086
  world=$(loom_allocated_tasks_or "$gpus")
  resolved=$("$LOOM" config "$RECIPE" --world "$world" ${OVERRIDES:-} \
    --set train.global_batch=auto 2> /dev/null) || { echo 1; return; }
  heads=$(awk '/^model:/{m=1; next} /^[^ ]/{m=0} m && /^  n_head:/{print $2; exit}' <<< "$resolved")
  tp=$(awk '/^parallel:/{p=1; next} /^[^ ]/{p=0} p && /^  tp:/{print $2; exit}' <<< "$resolved")
  [[ "$heads" =~ ^[0-9]+$ && "$tp" =~ ^[0-9]+$ ]] || { echo 1; return; }
  [ "$tp" -gt 1 ] && { echo "$tp"; return; }
  for ((t = gpus; t >= 1; t--)); do
    # (and the world's: nodes given unequal task counts, "8,4", are not whole nodes of GPUs)
    if [ $((heads % t)) = 0 ] && [ $((gpus % t)) = 0 ] && [ $((world % t)) = 0 ]; then echo "$t"; return; fi
  done
  echo 1
}

# The allocation's task count (loom_allocated_tasks), or $1 where Slurm does not say.
loom_allocated_tasks_or() {
  local n
  n=$(loom_allocated_tasks)
  echo "${n:-$1}"
}

# The tasks this allocation holds: the sum of SLURM_TASKS_PER_NODE ("8(x3),4" -> 28); empty
# outside Slurm.
loom_allocated_tasks() {
  local spec=${SLURM_TASKS_PER_NODE:-} total=0 part n reps
  local -a parts
  [ -n "$spec" ] || return 0
  IFS=, read -ra parts <<< "$spec"
  for part in "${parts[@]}"; do
    n=${part%%(*}
    reps=1
    [[ "$part" == *"(x"* ]] && { reps=${part#*(x}; reps=${reps%)}; }
    # Anything else than "N" or "N(xM)": leave the task count to srun.
    [[ "$n" =~ ^[0-9]+$ && "$reps" =~ ^[0-9]+$ ]] || return 0
    total=$(( total + n * reps ))
  done
  echo "$total"
}

# Runs `loom train` under the launcher in the background, forwards SIGUSR1/SIGTERM (Slurm's
# warning before the time limit, preemption) to it, waits, and on exit status 75 (stopped early
# with a checkpoint) requeues the job, which then resumes from that checkpoint.
loom_train() {
  local launch
  if [ "$LAUNCHER" = mpirun ]; then
    # mpirun inside the allocation: it reads the node list and slots from Slurm itself.
    launch=(mpirun --bind-to "${MPIRUN_BIND:-core}" --map-by "${MPIRUN_MAP:-slot:PE=${SLURM_CPUS_PER_TASK:-1}}")
  else
    # srun: one task per GPU; --kill-on-bad-exit takes the whole step down if one rank dies. The
    # task count is this allocation's (SLURM_TASKS_PER_NODE, e.g. "8(x3)"), not the submission's
    # SLURM_NTASKS, which a requeued job keeps even when it restarts on fewer nodes or tasks.
    launch=(srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind="${SRUN_CPU_BIND:-cores}")
    local tasks
    tasks=$(loom_allocated_tasks)
    [ -n "$tasks" ] && launch+=(--ntasks="$tasks")
  fi
  local pid="" rc
  # The batch shell gets the signal (#SBATCH --signal=B:USR1@N); the launcher forwards it to
  # every rank; loom saves at the next step boundary and exits 75.
  trap 'echo "loom_job: SIGUSR1 (time limit ahead): asking loom to save and stop"; [ -n "$pid" ] && kill -USR1 $pid 2>/dev/null || true' USR1
  trap 'echo "loom_job: SIGTERM: asking loom to save and stop"; [ -n "$pid" ] && kill -USR1 $pid 2>/dev/null || true' TERM
  # shellcheck disable=SC2086
  "${launch[@]}" "$LOOM" train "$RECIPE" --set log.dir="$RUN_DIR" --set checkpoint.dir="$RUN_DIR/checkpoints" \
    "${TP_ARGS[@]}" ${OVERRIDES:-} &
  pid=$!
  while :; do
    set +e
    wait "$pid"
    rc=$?
    set -e
    kill -0 "$pid" 2>/dev/null || break  # interrupted by a trapped signal: wait again
  done
  trap - USR1 TERM
  echo "loom_job: loom exited with status $rc"
  if [ "$rc" = 75 ] && [ "$REQUEUE" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    echo "loom_job: stopped early with a checkpoint: requeueing job $SLURM_JOB_ID (restart $(( ${SLURM_RESTART_COUNT:-0} + 1 )))"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
  fi
  return "$rc"
}
