# The tiny recipe trains on real text (the fortunes corpus, bytes): the loss falls from ~5.5 to
# below 2.5 nats (train and validation), and two runs give bitwise-identical losses, learning rates and grad norms.
source "$(dirname "$0")/common.sh"
corpus
cd "$SRC"
for run in a b; do
  mpi -np 1 "$LOOM" train configs/tiny.yaml --set log.dir="$WORK/$run" --set log.every=1 > "$WORK/$run.out"
done
tail -n 3 "$WORK/a.out"
strip() { sed -E 's/, "tokens_per_s".*//' "$1"; }  # timing fields differ run to run
diff <(strip "$WORK/a/metrics.jsonl") <(strip "$WORK/b/metrics.jsonl") > /dev/null || fail "two runs differ"
python3 - "$WORK/a/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"):
    assert k in rows[0], f"metrics.jsonl lacks {k}"
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-20:]) / 20
print(f"first loss {first:.3f}, mean of the last 20 {last:.3f}")
assert first > 5.0, f"initial loss {first} is not ~ln(256)=5.55"
assert last < 2.5, f"the loss did not fall below 2.5 nats: {last}"
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(vals) == 3, f"expected val_loss at steps 100, 200, 300, got {len(vals)}"
assert vals[-1] < 2.5 and vals[-1] < vals[0], f"val_loss did not fall: {vals}"
assert all(r["data_wait_ms"] < 50 for r in rows[1:]), "the loader stalled steps"
print(f"val_loss {vals}")
PY
echo PASS
