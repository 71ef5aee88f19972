# A one-node Slurm cluster on this machine, for the Slurm tests (sourced). Runs as root with no
# systemd and no cgroups: munged, slurmctld and slurmd started in the background with their own
# configuration and state under $SLURM_TEST_DIR; slurm_down stops exactly the daemons
# slurm_up started (by PID). Needs Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh). Two fake GPUs (gres) let GPU requests be scheduled on a CPU-only box.
#
#   source tests/slurm/cluster.sh; slurm_up; ...sbatch/squeue...; slurm_down
# Client commands find the cluster through SLURM_CONF, which slurm_up exports.

slurm_up() {
  # Its own directory, readable by the munge user (a test's mktemp directory is not).
  SLURM_TEST_DIR=$(mktemp -d /tmp/loom_slurm.XXXXXX)
  chmod 755 "$SLURM_TEST_DIR"
  local d=$SLURM_TEST_DIR cpus mem
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  # Character devices stand in for GPUs (gres.conf File= must name devices; regular files fail).
  mknod "$d/gpu0" c 1 3 2>/dev/null || true
  mknod "$d/gpu1" c 1 3 2>/dev/null || true
  cat > "$d/gres.conf" <<GRES
Name=gpu File=$d/gpu0
Name=gpu File=$d/gpu1
GRES
  # Ports away from the defaults, so a site's real slurmd on this host is not disturbed.
  cat > "$d/slurm.conf" <<CONF
ClusterName=loomtest
SlurmctldHost=localhost
SlurmctldPort=${SLURM_TEST_PORT:-16817}
SlurmdPort=$(( ${SLURM_TEST_PORT:-16817} + 1 ))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
KillWait=10
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$d/slurm.conf
  slurm_start_munged "$d"
  SLURM_TEST_PIDS=$SLURM_MUNGED_PID
  slurmctld -D -i -f "$d/slurm.conf" > "$d/slurmctld.out" 2>&1 &
  SLURM_TEST_PIDS="$SLURM_TEST_PIDS $!"
  slurmd -D -N localhost -f "$d/slurm.conf" > "$d/slurmd.out" 2>&1 &
  SLURM_TEST_PIDS="$SLURM_TEST_PIDS $!"
  for _ in $(seq 60); do
    [ "$(timeout 2 sinfo -h -o %T 2>/dev/null)" = idle ] && return 0
    sleep 0.5
  done
  echo "slurm_up: the node did not become idle; logs in $d:" >&2
  tail -n 5 "$d"/slurmctld.log "$d"/slurmd.log "$d"/*.out "$d"/munge/munged.log >&2 || true
  return 1
}

slurm_down() {
  [ -n "${SLURM_TEST_PIDS:-}" ] || return 0
  timeout 5 scancel --quiet --user=root 2>/dev/null || true
  # slurmd, then slurmctld, then munged: the reverse of the start.
  slurm_stop_pids "$SLURM_TEST_PIDS"
  SLURM_TEST_PIDS=""
  [ -n "${SLURM_TEST_DIR:-}" ] && rm -rf "$SLURM_TEST_DIR"
}

# Waits until job $1 (all its array tasks) has left the queue; fails after $2 seconds. (Polled
# every 0.2 s: a squeue call costs ~20 ms, and a 1 s poll added half a second to every wait.)
slurm_wait() {
  local job=$1 limit=$2 t0
  t0=$(date +%s)
  while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; do
    [ $(( $(date +%s) - t0 )) -le "$limit" ] || { squeue -j "$job" >&2; return 1; }
    sleep 0.2
  done
}

# Shared with the multi-node test cluster (tests/cluster/netns_slurm.sh):
# munged as the munge user, its socket, key seed and log under $1/munge (created here); sets
# SLURM_MUNGED_PID and waits for the socket.
slurm_start_munged() {
  local d=$1
  mkdir -p "$d/munge"
  chown munge:munge "$d/munge"
  setpriv --reuid=munge --regid=munge --clear-groups munged -F --socket="$d/munge/munge.socket.2" \
    --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/munge.seed" --log-file="$d/munge/munged.log" \
    > "$d/munged.out" 2>&1 &
  SLURM_MUNGED_PID=$!
  for _ in $(seq 50); do [ -S "$d/munge/munge.socket.2" ] && break; sleep 0.1; done
}

# Stops the daemons with the given pids (a space-separated list, in start order) in reverse
# order: SIGTERM, up to 5 s, then SIGKILL.
slurm_stop_pids() {
  local p
  for p in $(echo "$1" | tr ' ' '\n' | tac); do
    kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}
