# 1F1B bounds the activations a stage holds: at pp = 4 with 8 micro-batches, stage r keeps at
# most 4 - r micro-batches in flight, and its allocated activation memory (and so its peak RSS)
# falls with r.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
mpi -np 4 "$LOOM" train configs/tiny.yaml --set parallel.pp=4 --set train.micro_batch=4 --set train.steps=3 \
  --set log.eval_every=0 --set log.dir="$WORK/run" > "$WORK/out"
sed -n '/memory per rank, at the end/,/model state/p' "$WORK/out" | head -6
python3 - "$WORK/run/run.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["sessions"][-1]["memory_end"]
assert len(rows) == 4, rows
for r in rows:
    assert r["in_flight"] == 4 - r["stage"], f"stage {r['stage']} keeps {r['in_flight']} micro-batches, expected {4 - r['stage']}"
acts = [r["activations_mb"] for r in rows]
assert all(a > b for a, b in zip(acts, acts[1:])), f"activation memory does not fall with the stage: {acts}"
print("in flight", [r["in_flight"] for r in rows], "activations MB", acts, "peak RSS MB", [r["peak_rss_mb"] for r in rows])
PY
echo PASS
