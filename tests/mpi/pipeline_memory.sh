# 1F1B bounds the activations a stage holds: at pp = 4 with 8 micro-batches, stage r keeps at
# most 4 - r micro-batches in flight, and its allocated activation memory (and so its peak RSS)
# falls with r.
source "$(dirname "$0")/../cli/common.sh"
corpus
cd "$SRC"
export OMP_NUM_THREADS=1
mpi -np 4 "$LOOM" train configs/tiny.yaml --set parallel.pp=4 --set train.micro_batch=4 --set train.steps=3 \
  --set log.eval_every=0 --set log.dir="$WORK/run" > "$WORK/out"
grep "in flight" "$WORK/out"
python3 - "$WORK/out" <<'PY'
import re, sys
rows = [tuple(float(x) for x in m) for m in
        re.findall(r"stage (\d+): (\d+) in flight, activations ([0-9.]+) MB, optimizer state [0-9.]+ MB, peak RSS ([0-9.]+) MB",
                   open(sys.argv[1]).read())]
assert len(rows) == 4, rows
for stage, inflight, act, rss in rows:
    assert inflight == 4 - stage, f"stage {stage} keeps {inflight} micro-batches, expected {4 - stage}"
acts = [r[2] for r in rows]
assert all(a > b for a, b in zip(acts, acts[1:])), f"activation memory does not fall with the stage: {acts}"
print("in flight", [int(r[1]) for r in rows], "activations MB", acts, "peak RSS MB", [r[3] for r in rows])
PY
echo PASS
