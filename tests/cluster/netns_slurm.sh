# Slurm across the test cluster's nodes (sourced by netns_cluster.sh): munged and slurmctld on
# the host (slurmctld at the bridge's address), one slurmd per node, each in its node's network
# namespace (nsenter --net: `ip netns exec` would remount /sys and slurmd would find no cgroup
# filesystem) and UTS namespace (the node's hostname), each with its own SlurmdSpoolDir and TmpFS
# (%n: the nodes share /tmp, and PMIx's per-job directories would collide). Ports 17000 + 2k and
# 17001 + 2k for instance lc<k> (the one-node Slurm test uses 16817/16818); cred_expire=10 so a
# requeued job starts ~10 s after its requeue. Two fake GPUs per node (gres) let the templates'
# --gpus-per-node be scheduled.
#
#   cluster_up 2 10gbit 2; cluster_slurm_up; sbatch ...; slurm_wait JOB SECONDS; cluster_down
# Exports SLURM_CONF; the daemons' pids are in $CLUSTER_DIR/daemon.pids (cluster_down stops them).

source "$CLUSTER_SRC/tests/slurm/cluster.sh"   # slurm_start_munged, slurm_stop_pids, slurm_wait

cluster_slurm_up() {
  command -v slurmctld > /dev/null || PATH=$PATH:/usr/sbin
  command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v munged > /dev/null ||
    cluster_skip "Slurm (slurmctld, slurmd, munge) is not installed"
  local d=$CLUSTER_DIR/slurm k=${CLUSTER_NAME#lc} port ns i mem cpus
  port=$((17000 + 2 * k))
  mkdir -p "$d/state" "$d/log"
  cpus=$(nproc)
  mem=$(( ($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024) / ${#CLUSTER_NODES[@]} ))
  mknod "$d/gpu0" c 1 3 2> /dev/null || true
  mknod "$d/gpu1" c 1 3 2> /dev/null || true
  printf 'Name=gpu File=%s\nName=gpu File=%s\n' "$d/gpu0" "$d/gpu1" > "$d/gres.conf"
  {
    cat <<CONF
ClusterName=loomnet$k
SlurmctldHost=localhost(10.213.$k.254)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
TmpFS=$d/tmp/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.%n.log
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
KillWait=5
GresTypes=gpu
CONF
    for i in "${!CLUSTER_NODES[@]}"; do
      echo "NodeName=${CLUSTER_NODES[$i]} NodeAddr=${CLUSTER_IPS[$i]} CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=$(IFS=,; echo "${CLUSTER_NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
  } > "$d/slurm.conf"
  for ns in "${CLUSTER_NODES[@]}"; do mkdir -p "$d/spool/$ns" "$d/tmp/$ns"; done
  export SLURM_CONF=$d/slurm.conf
  slurm_start_munged "$d"
  echo "$SLURM_MUNGED_PID" >> "$CLUSTER_DIR/daemon.pids"
  slurmctld -D -i -f "$d/slurm.conf" > "$d/log/slurmctld.out" 2>&1 &
  echo $! >> "$CLUSTER_DIR/daemon.pids"
  for ns in "${CLUSTER_NODES[@]}"; do
    nsenter --net="/var/run/netns/$ns" unshare --uts sh -c "hostname $ns; exec slurmd -D -N $ns -f $d/slurm.conf" \
      > "$d/log/slurmd.$ns.out" 2>&1 &
    echo $! >> "$CLUSTER_DIR/daemon.pids"
  done
  CLUSTER_SLURM_PIDS=$(tr '\n' ' ' < "$CLUSTER_DIR/daemon.pids")
  local states
  for _ in $(seq 80); do
    states=$(timeout 2 sinfo -h -N -o %T 2> /dev/null | sort -u | tr '\n' ' ')
    [ "$states" = "idle " ] && [ "$(timeout 2 sinfo -h -N -o %N | wc -l)" = "${#CLUSTER_NODES[@]}" ] && {
      echo "slurm: ${CLUSTER_NODES[*]} idle (slurmctld at 10.213.$k.254:$port)"; return 0; }
    sleep 0.5
  done
  echo "cluster_slurm_up: the nodes did not become idle (${states:-no answer}); logs in $d/log:" >&2
  tail -n 5 "$d"/log/* "$d"/munge/munged.log >&2 || true
  return 1
}

cluster_slurm_down() {
  [ -n "${CLUSTER_SLURM_PIDS:-}" ] || return 0
  local -
  set +e
  timeout 5 scancel --quiet --user=root 2> /dev/null || true
  slurm_stop_pids "$CLUSTER_SLURM_PIDS"
  CLUSTER_SLURM_PIDS=""
  rm -f "$CLUSTER_DIR/daemon.pids"
}
