# The communication volume the trainer logs per step (metrics.jsonl's comm_*_mb, rank 0) against
# the theory of docs/parallelism.md, "Communication volume", for the tiny recipe on 1 and 2 ranks,
# one micro-batch per rank and step at dp 2 so that every ZeRO stage moves each byte once:
#   P = the parameters' bytes (fp32), from the recipe's shape;
#   1 rank:    all-reduce payload P, no wire bytes (a group of one);
#   dp 2:      zero 0 all-reduces P, wire 2(p-1)/p P = P; zero 1 (and 2) reduce-scatter and
#              all-gather P, the same wire bytes; zero 3 1.5 times them (zero 2 and 3 where this
#              build's recipes accept them);
#   tp 2:      per micro-batch 4 all-reduces of B*T*C per layer (Megatron's f and g, forward and
#              backward), one each for the embedding's forward and the head's backward, and the
#              vocabulary-parallel loss's 3 B*T floats;
#   pp 2:      per micro-batch one activation sent and one gradient received (B*T*C each), and the
#              tied embedding's gradient all-reduced between the two stages;
#   zero 1 with bf16 reduction: the reduce-scatter of P/2, the fp32 all-gather of P.
# `loom plan`'s data-parallel volume for each dp layout must be the run's (docs/plan.md).
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
train() {  # name ranks overrides...
  local name=$1 np=$2
  shift 2
  mpi -np "$np" "$LOOM" train configs/tiny.yaml --set train.steps=3 --set log.every=1 --set log.eval_every=0 \
    --set log.dir="$WORK/$name" "$@" > "$WORK/$name.out" || { cat "$WORK/$name.out"; fail "$name: loom train failed"; }
  # What `loom plan` predicts for the same layout's data-parallel volume (MB per rank, 1 decimal).
  "$LOOM" plan configs/tiny.yaml --nodes 1 --gpus-per-node "$np" --gpu cpu "$@" |
    sed -n "s/.*dp comm exposed [0-9.]* ms (\([0-9.]*\) MB per rank).*/$name \1/p" >> "$WORK/plan.txt"
}
train single 1
train dp2_zero0 2 --set train.global_batch=16
train dp2_zero1 2 --set train.global_batch=16 --set parallel.zero=1
stages="0 1"
for z in 2 3; do  # the stages this build's recipes accept
  if "$LOOM" config configs/tiny.yaml --set parallel.zero=$z > /dev/null 2>&1; then
    train dp2_zero$z 2 --set train.global_batch=16 --set parallel.zero=$z
    stages="$stages $z"
  fi
done
# bf16 gradient reduction under ZeRO-1: the reduce-scatter in bf16, the parameters' all-gather fp32.
train dp2_zero1_bf16 2 --set train.global_batch=16 --set parallel.zero=1 --set parallel.grad_reduce_dtype=bf16
train tp2 2 --set parallel.tp=2
train pp2 2 --set parallel.pp=2
python3 - "$WORK" $stages <<'PY'
import json, sys
work, stages = sys.argv[1], [int(s) for s in sys.argv[2:]]
L, C, T, V, Vpad, B, accum1 = 4, 128, 64, 257, 384, 8, 4   # configs/tiny.yaml; vocab padded to 384
P = 4 * (Vpad * C + T * C + L * (2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C) + 2 * C)
MB = 1e6
def last(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    assert len(rows) == 3, (name, len(rows))
    for k in ("comm_allreduce_mb", "comm_reducescatter_mb", "comm_allgather_mb", "comm_sendrecv_mb", "comm_wire_mb"):
        assert all(r[k] == rows[0][k] for r in rows), f"{name}: {k} differs between steps: {[r[k] for r in rows]}"
    return rows[-1]
def near(got_mb, want_bytes, what, rel=1e-4):
    ok = abs(got_mb * MB - want_bytes) <= rel * want_bytes + 1
    print(f"{what:55s} {got_mb:12.6f} MB, theory {want_bytes / MB:12.6f} MB {'ok' if ok else 'WRONG'}")
    assert ok, what
s = last("single")
near(s["comm_allreduce_mb"], P, "1 rank: all-reduce payload = P")
near(s["comm_wire_mb"], 0, "1 rank: wire bytes")
wire = {}
for z in stages:
    r = last(f"dp2_zero{z}")
    wire[z] = r["comm_wire_mb"]
    if z == 0:
        near(r["comm_allreduce_mb"], P, "dp 2 zero 0: all-reduce payload = P")
        near(r["comm_wire_mb"], P, "dp 2 zero 0: wire = 2(p-1)/p P")
    elif z in (1, 2):
        near(r["comm_reducescatter_mb"], P, f"dp 2 zero {z}: reduce-scatter payload = P")
        near(r["comm_allgather_mb"], P, f"dp 2 zero {z}: all-gather payload = P")
        near(r["comm_wire_mb"], wire[0] * MB, f"dp 2 zero {z}: wire = zero 0's")
    else:  # units and buckets may part the buffer differently: within 0.5%
        near(r["comm_allgather_mb"] + r["comm_reducescatter_mb"], 3 * P, "dp 2 zero 3: all-gather + reduce-scatter = 3P", 5e-3)
        near(r["comm_wire_mb"], 1.5 * wire[0] * MB, "dp 2 zero 3: wire = 1.5 x zero 0's", 5e-3)
r = last("dp2_zero1_bf16")
near(r["comm_reducescatter_mb"], P / 2, "dp 2 zero 1 bf16 reduction: reduce-scatter payload = P/2")
near(r["comm_allgather_mb"], P, "dp 2 zero 1 bf16 reduction: all-gather payload = P (fp32)")
near(r["comm_wire_mb"], 0.75 * P, "dp 2 zero 1 bf16 reduction: wire = (p-1)/p (P/2 + P)")
# loom plan's data-parallel volume for the same layouts (it prints 1 decimal).
plan = dict(line.split() for line in open(f"{work}/plan.txt"))
for name in [f"dp2_zero{z}" for z in stages] + ["dp2_zero1_bf16"]:
    got, want = float(plan[name]), last(name)["comm_wire_mb"]
    print(f"{name}: loom plan predicts {got} MB per rank of data-parallel traffic, the run sent {want:.3f}")
    assert abs(got - want) <= 0.051, f"{name}: loom plan's {got} MB against the run's {want} MB"
BTC, N = B * T * C, B * T
t = last("tp2")
near(t["comm_wire_mb"], accum1 * 4 * ((4 * L + 2) * BTC + 3 * N), "tp 2: (4L + 2) B*T*C + 3 B*T floats per micro-batch")
p = last("pp2")
near(p["comm_sendrecv_mb"], accum1 * 4 * 2 * BTC, "pp 2 stage 0: sends + receives, 2 B*T*C per micro-batch")
near(p["comm_wire_mb"], accum1 * 4 * BTC + 4 * Vpad * C, "pp 2 stage 0: received B*T*C per micro-batch + tied wte")
PY
echo PASS
