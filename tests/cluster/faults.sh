# A fault on the remote node ends the whole job, boundedly: dp 2 across the two nodes of the
# test cluster (1 Gbit links), parallel.timeout_s = 10, rank 0 on node 1 and rank 1 on node 2.
# Once training runs, rank 1 (or its node) is hit by FAULT:
#   kill9     kill -9 of rank 1
#   sigstop   SIGSTOP of rank 1 (its process, watchdog included, answers nothing)
#   link_cut  node 2's link cut (its host-side veth set down)
# and every process of the job must be gone within timeout_s + 15 s of the fault: the ranks, the
# launcher (mpirun and the remote orted; or the batch shell, srun and every slurmstepd), with a
# non-zero exit status; for sigstop and link_cut a watchdog message must name the stuck rank and
# its node ("1 on <node 2's hostname>"). The time from the fault to the last process gone is
# printed; whatever is still running at the deadline is listed, killed, and fails the test.
#   faults.sh LOOM SRC MPIEXEC LAUNCHER FAULT     LAUNCHER: mpirun | srun (a two-node Slurm job
#                                                 of slurm/train.sbatch, srun --mpi=pmix
#                                                 --kill-on-bad-exit=1)
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/netns_cluster.sh"
launcher=${4:?mpirun or srun} fault=${5:?kill9, sigstop or link_cut}
cluster_check
corpus
LOOM=$(readlink -f "$LOOM")
cd "$SRC"
export OMP_NUM_THREADS=1
timeout_s=10
limit=$((timeout_s + 15))
# The kernel setting docs/multinode.md asks of a cluster's nodes: a TCP connection with data in
# flight to a dead peer gives up after some seconds of retransmissions (~6 s at 4, measured:
# the job then ends ~19 s after the cut) instead of ~15 min at the default 15. Keepalive
# (scripts/mpi_env.sh) covers idle connections only; once a rank on the cut-off node has printed
# anything, its orted's connection to mpirun holds unacknowledged output.
export CLUSTER_TCP_RETRIES2=${CLUSTER_TCP_RETRIES2:-4}
cluster_up 2 1gbit 1
remote=${CLUSTER_NODES[1]}
run=$WORK/run
overrides="--set train.steps=100000 --set log.every=1 --set log.eval_every=0 --set parallel.timeout_s=$timeout_s"
out=$WORK/job.out

job=""
if [ "$launcher" = mpirun ]; then
  # shellcheck disable=SC2086
  "$CLUSTER_MPIRUN" -np 2 --map-by ppr:1:node "$LOOM" train configs/tiny.yaml $overrides --set log.dir="$run" > "$out" 2>&1 &
  job=$!
else
  cluster_slurm_up
  # --no-requeue: a node lost to the link cut must not bring the job back.
  jobid=$(sbatch --parsable --nodes=2 --ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 --time=30 \
            --no-requeue --output="$out" \
            --export=ALL,RECIPE=configs/tiny.yaml,LOOM="$LOOM",TP=1,REQUEUE=0,RUN_DIR="$run",OVERRIDES="$overrides" \
            slurm/train.sbatch | cut -d';' -f1)
fi
steps_logged() { cat "$out" 2> /dev/null | grep -c "^step" || true; }
for _ in $(seq 900); do
  [ "$(steps_logged)" -ge 5 ] && break
  sleep 0.1
done
[ "$(steps_logged)" -ge 5 ] || { cat "$out"; fail "training did not start"; }
victim=$(cluster_rank_pid 1) || { cat "$out"; fail "rank 1 not found on the nodes"; }
[ "$(cluster_node_of_pid "$victim")" = "$remote" ] || fail "rank 1 (pid $victim) is not on $remote"
echo "job processes before the fault:"
for p in $(cluster_all_pids $job); do
  printf '  %-8s %7s %s\n' "$(cluster_node_of_pid "$p" || echo host)" "$p" "$(ps -o comm= -p "$p")"
done
# Open MPI's keepalive settings (scripts/mpi_env.sh) reached the remote daemon.
if [ "$launcher" = mpirun ]; then
  orted=$(for p in $(cluster_node_pids "$remote"); do [ "$(ps -o comm= -p "$p")" != orted ] || echo "$p"; done)
  want=${OMPI_MCA_oob_tcp_keepalive_time:-5}  # scripts/mpi_env.sh's default, or the caller's
  tr '\0' '\n' < "/proc/$orted/environ" | grep "^OMPI_MCA_oob_tcp_keepalive_time=$want$" > /dev/null ||
    fail "the remote orted (pid $orted) does not have OMPI_MCA_oob_tcp_keepalive_time=$want"
  echo "remote orted (pid $orted) has $(tr '\0' '\n' < "/proc/$orted/environ" | grep oob_tcp_keepalive | tr '\n' ' ')"
fi

t0=$(date +%s.%N)
case $fault in
  kill9) kill -9 "$victim" ;;
  sigstop) kill -STOP "$victim" ;;
  link_cut) cluster_cut_link "$remote" ;;
  *) fail "unknown fault $fault" ;;
esac
echo "$fault of rank 1 (pid $victim on $remote) at $(date -u +%T.%N | cut -c1-12)"
problems=()
# Slurm, link cut: the cut-off node's slurmstepd cannot tell anyone the step has ended, and waits
# for its link (it ends ~2 s after the link is back). Nothing can reach it and it holds no rank:
# it is checked after the link is restored instead.
if [ "$launcher" = srun ] && [ "$fault" = link_cut ]; then export CLUSTER_EXCEPT="$remote slurmstepd"; fi
if gone=$(cluster_wait_all_gone "$t0" "$limit" $job); then
  echo "every process of the job gone ${gone} s after the fault (limit ${limit} s)"
else
  # CLUSTER_FAULT_STACKS=1: where the leftover ranks are (gdb backtraces of every thread).
  if [ "${CLUSTER_FAULT_STACKS:-0}" = 1 ] && command -v gdb > /dev/null; then
    for p in $(cluster_all_pids); do
      [ "$(ps -o comm= -p "$p" 2> /dev/null)" = loom ] || continue
      echo "--- leftover rank pid $p: threads"
      timeout 30 gdb -p "$p" -batch -ex "thread apply all bt 12" 2> /dev/null | grep -E "^(Thread|#)" | cut -c1-150 || true
    done
  fi
  # CLUSTER_FAULT_OBSERVE=S: watch S s more, to learn when (if) the leftovers end on their own.
  if [ "${CLUSTER_FAULT_OBSERVE:-0}" -gt 0 ]; then
    if late=$(cluster_wait_all_gone "$t0" $((limit + CLUSTER_FAULT_OBSERVE)) $job); then
      echo "(observed: the last process ended on its own ${late} s after the fault)"
    fi
  fi
  # CLUSTER_FAULT_HEAL=S (link_cut): bring the link back and watch S s more (does a daemon
  # that was cut off, a slurmstepd say, finish once it can reach its peers again?).
  if [ "$fault" = link_cut ] && [ "${CLUSTER_FAULT_HEAL:-0}" -gt 0 ]; then
    cluster_restore_link "$remote"
    th=$(date +%s.%N)
    if late=$(cluster_wait_all_gone "$th" "$CLUSTER_FAULT_HEAL" $job); then
      echo "(observed: with the link back, the last process ended ${late} s later)"
    fi
  fi
  n=$(cluster_kill_leftovers $job)
  problems+=("$n processes still running ${limit} s after the fault (killed by the test)")
fi
[ "$fault" = link_cut ] && cluster_restore_link "$remote"
if [ -n "${CLUSTER_EXCEPT:-}" ]; then
  unset CLUSTER_EXCEPT
  th=$(date +%s.%N)
  if late=$(cluster_wait_all_gone "$th" 15 $job); then
    echo "the cut-off node's slurmstepd ended ${late} s after its link came back"
  else
    problems+=("$(cluster_kill_leftovers $job) processes still running 15 s after the link came back")
  fi
fi
rc=""
if [ "$launcher" = mpirun ]; then
  set +e; wait "$job"; rc=$?; set -e
else
  # Slurm's view (informational: the processes are what counts, and a node cut off from
  # slurmctld leaves its job completing until the link is back).
  slurm_wait "$jobid" 15 2> /dev/null || echo "job $jobid still in the queue 15 s after the link came back"
  rc=$(scontrol show job "$jobid" 2> /dev/null | grep -o "ExitCode=[0-9:]*" | head -1)
  grep "loom_job: loom exited" "$out" || true
fi
echo "launcher exit: $rc"
case $rc in 0 | ExitCode=0:0) problems+=("the job exited 0") ;; esac
grep -E "loom: error|watchdog|has not completed|exited on signal|MPI_ABORT|srun: error" "$out" | head -8 | sed 's/^/  | /' || true
if [ "$fault" != kill9 ]; then
  grep -qE "has not completed after .*[^0-9]1 on $remote([^0-9a-z]|$)" "$out" ||
    problems+=("no watchdog message names the stuck rank as \"1 on $remote\"")
fi
if [ ${#problems[@]} -gt 0 ]; then
  echo "--- job output (last 30 lines)"; tail -n 30 "$out"
  fail "$launcher $fault: $(IFS=';'; echo "${problems[*]}")"
fi
echo PASS
