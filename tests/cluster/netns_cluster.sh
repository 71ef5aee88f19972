# A simulated cluster on this machine (sourced, root only): N nodes (2-4) as Linux network
# namespaces on a bridge, each behind a veth pair rate-limited in both directions with tc tbf,
# each with its own hostname (UTS namespace) for the processes launched on it. Open MPI reaches
# the nodes through an rsh agent that enters the namespace; optionally one slurmd per node makes
# it a Slurm cluster. docs/multinode.md ("The test cluster") describes it.
#
#   source tests/cluster/netns_cluster.sh
#   cluster_up 2 10gbit 1           # nodes, rate (1gbit | 10gbit), ranks (slots) per node
#   cluster_mpirun -np 2 build/loom train ...
#   cluster_down                    # also run by the EXIT trap cluster_up installs
#
# Instance: cluster_up takes, under a lock, the first free k in 10..99 (no address, route, link
# or namespace of 10.213.k.0/24 / lc<k>* in use) and names everything after it: nodes lc<k>n1..N
# (namespace = hostname = Slurm NodeName) at 10.213.k.1..N, bridge lc<k>br at 10.213.k.254,
# host-side veths lc<k>v1..N. No /etc/hosts edits: Open MPI and Slurm are given the IPs. The
# namespaces have no route but the subnet, so nothing but this instance's nodes is reachable.
# An instance whose owner process died without its teardown is reclaimed by the next cluster_up.
# Teardown (cluster_down, idempotent; the EXIT trap) kills whatever still runs in the nodes after
# a 5 s grace, and a script that was about to exit 0 then exits 1: nothing may be left running.
#
# After cluster_up: CLUSTER_NAME (lc<k>), CLUSTER_SUBNET, CLUSTER_NODES / CLUSTER_IPS (arrays),
# CLUSTER_RANKS_PER_NODE, CLUSTER_DIR (hostfile, agent, logs), CLUSTER_MPIRUN (a script: mpirun
# across the nodes with the arguments it is given).
# Functions: cluster_up, cluster_down, cluster_mpirun, cluster_exec NODE CMD..., cluster_node_pids
# NODE, cluster_loom_pids NODE, cluster_rank_pid RANK, cluster_node_of_pid PID, cluster_cut_link
# NODE, cluster_restore_link NODE, cluster_all_pids, cluster_wait_all_gone T0 LIMIT [PIDS],
# cluster_kill_leftovers; cluster_slurm_up / cluster_slurm_down (tests/slurm/cluster.sh's daemons
# across the nodes).
# Exits 77 (CTest's SKIP_RETURN_CODE) with a reason when not root or when network namespaces,
# veth, bridges or tbf are unavailable.

CLUSTER_LIB=$(readlink -f "${BASH_SOURCE[0]}")
CLUSTER_SRC=$(dirname "$(dirname "$(dirname "$CLUSTER_LIB")")")
CLUSTER_STATE=/run/loom_netns_cluster   # one file per live instance: its owner pid
CLUSTER_NAME=""

cluster_skip() { echo "SKIP: $*"; exit 77; }
# A process that exists and is not a zombie (kill -0 succeeds on zombies, and a killed owner
# may stay one for a while when its reaper is slow).
_cluster_alive() { local s; s=$(ps -o stat= -p "$1" 2> /dev/null) && [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }

# Root, ip netns, veth, bridge and tbf, tried on a throwaway namespace and bridge.
cluster_check() {
  [ "$(id -u)" = 0 ] || cluster_skip "the test cluster needs root (network namespaces)"
  command -v ip > /dev/null && command -v tc > /dev/null && command -v nsenter > /dev/null &&
    command -v unshare > /dev/null || cluster_skip "ip, tc, nsenter or unshare not installed"
  local t=lcp$$ why=""
  if ! ip netns add "$t" 2> /dev/null; then why="cannot create a network namespace (ip netns add)"
  elif ! ip link add "${t}a" type veth peer name "${t}b" netns "$t" 2> /dev/null; then why="no veth pairs"
  elif ! ip link add "${t}br" type bridge 2> /dev/null; then why="no bridges"
  elif ! ip link set "${t}a" master "${t}br" 2> /dev/null; then why="cannot attach a veth to a bridge"
  elif ! tc qdisc add dev "${t}a" root tbf rate 1gbit burst 125kb limit 500kb 2> /dev/null; then why="no tc tbf qdisc"
  fi
  ip link del "${t}br" 2> /dev/null || true
  ip link del "${t}a" 2> /dev/null || true
  ip netns del "$t" 2> /dev/null || true
  [ -z "$why" ] || cluster_skip "the test cluster needs network namespaces: $why"
}

# Removes instance $1 (lc<k>): processes in its namespaces, its daemons, namespaces, veths,
# bridge, directory, state file. Safe to repeat.
_cluster_destroy() {
  local -
  set +e +o pipefail
  local name=$1 state="$CLUSTER_STATE/$1" dir="" ns p
  [ -f "$state" ] && dir=$(sed -n 2p "$state")
  [ -n "$dir" ] && [ -f "$dir/daemon.pids" ] && for p in $(tac "$dir/daemon.pids"); do
    kill "$p" 2> /dev/null || true
  done
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^${name}n[0-9]+$"); do
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null || true; done
    ip netns del "$ns" 2> /dev/null || true
  done
  [ -n "$dir" ] && [ -f "$dir/daemon.pids" ] && for p in $(cat "$dir/daemon.pids"); do
    kill -9 "$p" 2> /dev/null || true
  done
  # A deleted namespace frees its veth asynchronously: wait for the host sides to vanish.
  for _ in $(seq 100); do
    ip -o link show 2> /dev/null | grep -qE "^[0-9]+: ${name}v[0-9]+[@:]" || break
    sleep 0.1
  done
  ip -o link show 2> /dev/null | grep -oE "^[0-9]+: ${name}v[0-9]+" | awk '{print $2}' |
    while read -r l; do ip link del "$l" 2> /dev/null || true; done
  ip link del "${name}br" 2> /dev/null || true
  [ -n "$dir" ] && case $dir in /tmp/loom_cluster.*) rm -rf "$dir" ;; esac
  rm -f "$state"
}

# cluster_up NODES RATE [RANKS_PER_NODE]
cluster_up() {
  local n=${1:?nodes} rate=${2:-10gbit} k="" i burst limit name
  CLUSTER_RANKS_PER_NODE=${3:-1}
  [ "$n" -ge 1 ] && [ "$n" -le 8 ] || { echo "cluster_up: 1-8 nodes, not $n" >&2; return 1; }
  case $rate in
    1gbit) burst=125kb limit=500kb ;;
    10gbit) burst=1250kb limit=5000kb ;;
    *) echo "cluster_up: rate 1gbit or 10gbit, not $rate" >&2; return 1 ;;
  esac
  cluster_check
  mkdir -p "$CLUSTER_STATE"
  exec {_cluster_lock}> "$CLUSTER_STATE/.lock"
  flock "$_cluster_lock"
  # Instances left by owners that died (killed by a CTest timeout, say).
  for f in "$CLUSTER_STATE"/lc*; do
    [ -f "$f" ] || continue
    _cluster_alive "$(sed -n 1p "$f")" || _cluster_destroy "$(basename "$f")"
  done
  local used
  used="$(ip -4 addr) $(ip route) $(ip -o link show) $(ip netns list)"
  for i in $(seq 10 99); do
    if ! grep -qE "10\.213\.$i\.|lc${i}(n|v|br)" <<< "$used" && [ ! -e "$CLUSTER_STATE/lc$i" ]; then k=$i; break; fi
  done
  [ -n "$k" ] || { flock -u "$_cluster_lock"; echo "cluster_up: no free subnet in 10.213.10-99.0/24" >&2; return 1; }
  name=lc$k
  CLUSTER_NAME=$name
  CLUSTER_SUBNET=10.213.$k.0/24
  CLUSTER_DIR=$(mktemp -d /tmp/loom_cluster.XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  printf '%s\n%s\n' "$$" "$CLUSTER_DIR" > "$CLUSTER_STATE/$name"
  _cluster_trap
  ip link add "${name}br" type bridge
  ip addr add "10.213.$k.254/24" dev "${name}br"
  ip link set "${name}br" up
  flock -u "$_cluster_lock"
  exec {_cluster_lock}>&-
  CLUSTER_NODES=() CLUSTER_IPS=()
  for i in $(seq "$n"); do
    local ns=${name}n$i ip=10.213.$k.$i v=${name}v$i
    ip netns add "$ns"
    ip link add "$v" type veth peer name eth0 netns "$ns"
    ip link set "$v" master "${name}br" up
    ip netns exec "$ns" ip addr add "$ip/24" dev eth0
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" limit "$limit"
    tc qdisc add dev "$v" root tbf rate "$rate" burst "$burst" limit "$limit"
    [ -n "${CLUSTER_TCP_RETRIES2:-}" ] && ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2="$CLUSTER_TCP_RETRIES2"
    CLUSTER_NODES+=("$ns") CLUSTER_IPS+=("$ip")
    printf '%s %s\n' "$ip" "$ns" >> "$CLUSTER_DIR/nodes"
    echo "$ip slots=$CLUSTER_RANKS_PER_NODE" >> "$CLUSTER_DIR/hostfile"
  done
  _cluster_write_scripts
  echo "cluster: ${CLUSTER_NODES[*]} at ${CLUSTER_IPS[*]} ($CLUSTER_SUBNET, $rate each way, $CLUSTER_RANKS_PER_NODE slots per node)"
}

# Runs cluster_down on exit (after whatever EXIT trap the script had), and exits on INT/TERM.
_cluster_trap() {
  local prev
  prev=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  case $prev in *_cluster_on_exit*) return ;; esac
  # shellcheck disable=SC2064
  trap "_cluster_rc=\$?; ${prev:+$prev;} _cluster_on_exit \$_cluster_rc" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# The rsh agent (Open MPI calls it as `agent HOST COMMAND...`), and CLUSTER_MPIRUN.
_cluster_write_scripts() {
  cat > "$CLUSTER_DIR/agent" <<AGENT
#!/bin/sh
# Open MPI's rsh agent for the test cluster: runs the command in node \$1's network namespace
# with the node's name as hostname (a UTS namespace of its own).
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h || \$2 == h {print \$2}' "$CLUSTER_DIR/nodes")
[ -n "\$ns" ] || { echo "agent: \$host is not a node of this test cluster" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
AGENT
  local yield=""
  [ "$CLUSTER_RANKS_PER_NODE" -gt 1 ] && yield="--mca mpi_yield_when_idle 1"
  cat > "$CLUSTER_DIR/mpirun" <<MPIRUN
#!/bin/bash
# mpirun across the test cluster $CLUSTER_NAME (${CLUSTER_NODES[*]}): TCP between nodes on
# $CLUSTER_SUBNET only; Open MPI's keepalive defaults from scripts/mpi_env.sh reach the remote
# orted through the environment the agent passes on.
source "$CLUSTER_SRC/scripts/mpi_env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun --hostfile "$CLUSTER_DIR/hostfile" --mca plm_rsh_agent "$CLUSTER_DIR/agent" \\
  --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self,vader \\
  --mca btl_tcp_if_include $CLUSTER_SUBNET --mca oob_tcp_if_include $CLUSTER_SUBNET $yield \\
  --oversubscribe --bind-to none "\$@"
MPIRUN
  chmod +x "$CLUSTER_DIR/agent" "$CLUSTER_DIR/mpirun"
  CLUSTER_MPIRUN=$CLUSTER_DIR/mpirun
}

cluster_mpirun() { "$CLUSTER_MPIRUN" "$@"; }

# The EXIT trap: a script that would have passed fails if processes of its jobs were still
# running in the nodes (waited for 5 s, then killed by cluster_down).
_cluster_on_exit() {
  local rc=$1
  cluster_down
  [ "${CLUSTER_LEFTOVERS:-0}" -gt 0 ] && [ "$rc" = 0 ] && { echo "FAIL: $CLUSTER_LEFTOVERS processes were left running in the test cluster" >&2; exit 1; }
  return 0
}

cluster_down() {
  [ -n "$CLUSTER_NAME" ] || return 0
  local -
  set +e +o pipefail
  local left
  for _ in $(seq 25); do left=$(cluster_all_pids); [ -z "$left" ] && break; sleep 0.2; done
  CLUSTER_LEFTOVERS=0
  if [ -n "$left" ]; then
    echo "cluster_down: killing processes left running in the nodes:" >&2
    for p in $left; do echo "  $(cluster_node_of_pid "$p") pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | cut -c1-160)" >&2; done
    CLUSTER_LEFTOVERS=$(cluster_kill_leftovers)
  fi
  type cluster_slurm_down > /dev/null 2>&1 && cluster_slurm_down
  _cluster_destroy "$CLUSTER_NAME"
  CLUSTER_NAME=""
}

# Runs CMD in NODE's network namespace (nsenter: /sys stays the host's).
cluster_exec() { local ns=$1; shift; nsenter --net="/var/run/netns/$ns" "$@"; }

# Every process in NODE's namespace (daemons included), one pid a line.
cluster_node_pids() { ip netns pids "$1" 2> /dev/null || true; }
# The loom processes (ranks) in NODE's namespace.
cluster_loom_pids() {
  local p
  for p in $(cluster_node_pids "$1"); do
    [ "$(ps -o comm= -p "$p" 2> /dev/null)" = loom ] && echo "$p"
  done
  return 0
}
# The pid of world rank RANK (from OMPI_COMM_WORLD_RANK / PMIX_RANK in its environment).
cluster_rank_pid() {
  local ns p
  for ns in "${CLUSTER_NODES[@]}"; do
    for p in $(cluster_loom_pids "$ns"); do
      tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -xE "(OMPI_COMM_WORLD_RANK|PMIX_RANK)=$1" > /dev/null && { echo "$p"; return 0; }
    done
  done
  return 1
}
# The node (namespace) a process runs in.
cluster_node_of_pid() {
  local ns
  for ns in "${CLUSTER_NODES[@]}"; do
    cluster_node_pids "$ns" | grep -x "$1" > /dev/null && { echo "$ns"; return 0; }
  done
  return 1
}
# Cuts / restores NODE's link (its host-side veth).
cluster_cut_link() { ip link set "${CLUSTER_NAME}v${1##*n}" down; }
cluster_restore_link() { ip link set "${CLUSTER_NAME}v${1##*n}" up; }

# Every non-daemon process in the nodes, plus any extra pids given (mpirun on the host, say).
cluster_all_pids() {
  local ns p
  for ns in "${CLUSTER_NODES[@]}"; do
    for p in $(cluster_node_pids "$ns"); do
      [ -f "$CLUSTER_DIR/daemon.pids" ] && grep -qx "$p" "$CLUSTER_DIR/daemon.pids" && continue
      # CLUSTER_EXCEPT="NODE COMM": not that node's processes named COMM (see faults.sh).
      [ -n "${CLUSTER_EXCEPT:-}" ] && [ "$ns $(ps -o comm= -p "$p" 2> /dev/null)" = "$CLUSTER_EXCEPT" ] && continue
      echo "$p"
    done
  done
  for p in "$@"; do _cluster_alive "$p" && echo "$p"; done
  return 0
}

# Waits until no process of cluster_all_pids EXTRA... is left, at most until T0 + LIMIT seconds
# (T0 from date +%s.%N). Prints the seconds from T0 to the last one gone; returns 1 (listing what
# is left, which cluster_kill_leftovers then ends) if the deadline passed first.
cluster_wait_all_gone() {
  local t0=$1 limit=$2 left now
  shift 2
  while :; do
    left=$(cluster_all_pids "$@")
    now=$(date +%s.%N)
    [ -z "$left" ] && { awk -v a="$t0" -v b="$now" 'BEGIN {printf "%.1f\n", b - a}'; return 0; }
    awk -v a="$t0" -v b="$now" -v l="$limit" 'BEGIN {exit !(b - a > l)}' && break
    sleep 0.2
  done
  echo "still running $limit s after the fault:" >&2
  local p
  for p in $left; do echo "  $(cluster_node_of_pid "$p" || echo host) pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | cut -c1-160)" >&2; done
  return 1
}

# Kills (-9) whatever is still running in the nodes (and the extra pids); prints how many.
cluster_kill_leftovers() {
  local left n=0 p
  left=$(cluster_all_pids "$@")
  for p in $left; do kill -9 "$p" 2> /dev/null && n=$((n + 1)); done
  echo "$n"
}

source "$CLUSTER_SRC/tests/cluster/netns_slurm.sh"
