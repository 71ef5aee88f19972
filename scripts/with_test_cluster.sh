#!/usr/bin/env bash
# Runs a command on a simulated cluster of network namespaces (tests/cluster/netns_cluster.sh;
# root only), then tears the cluster down, whatever the command's outcome:
#
#   scripts/with_test_cluster.sh --nodes 2 --rate 1gbit [--ranks-per-node K] [--slurm] -- CMD...
#
# CMD sees CLUSTER_MPIRUN (a script: mpirun across the nodes, K slots each, TCP on the cluster's
# subnet; give it -np and --map-by as needed, e.g. `$CLUSTER_MPIRUN -np 2 --map-by ppr:1:node
# build/loom bench comm`), CLUSTER_NODES (the node names, space-separated; also their hostnames),
# CLUSTER_IPS, CLUSTER_SUBNET and CLUSTER_RATE; with --slurm also SLURM_CONF (a Slurm cluster of
# the nodes, one slurmd each). Exits with CMD's status, or 77 when the machine cannot host the
# cluster (not root, no network namespaces).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
nodes=2 rate=1gbit per_node=1 slurm=0
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ $# -gt 0 ] || usage
# shellcheck source=../tests/cluster/netns_cluster.sh
source "$src/tests/cluster/netns_cluster.sh"
cluster_up "$nodes" "$rate" "$per_node" >&2
[ "$slurm" = 1 ] && cluster_slurm_up >&2
export CLUSTER_MPIRUN CLUSTER_SUBNET CLUSTER_NAME CLUSTER_DIR CLUSTER_RATE=$rate
# Arrays cannot be exported: the command gets them as space-separated strings.
nodes_list="${CLUSTER_NODES[*]}" ips_list="${CLUSTER_IPS[*]}"
unset CLUSTER_NODES CLUSTER_IPS
export CLUSTER_NODES=$nodes_list CLUSTER_IPS=$ips_list
set +e
"$@"
rc=$?
set -e
exit "$rc"
