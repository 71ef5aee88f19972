#!/usr/bin/env bash
# mpirun with Loom's multi-node settings (scripts/mpi_env.sh: Open MPI's out-of-band keepalive, so
# a dead node or link ends the job in seconds). Takes mpirun's own arguments:
#   scripts/loom_mpirun.sh -np 16 --hostfile hosts build/loom train configs/gpt2-124m.yaml
#   LOOM_NET=10.1.0.0/16 scripts/loom_mpirun.sh ...   # MPI's TCP traffic and its out-of-band
#                                                      # channel on that network only
# Several ranks per node on fewer cores than ranks: add --mca mpi_yield_when_idle 1
# (docs/multinode.md).
set -euo pipefail
source "$(dirname "$0")/mpi_env.sh"
net=()
if [ -n "${LOOM_NET:-}" ]; then
  net=(--mca btl_tcp_if_include "$LOOM_NET" --mca oob_tcp_if_include "$LOOM_NET")
fi
exec mpirun "${net[@]}" "$@"
