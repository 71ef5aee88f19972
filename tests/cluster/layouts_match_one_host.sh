# Across nodes, a layout trains exactly as on one host: the tests' small model (SMALL in
# tests/cli/common.sh), 10 steps, on the test
# cluster (network namespaces, 10 Gbit links, TCP between nodes) and under plain mpirun on this
# host, must give bitwise the same loss and grad norm at every step:
#   dp 2 over 2 nodes (1 rank each); dp 4 over 4 nodes;
#   tp 2 inside a node x pp 2 across 2 nodes (2 ranks per node: Loom's grid puts tp ranks
#   adjacent, and mpirun fills a node's slots in rank order, so each tp pair shares a node);
#   tp 2 x dp 2 x pp 2 over 4 nodes (2 ranks per node, each node one tp pair).
# run.json must list the ranks on the expected nodes (their own hostnames), and Open MPI's BTL
# log (btl_base_verbose) must show TCP connections between the nodes' addresses.
#   layouts_match_one_host.sh LOOM SRC MPIEXEC
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/netns_cluster.sh"
cluster_check
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
cluster_up 4 10gbit 2
steps=10
args=(train configs/tiny.yaml "${SMALL[@]}" --set train.steps=$steps --set log.every=1 --set log.eval_every=0)

# name ranks ranks-per-node overrides
layouts=("dp2:2:1:" "dp4:4:1:" "tp2_pp2:4:2:--set parallel.tp=2 --set parallel.pp=2"
         "tp2_dp2_pp2:8:2:--set parallel.tp=2 --set parallel.pp=2")
for layout in "${layouts[@]}"; do
  IFS=: read -r name np per_node overrides <<< "$layout"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  mpi -np "$np" "$LOOM" "${args[@]}" $overrides --set log.dir="$WORK/$name.host" > "$WORK/$name.host.out" 2>&1 ||
    { cat "$WORK/$name.host.out"; fail "$name on one host failed"; }
  t1=$(date +%s.%N)
  verbose=()
  [ "$name" = dp2 ] && verbose=(--mca btl_base_verbose 30)
  # shellcheck disable=SC2086
  cluster_mpirun -np "$np" --map-by "ppr:$per_node:node" "${verbose[@]}" "$LOOM" "${args[@]}" $overrides \
    --set log.dir="$WORK/$name.cluster" > "$WORK/$name.cluster.out" 2>&1 ||
    { cat "$WORK/$name.cluster.out"; fail "$name on the cluster failed"; }
  t2=$(date +%s.%N)
  awk -v n="$name" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {printf "%s: one host %.1f s, cluster %.1f s\n", n, b - a, c - b}'
done

# TCP between the nodes: the BTL log of the dp2 run names the peers' addresses on our subnet.
prefix=${CLUSTER_SUBNET%.0/24}
grep -E "btl:tcp.*$prefix\.[0-9]+" "$WORK/dp2.cluster.out" | head -3 | sed 's/^/dp2 btl: /'
grep -qE "btl:tcp.*$prefix\.[0-9]+" "$WORK/dp2.cluster.out" || { cat "$WORK/dp2.cluster.out"; fail "dp2: no TCP BTL traffic between the nodes in the log"; }

python3 - "$WORK" "$CLUSTER_NAME" "${layouts[@]}" <<'PY'
import json, sys
work, cluster, layouts = sys.argv[1], sys.argv[2], sys.argv[3:]
def rows(d):
    return [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
def hosts(d):
    s = json.load(open(f"{d}/run.json"))["sessions"][-1]
    ranks = s.get("ranks") or s.get("hosts")
    return [r["host"] if isinstance(r, dict) else r for r in ranks]
for layout in layouts:
    name, np, per_node = layout.split(":")[:3]
    np, per_node = int(np), int(per_node)
    a, b = rows(f"{work}/{name}.host"), rows(f"{work}/{name}.cluster")
    assert len(a) == len(b) > 0, f"{name}: {len(a)} steps on one host, {len(b)} on the cluster"
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm"):
            assert x[k] == y[k], f"{name} step {x['step']} {k}: cluster {y[k]!r} != one host {x[k]!r}"
    h = hosts(f"{work}/{name}.cluster")
    want = [f"{cluster}n{r // per_node + 1}" for r in range(np)]
    assert h == want, f"{name}: ranks ran on {h}, expected {want}"
    print(f"{name}: {len(a)} steps bitwise equal to one host (final loss {b[-1]['loss']!r}); ranks on {' '.join(h)}")
PY
echo PASS
